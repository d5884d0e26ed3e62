"""Differential fuzzing campaign: many random models, folded and compared in onnxruntime.

    python -m tools.fuzz.campaign --n 10000 [--start S] [--jobs 2] [--out /tmp/fuzz_fail] [--shrink]

Each seed generates a valid ONNX model (``tools.fuzz.graphgen``), which is folded with
``onnxfold.optimize(..., FoldOptions(strict=True))`` and compared with the original in
onnxruntime at two values of each symbolic dim (``tools.fuzz.fuzzcheck``). Prints the count
per class (ok, crash, invalid-output, mismatch, discard), the failures grouped by signature
with their seeds, and what onnxfold left foldable (informational). Every failing seed's model
is written to ``--out`` as SEED.onnx with its feeds (SEED.npz, keys ``A/input`` for
assignment A = 0, 1) and SEED.txt. ``--shrink`` reduces one seed per signature (and every
mismatch) to a minimal model (SEED.min.onnx) and prints it.

Each worker is a separate process: a fatal signal (onnxruntime has a few, e.g. SIGFPE on an
empty Scan) costs only that seed, which is classified by the phase it died in (validating the
original: discard; folding: crash; running the folded model: invalid-output).
Exit status: 0 when no seed failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import multiprocessing as mp
import os
import queue
import signal
import sys
import time

import onnx

from tools.fuzz import fuzzcheck, shrink

PHASES = ["idle", "validate", "fold", "compare"]
FATAL_CLASS = {"validate": ("discard", "ort-fatal"), "fold": ("crash", "FatalSignal"),
               "compare": ("invalid-output", "fatal"), "idle": ("crash", "FatalSignal")}


def worker(tasks, results, cur_seed, cur_phase, out_dir, timeout):
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def phase(name):
        cur_phase.value = PHASES.index(name)

    while True:
        seed = tasks.get()
        if seed is None:
            return
        cur_seed.value, cur_phase.value = seed, 0
        res = fuzzcheck.check_seed(seed, timeout=timeout, phase=phase)
        if res.failed:
            with contextlib.suppress(Exception):
                fuzzcheck.save_failure(seed, res, out_dir)
        cur_phase.value = 0
        results.put(res)


def run(args) -> int:
    ctx = mp.get_context("fork")
    tasks, results = ctx.Queue(), ctx.Queue()
    seeds = list(range(args.start, args.start + args.n))
    for s in seeds:
        tasks.put(s)
    def start():
        seed, ph = ctx.Value("q", -1), ctx.Value("i", 0)
        p = ctx.Process(target=worker, args=(tasks, results, seed, ph, args.out, args.timeout),
                        daemon=True)
        p.start()
        return [p, seed, ph]

    slots = [start() for _ in range(args.jobs)]
    done: dict[int, object] = {}
    started = time.perf_counter()
    last = started
    while len(done) < len(seeds):
        try:
            res = results.get(timeout=1.0)
            done[res.seed] = res
        except queue.Empty:
            pass
        for i, (p, seed, ph) in enumerate(slots):
            if not p.is_alive() and len(done) < len(seeds):
                s = seed.value
                if s >= 0 and s not in done:
                    status, kind = FATAL_CLASS[PHASES[ph.value]]
                    res = fuzzcheck.Result(s, status, kind,
                                           f"process killed by signal {-p.exitcode} while "
                                           f"{PHASES[ph.value]}")
                    done[s] = res
                    if res.failed:
                        fuzzcheck.save_failure(s, res, args.out)
                slots[i] = start()
        if not args.quiet and time.perf_counter() - last > 10:
            last = time.perf_counter()
            c = collections.Counter(r.status for r in done.values())
            print(f"  {len(done)}/{len(seeds)} {dict(c)}", file=sys.stderr, flush=True)
    for _ in slots:
        tasks.put(None)
    for p, _, _ in slots:
        p.join(timeout=5)
    elapsed = time.perf_counter() - started
    return report(args, [done[s] for s in seeds], elapsed)


def report(args, results, elapsed) -> int:
    counts = collections.Counter(r.status for r in results)
    print(f"onnxfold differential fuzz: seeds {args.start}..{args.start + args.n - 1} "
          f"({len(results)} models, {elapsed:.1f} s, {args.jobs} jobs)")
    for cls in fuzzcheck.CLASSES:
        print(f"  {cls:15} {counts.get(cls, 0)}")
    discards = collections.defaultdict(list)
    for r in results:
        if r.status == "discard":
            discards[r.kind].append(r.seed)
    for kind, seeds in sorted(discards.items(), key=lambda kv: -len(kv[1])):
        print(f"  discarded ({kind}): {len(seeds)}, seeds {' '.join(map(str, seeds[:12]))}"
              + (" ..." if len(seeds) > 12 else ""))
    groups = collections.defaultdict(list)
    for r in results:
        if r.failed:
            groups[fuzzcheck.signature(r)].append(r)
    if groups:
        print(f"failures ({sum(len(g) for g in groups.values())}, {len(groups)} signatures; "
              f"models in {args.out}):")
        for sig, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            seeds = [r.seed for r in rs]
            more = f" ... (+{len(seeds) - 12})" if len(seeds) > 12 else ""
            print(f"  [{len(rs)}] {sig}")
            print(f"      e.g. {rs[0].line()[:300]}")
            print(f"      seeds: {' '.join(map(str, seeds[:12]))}{more}")
    left = [r for r in results if r.status == "ok" and r.foldable_left]
    if left:
        ops = collections.Counter()
        for r in left:
            ops.update(r.foldable_left)
        print(f"informational: {len(left)} ok models still have constant-foldable nodes: "
              + ", ".join(f"{k} {v}" for k, v in ops.most_common(10)))
    if args.shrink and groups:
        shrink_groups(args, groups)
    return 1 if groups else 0


def shrink_groups(args, groups) -> None:
    picks = []
    for sig, rs in groups.items():
        if sig.startswith("mismatch"):
            picks += rs[:args.shrink_max]
        else:
            picks.append(min(rs, key=lambda r: sum(r.ops.values()) or 1 << 30))
    print(f"shrinking {len(picks)} seeds:")
    for r in picks:
        try:
            _, small, final = shrink.shrink(r.seed)
        except Exception as e:  # the shrinker must never hide the campaign's results
            print(f"  seed {r.seed}: shrink failed: {type(e).__name__}: {e}")
            continue
        if small is None:
            print(f"  seed {r.seed}: no longer fails")
            continue
        path = os.path.join(args.out, f"{r.seed}.min.onnx")
        onnx.save(small.model, path)
        print(f"  seed {r.seed} -> {sum(small.ops.values())} nodes ({path}), "
              f"dims {small.assignments}: {final.line()[:300]}")
        print("    " + shrink.describe(small).replace("\n", "\n    "))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="number of seeds")
    ap.add_argument("--start", type=int, default=0, help="first seed")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--out", default="/tmp/fuzz_fail", help="where failing models go")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per seed")
    ap.add_argument("--shrink", action="store_true", help="reduce failures to minimal models")
    ap.add_argument("--shrink-max", type=int, default=3, help="mismatches shrunk per signature")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
