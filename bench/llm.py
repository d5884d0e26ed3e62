"""A 7B-shaped decoder (issue 62): the fold against a copy of its files, under memory limits,
its check in stages, the peers on the same file, and how fast onnxruntime opens the output.

Two models, built once into ``--cache`` by ``bench/llm_model.py`` (never more than one weight in
memory): ``llama7b``, a Llama-style decoder of 7B sizes as TorchScript writes one (32 layers,
hidden 4096, MLP 11008, 32/8 heads, vocabulary 32000, rotary, a KV cache, SwiGLU, float16,
11.9 GB of external data, every projection transposed in the graph), and ``slice8``, its 8
first layers' projections and MLPs alone (2.8 GB, every weight transposed).

Measured, each a whole child process (``bench/process.py``), one at a time:

============  ==================================================================================
``copy``      ``cp`` of the model's files + ``sync``, the page cache dropped first (root: else
              said): what writing a model of this size costs at least on this disk
``fold``      ``python -m onnxfold optimize IN -o OUT -q`` + ``sync``, caches dropped first;
              ``--repeat`` rounds interleaved with ``copy``; medians, and the largest peak RSS
``busy``      one more round of both beside a CPU-bound process (one core busy)
``1 GiB``     the fold in a 1 GiB memory cgroup: the nodes it leaves, against no limit
``check``     ``optimize IN -o OUT --check 1`` in memory cgroups (8 and 4 GiB for llama7b, 2
              GiB for slice8), after the fold alone (``-q``) in the same cgroup, the page
              cache dropped before each: its wall less the fold's there (the check's own), the
              cgroup's peak, its verdict
``ort``       onnxruntime's offline basic optimization of the same file, in a cgroup of
              ``--peer-memory`` (it loads the whole model: its wall and peak, or how it fails)
``onnxsim``   onnxsim's library call (``--peers-python``), the same way
``session``   onnxruntime's session creation, the output's against the original's (warm, median
              of 5 alternating), on slice8 (llama7b's session needs ~24 GB) and on a dynamo
              export of BERT-base with ``.onnx.data``
============  ==================================================================================

The tables go into ``bench/README.md`` (between its ``llm`` markers); ``--json`` writes every
number.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.machine import dated
from bench.process import ChildRun, median, run_child
from bench.readme import replace_section
from bench.tools import PEER_CODE

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = Path.home() / ".cache" / "onnxfold-bench" / "llm"
MODELS = {"llama7b": [], "slice8": ["--layers", "8", "--slice"]}
SESSIONS = ("slice8",)  # the 7B decoder's session needs ~24 GB: not opened here
CHECK_LIMITS = {"llama7b": (8, 4), "slice8": (2,)}  # GiB
GiB = 1 << 30

_SESSION = """
import sys, time, onnxruntime as ort
options = ort.SessionOptions()
options.log_severity_level = 3
t = time.perf_counter()
ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
print(time.perf_counter() - t)
"""


# -- the machine ------------------------------------------------------------------------------
def drop_caches() -> bool:
    """Write dirty pages out and drop the page cache (False where this process may not)."""
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        return False
    return True


@contextlib.contextmanager
def memory_cgroup(limit: int) -> Iterator[str | None]:
    """A memory cgroup of ``limit`` bytes for children to join (its ``cgroup.procs``), or
    None where none can be made here (the run is then said unlimited)."""
    from onnxfold.host.memory_limits import hierarchies

    for found in hierarchies():
        v2 = found.limit_file == "memory.max"
        parent = os.path.join(found.mount, found.path.lstrip("/"))
        directory = os.path.join(parent, f"onnxfold-bench-{uuid.uuid4().hex[:8]}")
        try:
            os.mkdir(directory)
            with open(os.path.join(directory, found.limit_file), "w") as f:
                f.write(str(limit))
            if not v2 and os.path.exists(os.path.join(directory, "memory.swappiness")):
                with open(os.path.join(directory, "memory.swappiness"), "w") as f:
                    f.write("0")
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(directory)
            continue
        try:
            yield os.path.join(directory, "cgroup.procs")
        finally:
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        return
    yield None


def cgroup_peak(procs: str | None) -> float | None:
    """The peak usage (MiB) of the cgroup whose ``cgroup.procs`` is ``procs``."""
    if procs is None:
        return None
    directory = os.path.dirname(procs)
    for name in ("memory.peak", "memory.max_usage_in_bytes"):
        with contextlib.suppress(OSError, ValueError), \
                open(os.path.join(directory, name)) as f:
            return int(f.read()) / (1 << 20)
    return None


@contextlib.contextmanager
def busy_neighbour() -> Iterator[None]:
    """A CPU-bound process beside the block (one core)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


# -- one child ----------------------------------------------------------------------------
def run_in(command: list[str], stem: Path, timeout: float, procs: str | None = None,
         synced: bool = False) -> ChildRun:
    """``command`` (then ``sync`` where ``synced``) as one measured child, in the cgroup of
    ``procs`` where given."""
    if synced:
        command = ["bash", "-c", '"$@" && sync', "-", *command]
    if procs is not None:
        command = ["bash", "-c", f'echo $$ > {procs} && exec "$@"', "-", *command]
    return run_child(command, stem, timeout, cwd=ROOT)


def _fold_cmd(src: Path, out: Path, *more: str) -> list[str]:
    return [sys.executable, "-m", "onnxfold", "optimize", str(src), "-o", str(out), *more]


def remove_output(path: Path) -> None:
    """An output and its data files."""
    for found in path.parent.glob(path.name + "*"):
        found.unlink()


def nodes_left(path: Path) -> int:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return sum(1 for n in model.graph.node if n.op_type != "Constant")


def _files(src: Path) -> list[str]:
    return [str(p) for p in (src, Path(str(src) + ".data")) if p.exists()]


# -- the measurements -----------------------------------------------------------------------
def fold_against_copy(src: Path, work: Path, repeat: int, timeout: float,
                      neighbour: bool = False) -> dict[str, Any]:
    """``repeat`` interleaved rounds of ``copy`` and ``fold`` (caches dropped before each)."""
    copies, folds = [], []
    out = work / "folded.onnx"
    dropped = True
    for k in range(repeat):
        with busy_neighbour() if neighbour else contextlib.nullcontext():
            target = work / "copied"
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir()
            dropped &= drop_caches()
            copies.append(run_in(["cp", *_files(src), str(target)], work / f"copy{k}", timeout,
                               synced=True))
            shutil.rmtree(target)
            remove_output(out)
            dropped &= drop_caches()
            folds.append(run_in(_fold_cmd(src, out, "-q"), work / f"fold{k}", timeout,
                              synced=True))
    failed = [r for r in [*copies, *folds] if r.rc != 0]
    if failed:
        raise RuntimeError(failed[0].error_line)
    found = {"copy_wall": median([r.wall_s for r in copies]),
             "fold_wall": median([r.wall_s for r in folds]),
             "fold_cpu": median([r.user_s + r.sys_s for r in folds]),
             "fold_peak": max(r.maxrss_mib for r in folds), "dropped": dropped,
             "nodes_left": nodes_left(out)}
    found["ratio"] = found["fold_wall"] / found["copy_wall"]
    remove_output(out)
    return found


def fold_in(src: Path, work: Path, limit: int, timeout: float) -> dict[str, Any]:
    """The fold in a memory cgroup of ``limit`` bytes: what it leaves, its peak."""
    out = work / "limited.onnx"
    with memory_cgroup(limit) as procs:
        run = run_in(_fold_cmd(src, out, "-q"), work / "limited", timeout, procs)
        peak = cgroup_peak(procs)
    found = {"rc": run.rc, "wall": run.wall_s, "peak": run.maxrss_mib, "cgroup_peak": peak,
             "limited": procs is not None, "error": run.error_line,
             "nodes_left": nodes_left(out) if run.rc == 0 else None}
    remove_output(out)
    return found


def check_in(src: Path, work: Path, limit: int, timeout: float) -> dict[str, Any]:
    """``--check 1`` in a memory cgroup of ``limit`` bytes, and the fold alone (``-q``) in
    the same cgroup before it, the page cache dropped before each: the check's own time is
    the difference (a fold measured outside the cgroup ran faster than the one the check
    pays: its dirty pages are written back while the check reads)."""
    out = work / "checked.onnx"
    with memory_cgroup(limit) as procs:
        drop_caches()
        fold = run_in(_fold_cmd(src, out, "-q"), work / f"fold{limit >> 30}", timeout, procs)
        remove_output(out)
        drop_caches()
        run = run_in(_fold_cmd(src, out, "--check", "1"), work / f"check{limit >> 30}", timeout,
                   procs)
        peak = cgroup_peak(procs)
    text = (work / f"check{limit >> 30}.out").read_text(errors="replace")
    lines = text.strip().splitlines()
    windows = next((ln.strip() for ln in lines if "compared stage by stage" in ln), "")
    remove_output(out)
    return {"rc": run.rc, "wall": run.wall_s, "peak": run.maxrss_mib, "cgroup_peak": peak,
            "limited": procs is not None, "verdict": lines[-1] if lines else run.error_line,
            "windows": windows, "error": run.error_line,
            "fold_wall": fold.wall_s if fold.rc == 0 else None}


def peer(tool: str, src: Path, work: Path, limit: int, timeout: float,
         python: str) -> dict[str, Any]:
    """``tool`` (``ort``, ``onnxsim``) on the model, in a cgroup of ``limit`` bytes."""
    out = work / f"{tool}.onnx"
    command = [python, "-c", PEER_CODE[tool], str(src), str(out), "1", str(1 << 30), "-"]
    with memory_cgroup(limit) as procs:
        run = run_in(command, work / tool, timeout, procs)
        peak = cgroup_peak(procs)
    found = {"rc": run.rc, "wall": run.wall_s, "peak": run.maxrss_mib, "cgroup_peak": peak,
             "timed_out": run.timed_out, "error": run.error_line,
             "nodes_left": nodes_left(out) if run.rc == 0 and out.exists() else None}
    remove_output(out)
    return found


def session_creation(original: Path, output: Path, work: Path, timeout: float,
                     limit: int, runs: int = 5) -> dict[str, float]:
    """onnxruntime's session creation (seconds, warm), median of ``runs`` alternating, in a
    cgroup of ``limit`` bytes (a session that does not fit is killed there, not elsewhere)."""
    times: dict[str, list[float]] = {"original": [], "output": []}
    for k in range(runs + 1):  # the first round warms the page cache: not counted
        for name, path in (("original", original), ("output", output)):
            with memory_cgroup(limit) as procs:
                run = run_in([sys.executable, "-c", _SESSION, str(path)],
                           work / f"session_{name}", timeout, procs)
            if run.rc != 0:
                raise RuntimeError(f"session {name}: {run.error_line}")
            if k:
                times[name].append(float((work / f"session_{name}.out").read_text()))
    found = {name: median(values) for name, values in times.items()}
    found["ratio"] = found["output"] / found["original"]
    return found


# -- the run ------------------------------------------------------------------------------
def build(name: str, cache: Path, timeout: float) -> Path:
    """``cache/NAME.onnx`` (and its data), built now unless there."""
    path = cache / f"{name}.onnx"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        run = run_child([sys.executable, "-m", "bench.llm_model", str(path), *MODELS[name]],
                        cache / f"{name}.build", timeout, cwd=ROOT)
        if run.rc != 0:
            raise RuntimeError(f"{name}: {run.error_line}")
    return path


def bert_dynamo(cache: Path, timeout: float) -> Path:
    """A dynamo export of BERT-base with its weights in ``.onnx.data`` (bench/builders.py)."""
    run = run_child([sys.executable, "-m", "bench.builders", "bert_base_dynamo", str(cache)],
                    cache / "bert_base_dynamo.build", timeout, cwd=ROOT)
    if run.rc != 0:
        raise RuntimeError(f"bert_base_dynamo: {run.error_line}")
    return cache / "bert_base_dynamo.onnx"


def measure(a: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    a.work.mkdir(parents=True, exist_ok=True)
    for name in a.models:
        src = build(name, a.cache, a.timeout)
        work = a.work / name
        work.mkdir(exist_ok=True)
        r: dict[str, Any] = results.setdefault(name, {})
        say(f"{name}: fold against copy")
        r["quiet"] = fold_against_copy(src, work, a.repeat, a.timeout)
        say(f"{name}: beside a busy process")
        r["busy"] = fold_against_copy(src, work, 1, a.timeout, neighbour=True)
        say(f"{name}: fold in 1 GiB")
        r["limited"] = fold_in(src, work, GiB, a.timeout)
        for limit in CHECK_LIMITS[name]:
            say(f"{name}: --check 1 in {limit} GiB")
            r[f"check_{limit}"] = check_in(src, work, limit * GiB, a.timeout)
        for tool in ("ort", "onnxsim"):
            say(f"{name}: {tool}")
            python = a.peers_python if tool == "onnxsim" else sys.executable
            r[tool] = peer(tool, src, work, a.peer_memory, a.timeout, python)
        if name in SESSIONS:
            say(f"{name}: session creation")
            out = work / "session.onnx"
            run = run_in(_fold_cmd(src, out, "-q"), work / "session_fold", a.timeout)
            if run.rc == 0:
                r["session"] = session_creation(src, out, work, a.timeout, a.peer_memory)
            remove_output(out)
        if a.json:  # what is measured so far, in case a later step fails
            a.json.write_text(json.dumps(results, indent=1, default=str))
    say("bert_base_dynamo: session creation")
    bert = bert_dynamo(a.cache, a.timeout)
    out = a.work / "bert_folded.onnx"
    run = run_in(_fold_cmd(bert, out, "-q"), a.work / "bert_fold", a.timeout)
    if run.rc == 0:
        results["bert_base_dynamo"] = {"session": session_creation(
            bert, out, a.work, a.timeout, a.peer_memory)}
    remove_output(out)
    return results


def _peer_cell(r: dict[str, Any]) -> str:
    if r.get("rc") == 0:
        return f"{r['wall']:.1f} s · {r['peak']:,.0f} MiB · {r['nodes_left']:,} nodes"
    why = "timed out" if r.get("timed_out") else (r.get("error") or f"exit {r.get('rc')}")
    return f"fails: {why[:120]}"


def _short_verdict(line: str) -> str:
    """The check's last line, its first clause and its count of rewrites validated."""
    parts = [p.strip() for p in line.split(";")]
    return "; ".join(dict.fromkeys([parts[0], parts[-1]]))


def tables(results: dict[str, Any]) -> str:
    lines = ["| model | copy + sync | fold + sync | fold / copy | fold beside a busy core | "
             "fold peak RSS | nodes left (no limit / 1 GiB cgroup) |",
             "|---|--:|--:|--:|--:|--:|--:|"]
    for name, r in results.items():
        if "quiet" not in r:
            continue
        q, b, lim = r["quiet"], r["busy"], r["limited"]
        limited = f"{lim['nodes_left']:,}" if lim["nodes_left"] is not None else \
            f"fails: {lim['error'][:80]}"
        lines.append(f"| {name} | {q['copy_wall']:.1f} s | {q['fold_wall']:.1f} s | "
                     f"**{q['ratio']:.2f}x** | {b['ratio']:.2f}x | {q['fold_peak']:,.0f} MiB | "
                     f"{q['nodes_left']:,} / {limited} |")
    lines += ["", "| model | memory cgroup | `--check 1` | the fold there | its own (check - "
              "fold) | own / fold | peak RSS | cgroup peak (page cache too) | verdict |",
              "|---|--:|--:|--:|--:|--:|--:|--:|---|"]
    for name, r in results.items():
        for key, c in r.items():
            if not key.startswith("check_"):
                continue
            fold = c.get("fold_wall") or r["quiet"]["fold_wall"]  # (an earlier run's json)
            own = c["wall"] - fold
            verdict = _short_verdict(c["verdict"]) if c["rc"] == 0 else \
                f"exit {c['rc']}: {c['error']}"
            peak = f"{c['cgroup_peak']:,.0f} MiB" if c["cgroup_peak"] else "-"
            lines.append(f"| {name} | {key.split('_')[1]} GiB | {c['wall']:.0f} s | {fold:.0f} s "
                         f"| {own:.0f} s | {own / fold:.2f}x | {c['peak']:,.0f} MiB | "
                         f"{peak} | {verdict} |")
    lines += ["", "| model | onnxfold | onnxruntime basic | onnxsim |", "|---|---|---|---|"]
    for name, r in results.items():
        if "ort" not in r:
            continue
        q = r["quiet"]
        lines.append(f"| {name} | {q['fold_wall']:.1f} s · {q['fold_peak']:,.0f} MiB · "
                     f"{q['nodes_left']:,} nodes | {_peer_cell(r['ort'])} | "
                     f"{_peer_cell(r['onnxsim'])} |")
    lines += ["", "| model | session creation: original | output | output / original |",
              "|---|--:|--:|--:|"]
    for name, r in results.items():
        s = r.get("session")
        if s:
            lines.append(f"| {name} | {s['original']:.2f} s | {s['output']:.2f} s | "
                         f"**{s['ratio']:.2f}x** |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench run llm", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds (medians)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                    help="where the models are built (outside git); default: %(default)s")
    ap.add_argument("--work", type=Path, default=Path("/tmp/onnxfold-bench-llm"),
                    help="where the outputs and logs go; default: %(default)s")
    ap.add_argument("--peers-python", default=sys.executable,
                    help="the interpreter that has onnxsim; default: this one")
    ap.add_argument("--peer-memory", type=float, default=16.0,
                    help="GiB of the cgroup the peers run in (they load the whole model)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per child")
    ap.add_argument("--json", type=Path, help="also write every measured number here")
    ap.add_argument("--no-readme", action="store_true",
                    help="print the tables only; do not write them into bench/README.md")
    ap.add_argument("--from-json", type=Path,
                    help="render the tables of an earlier run's --json (nothing measured)")
    a = ap.parse_args(argv)
    a.peer_memory = int(a.peer_memory * GiB)
    if a.from_json:
        results = json.loads(a.from_json.read_text())
        print(tables(results))
        return 0
    results = measure(a, lambda text: print(f"... {text}", flush=True))
    text = tables(results)
    heading = dated(f"python -m bench run llm --repeat {a.repeat}",
                    ("onnxfold", "onnxruntime", "onnx", "onnx-ir"))
    dropped = all(r["quiet"]["dropped"] for r in results.values() if "quiet" in r)
    note = "" if dropped else " (the page cache could not be dropped: not root)"
    print(f"{heading}{note}\n\n{text}")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1, default=str))
    if not a.no_readme:
        replace_section(ROOT / "bench" / "README.md", "llm", f"{heading}{note}\n\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
