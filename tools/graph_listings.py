"""Count the whole-graph listings of one ``onnxfold optimize`` run, by phase and by the code
that made them.

A listing is one iteration over a graph's nodes (``for node in graph``, ``list(graph)``,
``ir.traversal``'s walks, ...: every one goes through ``ir.Graph.__iter__``). Counted are the
listings of graphs of at least ``--min-nodes`` nodes (default: half the main graph's nodes at
load, so that a subgraph's small listings do not count as whole-graph ones), attributed to the
first frame outside onnx-ir (the onnxfold code that asked) and to the phase running then
(``onnxfold.pipeline.phases``). Used to find where a worklist or an index would serve
(issue 50 item 2) and to check that a change removed listings rather than guess it.

    python -m tools.graph_listings MODEL.onnx [--most 20] [-- extra optimize options]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx
import onnx_ir as ir

from onnxfold.app.cli import main as cli_main
from onnxfold.pipeline import phases as phases_module


def _caller() -> str:
    """``file:line function`` of the first frame outside onnx-ir and this module."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if "onnx_ir" not in name and not name.endswith("graph_listings.py"):
            return f"{Path(name).name}:{frame.f_lineno} {frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


def count(model: Path, extra: list[str], min_nodes: int | None) -> tuple[Counter, Counter, int]:
    """Run ``onnxfold optimize MODEL`` in this process; the listings by (phase, caller), by
    phase, and the threshold used."""
    threshold = min_nodes if min_nodes is not None else max(
        1, len(onnx.load(str(model), load_external_data=False).graph.node) // 2)
    by_site: Counter = Counter()
    by_phase: Counter = Counter()
    current = ["outside"]
    original_iter = ir.Graph.__iter__
    original_phase = phases_module.Phases.phase

    def counted_iter(graph: ir.Graph) -> Iterator[ir.Node]:
        if len(graph) >= threshold:
            by_site[(current[-1], _caller())] += 1
            by_phase[current[-1]] += 1
        return original_iter(graph)

    @contextmanager
    def tracked_phase(self: phases_module.Phases, name: str) -> Iterator[None]:
        current.append(name)
        try:
            with original_phase(self, name):
                yield
        finally:
            current.pop()

    ir.Graph.__iter__ = counted_iter  # type: ignore[method-assign]
    phases_module.Phases.phase = tracked_phase  # type: ignore[method-assign,assignment]
    try:
        with tempfile.TemporaryDirectory() as work:
            code = cli_main(["optimize", str(model), "-o", str(Path(work) / "out.onnx"), "-q",
                             *extra])
    finally:
        ir.Graph.__iter__ = original_iter  # type: ignore[method-assign]
        phases_module.Phases.phase = original_phase  # type: ignore[method-assign]
    if code != 0:
        raise SystemExit(f"onnxfold optimize exited {code}")
    return by_site, by_phase, threshold


def main() -> None:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--most", type=int, default=20, help="sites listed (default 20)")
    parser.add_argument("--min-nodes", type=int, default=None,
                        help="count graphs of at least this many nodes (default: half the "
                             "main graph's)")
    parser.add_argument("extra", nargs="*", help="options passed to onnxfold optimize")
    args = parser.parse_args()
    by_site, by_phase, threshold = count(args.model, args.extra, args.min_nodes)
    print(f"listings of graphs of >= {threshold} nodes: {sum(by_phase.values())}")
    for phase, n in by_phase.most_common():
        print(f"  {phase:10s} {n}")
    for (phase, site), n in by_site.most_common(args.most):
        print(f"{n:5d}  {phase:10s} {site}")


if __name__ == "__main__":
    main()
