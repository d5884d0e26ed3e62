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
