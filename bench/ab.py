"""Two onnxfold versions on the same models, in the same run: does a change make folding slower?

Each version is a commit of this repository (``git archive`` of ``onnxfold`` and ``rules`` into
a temporary directory, put first on ``PYTHONPATH``, run with this interpreter) or an installed
command (``--before-cmd``). Rounds alternate the order of the two; the first round only warms
the caches. Per model and version: medians (and minimums) of the whole ``onnxfold optimize``
process's wall and CPU seconds, its peak RSS, the median (and minimum) of its passes' seconds
(its report's phases but load, save, report and the signature, as ``floor`` counts them), and
after / before of the medians and of the passes' minimums (on a VM where one process runs
15-50% slower than the next, the least of several runs moves less than their median)::

    python -m bench run ab MODEL [MODEL ...] --before COMMIT [--after HEAD] [--repeat 7]

Prints a markdown table; writes nothing into the repository.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.floor import passes_seconds
from bench.process import ChildRun, median, ratio, run_child

ROOT = Path(__file__).resolve().parent.parent


def snapshot(commit: str, into: Path) -> dict[str, str]:
    """``commit``'s onnxfold (``rules`` in place, as installed) in ``into``: its environment."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "onnxfold", "rules"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "rules").rename(into / "onnxfold" / "rules")
    return dict(os.environ, PYTHONPATH=str(into))


def _row(model: str, label: str, runs: list[ChildRun], passes: list[float],
         base: tuple[list[ChildRun], list[float]] | None) -> str:
    wall = [x.wall_s for x in runs]
    cpu = [x.user_s + x.sys_s for x in runs]
    vs = ""
    if base is not None:
        base_runs, base_passes = base
        walls = ratio(median(wall), median([x.wall_s for x in base_runs]))
        cpus = ratio(median(cpu), median([x.user_s + x.sys_s for x in base_runs]))
        own = ratio(median(passes), median(base_passes))
        least = ratio(min(passes), min(base_passes))
        vs = f"{walls:.2f}x, {cpus:.2f}x, {own:.2f}x, {least:.2f}x" \
            if walls and cpus and own and least else ""
    return (f"| {Path(model).name} | {label} | {median(wall):.3f} ({min(wall):.3f}) | "
            f"{median(cpu):.3f} ({min(cpu):.3f}) | {median(passes):.3f} ({min(passes):.3f}) | "
            f"{max(x.maxrss_mib for x in runs):.0f} | {vs} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench run ab", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--before", default="main", help="commit (default: %(default)s)")
    ap.add_argument("--after", default="HEAD", help="commit (default: %(default)s)")
    ap.add_argument("--before-cmd", help="an installed onnxfold command instead of --before")
    ap.add_argument("--repeat", type=int, default=7, help="measured rounds (one more warms up)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    a = ap.parse_args(argv)
    missing = [str(m) for m in a.models if not m.is_file()]
    if missing:
        ap.error(f"no such model: {', '.join(missing)}")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        versions: dict[str, tuple[list[str], dict[str, str]]] = {}
        for label, commit in (("before", a.before), ("after", a.after)):
            if label == "before" and a.before_cmd:
                versions[label] = ([a.before_cmd], dict(os.environ))
                continue
            (tmp / label).mkdir()
            versions[label] = ([sys.executable, "-m", "onnxfold"],
                               snapshot(commit, tmp / label))
        print(f"before {a.before_cmd or a.before}, after {a.after}; medians (min) of {a.repeat} "
              "interleaved rounds, whole process\n")
        print("| model | version | wall s | CPU s | passes s | peak RSS MiB | "
              "after / before (wall, CPU, passes, passes' minimums) |")
        print("|---|---|--:|--:|--:|--:|--:|")
        for model in a.models:
            runs: dict[str, list[ChildRun]] = {label: [] for label in versions}
            passes: dict[str, list[float]] = {label: [] for label in versions}
            for i in range(a.repeat + 1):
                order = list(versions) if i % 2 else list(reversed(versions))
                for label in order:
                    cmd, env = versions[label]
                    out, report = tmp / f"{label}.onnx", tmp / f"{label}.json"
                    # cwd is not the repository: its onnxfold/ would shadow the snapshots
                    run = run_child([*cmd, "optimize", str(model.resolve()), "-o", str(out), "-q",
                                     "--json", str(report)],
                                    tmp / label, a.timeout, cwd=tmp, env=env)
                    if run.rc != 0:
                        sys.exit(f"{label} failed on {model}: {run.error_line}")
                    if i:
                        runs[label].append(run)
                        passes[label].append(passes_seconds(report))
            print(_row(str(model), "before", runs["before"], passes["before"], None))
            print(_row(str(model), "after", runs["after"], passes["after"],
                       (runs["before"], passes["before"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
