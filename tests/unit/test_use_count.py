"""``onnxfold.ir.graph.use_count`` is ``len(value.uses())`` (without copying the uses), for
values read once, never, several times by one node, by many nodes, and after edits."""

from __future__ import annotations

import onnx_ir as ir

from onnxfold.ir.graph import use_count


def _value(name: str) -> ir.Value:
    return ir.Value(name=name, shape=ir.Shape([2]), type=ir.TensorType(ir.DataType.FLOAT))


def test_use_count_is_the_number_of_uses():
    x, unread = _value("x"), _value("unread")
    twice = ir.Node("", "Add", [x, x])  # one node, two uses
    readers = [ir.Node("", "Relu", [x]) for _ in range(40)]
    assert use_count(unread) == len(unread.uses()) == 0
    assert use_count(x) == len(x.uses()) == 42
    twice.replace_input_with(1, unread)
    for node in readers[:10]:
        node.replace_input_with(0, unread)
    assert use_count(x) == len(x.uses()) == 31
    assert use_count(unread) == len(unread.uses()) == 11


def test_use_count_counts_without_copying_the_uses(monkeypatch):
    """The count reads onnx-ir's own store of uses; if onnx-ir stops keeping one, this fails
    (the count would then copy every use again, a cost per layer on deep models)."""
    x = _value("x")
    for _ in range(3):
        ir.Node("", "Relu", [x])

    def copied(self):
        raise AssertionError("uses() copied")

    monkeypatch.setattr(ir.Value, "uses", copied)
    assert use_count(x) == 3


def test_splice_and_the_driver_snapshot_count_uses_without_copying_them(monkeypatch):
    """What a splice asks of each candidate's outputs (read or not) and what the driver's
    snapshot keeps per output (its number of readers) are counts: asked at every rewrite near
    a value every layer reads, a copy of its uses each time made them quadratic in depth."""
    from onnxfold.ir.edits import read_in
    from onnxfold.rewrite.driver import _node_state
    from onnxfold.rewrite.splice import _read

    x = _value("x")
    producer = ir.Node("", "Relu", [x])
    unread_producer = ir.Node("", "Relu", [x])
    shared = producer.outputs[0]
    for _ in range(5):
        ir.Node("", "Neg", [shared])
    graph = ir.Graph([x], [], nodes=[producer, unread_producer])

    def copied(self):
        raise AssertionError("uses() copied")

    monkeypatch.setattr(ir.Value, "uses", copied)
    assert _read(producer) and not _read(unread_producer)
    assert read_in(shared, None) and not read_in(unread_producer.outputs[0], None)
    assert _node_state(producer, set(graph.outputs)).outputs[0][2] == 5
    assert _node_state(unread_producer, set()).outputs[0][2] == 0


def test_a_pattern_asks_single_use_without_copying_the_uses(monkeypatch):
    """``GraphView.single_use``: one reader, not a graph output; counted, not copied."""
    from collections import Counter

    from onnxfold.analysis.settings import DEFAULTS
    from onnxfold.declare.catalogue import load_catalogue
    from onnxfold.rewrite.sweep import GraphState

    x = _value("x")
    once, twice = ir.Node("", "Relu", [x]), ir.Node("", "Relu", [x])
    ir.Node("", "Neg", [once.outputs[0]])
    ir.Node("", "Add", [twice.outputs[0], twice.outputs[0]])
    graph = ir.Graph([x], [], nodes=[once, twice], opset_imports={"": 18})
    model = ir.Model(graph, ir_version=10)
    catalogue = load_catalogue()
    view = GraphState(graph, model, set(), catalogue, Counter(), None,
                      shape_steps=catalogue.shape_steps, settings=DEFAULTS).view

    def copied(self):
        raise AssertionError("uses() copied")

    monkeypatch.setattr(ir.Value, "uses", copied)
    assert view.single_use(once.outputs[0]) and not view.single_use(twice.outputs[0])
    assert not view.single_use(x)
    graph.outputs.append(once.outputs[0])
    assert not view.single_use(once.outputs[0])
