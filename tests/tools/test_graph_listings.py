"""``python -m tools.graph_listings`` counts the listings of a run by phase and site, and counts
a listing a pass adds (what it is used for: seeing that a change removed listings)."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx_ir as ir
from onnx import helper

from onnxfold.ir import graph as graph_module
from tests.support.models import make_model, vinfo
from tools.graph_listings import count


def _chain(path: Path, nodes: int = 40) -> Path:
    """x -> Relu -> ... -> y: a graph the passes list whole."""
    made = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"r{i}")
            for i in range(nodes)]
    made[0].input[0], made[-1].output[0] = "x", "y"
    onnx.save(make_model(made, [vinfo("x", shape=[2, 3])], [vinfo("y", shape=[2, 3])]),
              str(path))
    return path


def test_listings_are_counted_by_phase_and_site(tmp_path):
    by_site, by_phase, threshold = count(_chain(tmp_path / "m.onnx"), [], None)
    assert threshold == 20  # half the main graph's nodes
    assert sum(by_phase.values()) == sum(by_site.values()) > 0
    assert {"load", "rewrite", "fold"} <= set(by_phase)
    assert any("graphs_within" in site for _, site in by_site)  # attributed past onnx-ir


def test_a_listing_more_is_counted(tmp_path, monkeypatch):
    model = _chain(tmp_path / "m.onnx")
    _, before, _ = count(model, [], None)
    all_graphs = graph_module.all_graphs

    def listing_twice(m: ir.Model) -> list[ir.Graph]:
        list(m.graph)  # one more listing of the main graph per call
        return all_graphs(m)

    monkeypatch.setattr(graph_module, "all_graphs", listing_twice)
    import onnxfold.rewrite.driver as driver
    monkeypatch.setattr(driver, "all_graphs", listing_twice)
    _, after, _ = count(model, [], None)
    assert sum(after.values()) > sum(before.values())
    assert after["rewrite"] > before["rewrite"]
