"""What loading checks of a graph's structure with onnx's checker off (``--skip-check``): every
value read (by a node, inside a subgraph, or as a graph output) is defined, a graph out of
order is sorted, reads inside a subgraph included, and an initializer takes its data's shape
whatever ``value_info`` declares."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.errors import InputError
from onnxfold.io import load_model


def _vi(name: str, shape: list[int] | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [2] if shape is None else shape)


def _save(tmp_path, nodes: list, outputs: tuple[str, ...] = ("y",), **graph_fields) -> str:
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    graph = helper.make_graph(nodes, "g", [_vi("x"), cond], [_vi(o) for o in outputs],
                              **graph_fields)
    path = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def _if(then_nodes: list, name: str = "if") -> onnx.NodeProto:
    """``y = If(cond)``: the then-branch runs ``then_nodes`` and gives ``t``, else ``x``."""
    then = helper.make_graph(then_nodes, "then", [], [_vi("t")])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [_vi("e")])
    return helper.make_node("If", ["cond"], ["y"], name=name, then_branch=then,
                            else_branch=other)


def test_a_graph_out_of_order_is_sorted(tmp_path):
    path = _save(tmp_path, [helper.make_node("Abs", ["a"], ["y"], name="reader"),
                            helper.make_node("Neg", ["x"], ["a"], name="producer")])
    assert [n.name for n in load_model(path, check=False).graph] == ["producer", "reader"]


def test_a_subgraph_reading_a_later_outer_value_is_sorted(tmp_path):
    path = _save(tmp_path, [_if([helper.make_node("Identity", ["a"], ["t"])]),
                            helper.make_node("Neg", ["x"], ["a"], name="producer")])
    assert [n.name for n in load_model(path, check=False).graph] == ["producer", "if"]


def test_a_graph_in_order_stays_as_it_is(tmp_path):
    path = _save(tmp_path, [helper.make_node("Neg", ["x"], ["a"], name="producer"),
                            _if([helper.make_node("Identity", ["a"], ["t"])])])
    assert [n.name for n in load_model(path, check=False).graph] == ["producer", "if"]


@pytest.mark.parametrize("nodes, message", [
    ([helper.make_node("Abs", ["zz"], ["y"], name="n")],
     "value 'zz' read by Abs node 'n' is never defined"),
    ([_if([helper.make_node("Identity", ["zz"], ["t"], name="inner")])],
     "value 'zz' read by Identity node 'inner' is never defined"),
    ([helper.make_node("Abs", ["x"], ["a"])], "graph output 'y' is never defined"),
], ids=["node", "inside a subgraph", "graph output"])
def test_a_value_never_defined_is_refused(tmp_path, nodes, message):
    with pytest.raises(InputError, match=message):
        load_model(_save(tmp_path, nodes), check=False)


def test_a_cycle_is_refused(tmp_path):
    path = _save(tmp_path, [helper.make_node("Abs", ["b"], ["a"]),
                            helper.make_node("Neg", ["a"], ["b"]),
                            helper.make_node("Relu", ["a"], ["y"])])
    with pytest.raises(InputError, match="graph 'g' has a cycle"):
        load_model(path, check=False)


def test_an_initializer_takes_its_data_s_shape_and_type(tmp_path):
    weight = numpy_helper.from_array(np.ones((2,), np.float32), "w")
    path = _save(tmp_path, [helper.make_node("Add", ["x", "w"], ["y"])], initializer=[weight],
                 value_info=[helper.make_tensor_value_info("w", TensorProto.INT64, [7, 7])])
    value = load_model(path, check=False).graph.initializers["w"]
    assert (tuple(value.shape), value.dtype.name) == ((2,), "FLOAT")
