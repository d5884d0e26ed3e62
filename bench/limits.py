"""onnxfold under the limits a host imposes: many small weights, few file descriptors, and a
contrib op whose output onnxruntime cannot size before it runs, under a pool budget.

Each case is ``python -m onnxfold optimize IN -o OUT -q`` (plus its flags) in a child process,
``--repeat`` times; median wall, largest peak RSS (``os.wait4``), its exit status and the nodes
it left:

==================  ===========================================================================
``mlp_20k``         ``builders.many_weight_mlp(20000)``: 20,000 inline 33x33 weights (84 MiB),
                    each just over the reader's 4 KiB threshold
``mlp_20k_n256``    the same under ``ulimit -n 256``: a descriptor per weight would fail
``cdist_16k``       ``builders.cdist_model(16000)`` with ``--pool-budget 256M``: CDist would make
                    1 GB from 0.5 MB; it must be declined for its size, RSS near the budget
``cdist_2k``        ``builders.cdist_model(2000)`` (16 MB) with the same budget: it folds
==================  ===========================================================================

The models are built into ``--work``; the table is written into ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import resource
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import onnx

from bench import builders
from bench.process import ChildRun, median, run_child
from bench.readme import replace_section

ROOT = Path(__file__).resolve().parent.parent
# name -> (what, model builder, onnxfold flags, resource limits of the child)
CASES: dict[str, tuple[str, Callable[[], onnx.ModelProto], list[str], dict[int, int]]] = {
    "mlp_20k": ("MLP of 20,000 inline 33x33 weights",
                lambda: builders.many_weight_mlp(20_000), [], {}),
    "mlp_20k_n256": ("MLP of 20,000 inline 33x33 weights, `ulimit -n 256`",
                     lambda: builders.many_weight_mlp(20_000), [],
                     {resource.RLIMIT_NOFILE: 256}),
    "cdist_16k": ("CDist 16,000 x 16,000 (1 GB) under `--pool-budget 256M`",
                  lambda: builders.cdist_model(16_000), ["--pool-budget", "256M"], {}),
    "cdist_2k": ("CDist 2,000 x 2,000 (16 MB) under `--pool-budget 256M`",
                 lambda: builders.cdist_model(2_000), ["--pool-budget", "256M"], {}),
}


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _model(name: str, work: Path) -> Path:
    """The model of case ``name`` in ``work`` (cases on the same model share its file)."""
    stem = name.split("_n")[0] if name.startswith("mlp") else name
    path = work / f"{stem}.onnx"
    if not path.exists():
        onnx.save(CASES[name][1](), str(path))
    return path


def _nodes(path: Path) -> str:
    """The output's op types and their counts, as ``MatMul 20000, Add 1``."""
    counts: dict[str, int] = {}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return ", ".join(f"{op} {n:,}" for op, n in counts.items())


def measure(name: str, work: Path, repeat: int, timeout: float) -> dict[str, Any]:
    """Case ``name`` ``repeat`` times: exit status, median wall, peak RSS, nodes left."""
    what, _, flags, rlimits = CASES[name]
    src, out = _model(name, work), work / f"{name}.out.onnx"
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
            "peak_rss_mib": max(x.maxrss_mib for x in runs),
            "nodes": _nodes(out) if failed is None and out.exists() else ""}


def table(results: dict[str, dict[str, Any]], repeat: int) -> str:
    lines = ["| case | input | status | wall (median) | peak RSS | nodes left |",
             "|---|--:|---|--:|--:|---|"]
    for res in results.values():
        lines.append(f"| {res['what']} | {res['mib']:.1f} MiB | {res['status']} | "
                     f"{res['wall_s']:.2f} s | {res['peak_rss_mib']:.0f} MiB | {res['nodes']} |")
    lines.append("")
    lines.append(f"Median wall of {repeat} runs of the whole `onnxfold optimize` process, "
                 "largest peak RSS.")
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
