"""Fold time of two onnxfold versions on the same models, in the same run (issue #15's "does
not get worse").

Each version is a commit of this repository (``git archive`` into a temporary directory, put on
``PYTHONPATH``, run with this interpreter) or an installed command (``--before-cmd``). Rounds
are interleaved (the order alternates), the first round only warms caches; the table gives
medians and minimums of the whole ``onnxfold optimize`` process (wall, user+sys CPU, peak RSS)
and, with ``--in-process``, the best of several in-process ``optimize(path)`` calls (load and
fold, no save: the part the code under test decides, without the disk's noise).

    python bench/before_after.py --before 3494b2f --after HEAD --repeat 9 \\
        /tmp/corpus/bert_base_ts.onnx /tmp/corpus/gpt2_small_ts.onnx
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_IN_PROCESS = """
import sys, time, gc
from onnxfold.pipeline.optimizer import optimize
optimize(sys.argv[1])
best = 9e9
for _ in range(int(sys.argv[2])):
    gc.collect(); t = time.perf_counter(); optimize(sys.argv[1])
    best = min(best, time.perf_counter() - t)
print(best)
"""


def _snapshot(commit: str, into: Path) -> dict[str, str]:
    """``commit``'s onnxfold (rules in place, as installed) in ``into``: its environment."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "onnxfold", "rules"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "rules").rename(into / "onnxfold" / "rules")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return dict(env, PYTHONPATH=str(into))


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    start = time.perf_counter()
    pid = os.spawnve(os.P_NOWAIT, argv[0], argv, env)
    _, status, usage = os.wait4(pid, 0)
    if status:
        raise SystemExit(f"failed ({status}): {' '.join(argv)}")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--before", default="3494b2f", help="commit (default: issue #15's start)")
    ap.add_argument("--after", default="HEAD")
    ap.add_argument("--before-cmd", help="an installed onnxfold command instead of --before")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--in-process", type=int, default=0, metavar="N",
                    help="also the best of N in-process optimize(path) calls")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        versions: dict[str, tuple[list[str], dict[str, str]]] = {}
        for label, commit in (("before", args.before), ("after", args.after)):
            if label == "before" and args.before_cmd:
                env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
                versions[label] = ([args.before_cmd], env)
                continue
            (Path(tmp) / label).mkdir()
            versions[label] = ([sys.executable, "-m", "onnxfold"],
                               _snapshot(commit, Path(tmp) / label))
        os.chdir(tmp)  # not the repository: its onnxfold/ would shadow the snapshots
        print(f"before {args.before_cmd or args.before}, after {args.after}; medians (min) of "
              f"{args.repeat} interleaved rounds, whole process\n")
        print("| model | version | wall s | CPU s | peak RSS MiB | after / before (wall, CPU) "
              "| in-process optimize(path) s |")
        print("|---|---|--:|--:|--:|--:|--:|")
        for model in args.models:
            runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in versions}
            for i in range(args.repeat + 1):
                order = list(versions) if i % 2 else list(reversed(versions))
                for label in order:
                    argv, env = versions[label]
                    out = os.path.join(tmp, f"{label}.onnx")
                    result = _run([*argv, "optimize", model, "-o", out, "-q"], env)
                    if i:
                        runs[label].append(result)
            med = {k: [statistics.median(c) for c in zip(*v)] for k, v in runs.items()}
            low = {k: [min(c) for c in zip(*v)] for k, v in runs.items()}
            for label in versions:
                best = ""
                if args.in_process and (label == "after" or not args.before_cmd):
                    argv, env = versions[label]
                    best = subprocess.run(
                        [sys.executable, "-c", _IN_PROCESS, model, str(args.in_process)],
                        env=env, check=True, capture_output=True, text=True).stdout.strip()
                    best = f"{float(best):.3f}"
                ratio = "" if label == "before" else (
                    f"{med['after'][0] / med['before'][0]:.2f}x, "
                    f"{med['after'][1] / med['before'][1]:.2f}x")
                wall, cpu, rss = med[label]
                print(f"| {Path(model).name} | {label} | {wall:.3f} ({low[label][0]:.3f}) | "
                      f"{cpu:.3f} ({low[label][1]:.3f}) | {rss:.0f} | {ratio} | {best} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
