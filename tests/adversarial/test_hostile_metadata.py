"""Text a model carries beside its graph (node metadata, doc strings, the model's metadata) is
untrusted input that only reports read: whatever it holds, the fold is the same.

The dynamo exporter's ``pkg.torch.onnx.name_scopes`` is parsed as a Python literal to group
the report by module; a text no literal parse survives (``{[]}`` raised TypeError) once
skipped the whole fold with exit 0. Every node of the bundled exports here carries one of the
texts below, and the folded model must equal the fold of the plain export."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from tests.support.cli import assert_ok, run_cli

MODELS = Path(__file__).resolve().parents[2] / "models"
HOSTILE = [
    "{[]}", "{{}: 1}", "[" * 100_000, "['', 'a'", "['', {}, 'x']", "['', 'x\ny', 'add']",
    "['_hook', 'add']", "'", "\\", "\x00", "['', '" + "m." * 50_000 + "', 'add']",
    "(" * 5000 + ")" * 5000, "-" * 100_000 + "1", "1" * 10_000, "lambda: 0",
    "__import__('os').system('false')", "['', 'é\u2028', 'x']", "['', 'a\\d', 'x']",
]
KEYS = ["pkg.torch.onnx.name_scopes", "namespace", "pkg.torch.onnx.class_hierarchy", "x"]


def _with_hostile_text(src: Path, dst: Path) -> None:
    model = onnx.load(src)
    for i, node in enumerate(model.graph.node):
        text = HOSTILE[i % len(HOSTILE)]
        for key in KEYS:
            node.metadata_props.add(key=key, value=text)
        node.doc_string = text
    model.metadata_props.add(key="pkg.torch.onnx.name_scopes", value="{[]}")
    model.doc_string = HOSTILE[0]
    onnx.save(model, dst)


def _fold_of(src: Path, out: Path) -> tuple[list, list, dict]:
    report = out.with_suffix(".json")
    done = run_cli("optimize", src, "-o", out, "--explain", "--json", report)
    assert_ok(done)
    assert "skipped" not in done.stdout, done.stdout
    assert "Warning" not in done.stderr, done.stderr  # ('\d' warns in a literal, 3.12+)
    model = onnx.load(out)
    graph = [(n.op_type, list(n.input), list(n.output)) for n in model.graph.node]
    weights = [(t.name, onnx.numpy_helper.to_array(t).tobytes()) for t in model.graph.initializer]
    return graph, weights, json.loads(report.read_text())


@pytest.mark.parametrize("name", ["tiny_bert_ts", "tiny_gpt2_ts"])
def test_hostile_node_text_changes_nothing_of_the_fold(tmp_path, name):
    hostile = tmp_path / "hostile.onnx"
    _with_hostile_text(MODELS / f"{name}.onnx", hostile)
    plain_graph, plain_weights, plain_report = _fold_of(MODELS / f"{name}.onnx",
                                                        tmp_path / "plain_out.onnx")
    graph, weights, report = _fold_of(hostile, tmp_path / "hostile_out.onnx")
    assert graph == plain_graph
    assert weights == plain_weights
    assert report["folded_nodes"] == plain_report["folded_nodes"] > 0
