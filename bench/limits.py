"""onnxfold under the limits a host imposes: many small weights, few file descriptors, and a
contrib op whose output onnxruntime cannot size before it runs, under a pool budget.

Each case is ``python -m onnxfold optimize IN -o OUT -q`` (plus its flags) in a child process,
``--repeat`` times; median wall and CPU seconds, largest peak RSS (``os.wait4``), its exit
status and the nodes it left:

==================  ===========================================================================
``mlp_20k``         ``builders.many_weight_mlp(20000)``: 20,000 inline 33x33 weights (84 MiB),
                    each just over the reader's 4 KiB threshold
``mlp_20k_n256``    the same under ``ulimit -n 256``: a descriptor per weight would fail
``cdist_16k``       ``builders.cdist_model(16000)`` with ``--pool-budget 256M``: CDist would make
                    1 GB from 0.5 MB; it must be declined for its size, RSS near the budget
``cdist_2k``        ``builders.cdist_model(2000)`` (16 MB) with the same budget: it folds
``constants_96m``   ``builders.constant_weight_chain(24)``: 96 MiB of weights in ``Constant``
                    nodes, each transposed by the fold (the checker and the first shape
                    inference once serialized and parsed their data: 655 MB peak)
==================  ===========================================================================

The models are built into ``--work``; the table is written into ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import resource
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.process import ChildRun, median, run_child
from bench.readme import replace_section

ROOT = Path(__file__).resolve().parent.parent
# case -> (what, model (of builders.GRAPHS), onnxfold flags, resource limits of the child)
CASES: dict[str, tuple[str, str, list[str], dict[int, int]]] = {
    "mlp_20k": ("MLP of 20,000 inline 33x33 weights", "mlp_20k", [], {}),
    "mlp_20k_n256": ("MLP of 20,000 inline 33x33 weights, `ulimit -n 256`", "mlp_20k", [],
                     {resource.RLIMIT_NOFILE: 256}),
    "cdist_16k": ("CDist 16,000 x 16,000 (1 GB) under `--pool-budget 256M`", "cdist_16k",
                  ["--pool-budget", "256M"], {}),
    "cdist_2k": ("CDist 2,000 x 2,000 (16 MB) under `--pool-budget 256M`", "cdist_2k",
                 ["--pool-budget", "256M"], {}),
    "constants_96m": ("24 weights of 4 MiB in `Constant` nodes, each transposed",
                      "constants_96m", [], {}),
}


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _model(name: str, work: Path, timeout: float) -> Path:
    """The model ``name`` (of ``builders.GRAPHS``) in ``work``, built in a child."""
    run = run_child([sys.executable, "-m", "bench.builders", name, str(work)],
                    work / f"{name}.build", timeout, cwd=ROOT)
    if run.rc != 0:
        raise RuntimeError(f"building {name} failed: {run.error_line}")
    return work / f"{name}.onnx"


# The output's op types and their counts (``MatMul 20,000, Add 1``), in a child: loading it
# here would raise this process's peak RSS, which Linux carries into the next measured child.
NODES_CODE = """\
import collections, sys, onnx
counts = collections.Counter(n.op_type for n in onnx.load(sys.argv[1]).graph.node)
print(", ".join(f"{op} {n:,}" for op, n in counts.items()))
"""


def _nodes(path: Path, log_stem: Path, timeout: float) -> str:
    run = run_child([sys.executable, "-c", NODES_CODE, str(path)], log_stem, timeout)
    return log_stem.with_suffix(".out").read_text().strip() if run.rc == 0 else run.error_line


def measure(name: str, work: Path, repeat: int, timeout: float) -> dict[str, Any]:
    """Case ``name`` ``repeat`` times: exit status, median wall, peak RSS, nodes left."""
    what, model, flags, rlimits = CASES[name]
    src, out = _model(model, work, timeout), work / f"{name}.out.onnx"
    runs: list[ChildRun] = []
    for r in range(repeat):
        out.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "onnxfold", "optimize", str(src), "-o", str(out), "-q",
               *flags]
        runs.append(run_child(cmd, work / f"{name}_{r}", timeout, cwd=ROOT, rlimits=rlimits))
        _log(f"[{name}] run {r + 1}/{repeat}: exit {runs[-1].rc}, {runs[-1].wall_s:.2f} s")
    failed = next((x for x in runs if x.rc != 0), None)
    return {"what": what, "mib": src.stat().st_size / (1 << 20),
            "status": f"exit {failed.rc}: {failed.error_line}" if failed else "exit 0",
            "wall_s": median([x.wall_s for x in runs]),
            "cpu_s": median([x.user_s + x.sys_s for x in runs]),
            "peak_rss_mib": max(x.maxrss_mib for x in runs),
            "nodes": _nodes(out, work / f"{name}_nodes", timeout)
            if failed is None and out.exists() else ""}


def table(results: dict[str, dict[str, Any]], repeat: int) -> str:
    lines = ["| case | input | status | wall | CPU | peak RSS | nodes left |",
             "|---|--:|---|--:|--:|--:|---|"]
    lines.extend(f"| {res['what']} | {res['mib']:.1f} MiB | {res['status']} | "
                 f"{res['wall_s']:.2f} s | {res['cpu_s']:.2f} s | "
                 f"{res['peak_rss_mib']:.0f} MiB | {res['nodes']} |" for res in results.values())
    lines.append("")
    lines.append(f"Median wall and CPU (user + system) of {repeat} runs of the whole `onnxfold "
                 "optimize` process, largest peak RSS.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench run limits", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES),
                    metavar="NAME", help="default: %(default)s")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case (median wall)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/onnxfold-bench-limits"),
                    help="where the models, outputs and logs go; default: %(default)s")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    ap.add_argument("--no-readme", action="store_true",
                    help="print the table only; do not write it into bench/README.md")
    a = ap.parse_args(argv)
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")
    a.work.mkdir(parents=True, exist_ok=True)
    results = {name: measure(name, a.work, a.repeat, a.timeout) for name in a.cases}
    command = "python -m bench run limits" + (f" --repeat {a.repeat}" if a.repeat != 3 else "") \
        + (f" --cases {' '.join(a.cases)}" if a.cases != list(CASES) else "")
    text = f"`{command}`, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.\n\n" + table(results, a.repeat)
    print(text)
    if not a.no_readme:
        replace_section(ROOT / "bench" / "README.md", "limits", text)
        _log("wrote the table into bench/README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
