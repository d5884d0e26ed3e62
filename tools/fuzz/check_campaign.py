"""The check on random graphs: does ``onnxfold.compare`` pass every fold the fuzzer finds right?

    python -m tools.fuzz.check_campaign [--n 1500] [--start S] [--jobs 2] [--sets 2]

Each seed's model (``tools.fuzz.graphgen``) is folded and compared with the original by the
fuzzer (``tools.fuzz.fuzzcheck``); where the fold is right by that comparison, the check runs
(``onnxfold.compare``, ``--sets`` input sets) and must pass it. A seed is ``ok``, ``wolf``
(the check failed a right fold: the check's defect), ``crash`` (an exception other than
InputError: a bug), ``could-not-run`` (InputError: the check's own inputs do not run the
original, or the machine ran short), ``timeout``, or ``skipped`` (not a right fold, or not a
usable model: the fuzzer's campaign judges those). Each seed runs in a worker process with a
time limit; ``tests/fuzz/test_fuzz_check.py`` holds a hundred seeds in CI.
Exit status: 1 when a seed is ``wolf`` or ``crash``, else 0.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import traceback

SEED_SECONDS = 60


class SeedTimeout(BaseException):
    """A seed past :data:`SEED_SECONDS` (a BaseException: the check, which takes an
    exception out of a run for the model's failure, must not take this one)."""


def _alarm(signum, frame):
    raise SeedTimeout


def judged(seed: int, sets: int = 2) -> tuple[int, str, str]:
    """``seed``'s class and what it said (see the module)."""
    import onnxfold
    from onnxfold.errors import InputError
    from tools.fuzz import fuzzcheck, graphgen

    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, SEED_SECONDS)
    work = tempfile.mkdtemp(prefix="onnxfold-fuzz-check-")
    try:
        try:
            case = graphgen.generate(seed)
        except Exception:  # a generator bug: the fuzzer's campaign counts it
            return seed, "skipped", "generator"
        res = fuzzcheck.check_case(case, work, inspect=False)
        if res.status != "ok":
            return seed, "skipped", f"{res.status} {res.kind}"
        try:
            result = onnxfold.compare(os.path.join(work, "model.onnx"),
                                      os.path.join(work, "folded.onnx"), n=sets)
        except InputError as e:
            return seed, "could-not-run", str(e)[:300]
        except Exception as e:
            where = next((f"{os.path.basename(f.filename)}:{f.lineno}" for f in
                          reversed(traceback.extract_tb(e.__traceback__))
                          if "onnxfold" in f.filename), "")
            return seed, "crash", f"{type(e).__name__}: {str(e)[:200]} ({where})"
        if not result.ok:
            return seed, "wolf", result.summary().splitlines()[-1][:300]
        return seed, "ok", ""
    except (SeedTimeout, fuzzcheck.Timeout):
        return seed, "timeout", ""
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1500)
    parser.add_argument("--start", type=int, default=9300000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sets", type=int, default=2)
    args = parser.parse_args(argv)
    counts: collections.Counter[str] = collections.Counter()
    seeds = range(args.start, args.start + args.n)
    with mp.get_context("fork").Pool(args.jobs, maxtasksperchild=100) as pool:
        for seed, status, said in pool.imap_unordered(
                _judged_star, [(s, args.sets) for s in seeds], chunksize=4):
            counts[status] += 1
            if status in ("wolf", "crash", "timeout"):
                print(f"{seed} {status}: {said}", flush=True)
    print(f"check on random graphs: seeds {args.start}..{args.start + args.n - 1}: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 1 if counts["wolf"] or counts["crash"] else 0


def _judged_star(task: tuple[int, int]) -> tuple[int, str, str]:
    return judged(*task)


if __name__ == "__main__":
    sys.exit(main())
