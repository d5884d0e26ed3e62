"""The pipeline's last pass keeps every graph in topological order (a rewrite inserting a node
before a value it reads is a bug: an error under --strict, sorted otherwise)."""

from __future__ import annotations

import onnx_ir as ir
import pytest
from onnx_ir.passes import PreconditionError

from onnxfold.pipeline.passes import Sorted, unsorted_graphs


def _unsorted_model() -> ir.Model:
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2]))
    first = ir.Node("", "Relu", [x], name="first")
    second = ir.Node("", "Neg", [first.outputs[0]], name="second")
    graph = ir.Graph([x], [second.outputs[0]], nodes=[second, first], name="g",
                     opset_imports={"": 17})
    return ir.Model(graph, ir_version=8)


def test_an_unsorted_graph_is_found_and_sorted():
    model = _unsorted_model()
    assert unsorted_graphs(model) == [model.graph]
    assert Sorted(strict=False)(model).modified
    assert [n.name for n in model.graph] == ["first", "second"] and not unsorted_graphs(model)


def test_strict_runs_refuse_it():
    with pytest.raises(PreconditionError, match="topological order"):
        Sorted(strict=True)(_unsorted_model())
