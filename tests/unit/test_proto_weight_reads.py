"""A caller's proto: every read of a tensor's data is a copy of its bytes (protobuf gives no
view into ``raw_data``), so what only asks whether a constant has data must not read it
(issue 84 item 2: on a dynamo BERT-base the QKV merge's question alone copied 255 MB out of
the proto, the fold's recipes 72 weights more). ``GraphView.has_array`` answers as
``GraphView.array`` would, for every kind of value, without reading."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from onnxfold import FoldOptions, optimize, simplify
from onnxfold.analysis.settings import RunSettings
from onnxfold.declare import GraphView
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.declare.view import IDENTITY_HOPS
from tests.support.models import make_model, tensor, vinfo
from tests.unit.test_shared_input_matmuls import _products


@pytest.fixture
def reads(monkeypatch):
    """How many times each proto tensor's data was read, by tensor name."""
    counted: Counter[str] = Counter()
    read = ir.serde.TensorProtoTensor.numpy

    def numpy(self):
        counted[self.name] += 1
        return read(self)

    monkeypatch.setattr(ir.serde.TensorProtoTensor, "numpy", numpy)
    return counted


@pytest.mark.parametrize("call", ["optimize", "simplify"])
def test_each_weight_of_a_callers_proto_is_read_once_by_a_merge(call, reads):
    model = _products((32, 32, 32), biased=(0, 1, 2))  # x @ w_i + b_i: one MatMul and a Split
    if call == "optimize":
        result = optimize(model, FoldOptions(strict=True))
        assert result.report.pattern_hits.get("merge_shared_input_matmuls") == 1
    else:
        assert simplify(model)[1]
    weights = {t.name for t in model.graph.initializer}
    assert set(reads) == weights  # the merge reads each (its concatenation folds)
    assert max(reads.values()) == 1, reads


def test_a_weight_the_fold_does_not_touch_is_not_read(reads):
    model = _products((32, 24), biased=(0,), extra_reader=1)  # w1 also read by a Gather
    optimize(model, FoldOptions(strict=True))
    assert reads["w1"] == 0, reads  # shared with the Gather: not merged, never read


def _view(graph: ir.Graph, model: ir.Model, constant: set[ir.Value]) -> GraphView:
    return GraphView(graph, model, constant, load_catalogue(), shape_steps={},
                     settings=RunSettings(), shape_values=lambda view: {}, memo={},
                     positions=dict, shared_dim_names=frozenset)


def _kinds_of_values():
    """A graph with one value of each kind ``GraphView.array`` tells apart."""
    floats = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [
        helper.make_node("Identity", ["w"], ["w_shared"]),
        helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
            "c", TensorProto.FLOAT, [2], [1.0, 2.0])),
        helper.make_node("Constant", [], ["c_ints"], value_ints=[1, 2]),
        helper.make_node("Constant", [], ["c_text"], value=helper.make_tensor(
            "c_text", TensorProto.STRING, [1], [b"a"])),
        helper.make_node("Add", ["x", "w"], ["computed"]),
        helper.make_node("Identity", ["default"], ["default_shared"]),
        helper.make_node("Identity", ["text"], ["text_shared"]),
    ]
    chain = "w"
    for i in range(IDENTITY_HOPS + 1):  # past the hops the view looks through
        nodes.append(helper.make_node("Identity", [chain], [f"hop{i}"]))
        chain = f"hop{i}"
    outputs = ["w_shared", "c", "c_ints", "c_text", "computed", "default_shared",
               "text_shared", chain, f"hop{IDENTITY_HOPS - 2}"]
    proto = make_model(
        nodes, [vinfo("x", TensorProto.FLOAT, [2, 3]), vinfo("default", TensorProto.FLOAT, [2])],
        [vinfo(name, TensorProto.UNDEFINED, None) for name in outputs],
        [tensor("w", floats), tensor("default", np.ones(2, np.float32)),
         helper.make_tensor("text", TensorProto.STRING, [1], [b"t"])])
    return ir.serde.deserialize_model(proto)


def test_has_array_answers_as_array_does_for_every_kind_of_value():
    model = _kinds_of_values()
    graph = model.graph
    values = {v.name: v for node in graph for v in [*node.inputs, *node.outputs] if v}
    values.update(graph.initializers)
    constant = {v for name, v in values.items() if name not in ("x", "computed", "default",
                                                                "default_shared")}
    answers = {}
    for name, value in values.items():
        asked = _view(graph, model, constant).has_array(value)
        read = _view(graph, model, constant).array(value) is not None
        assert asked == read, name
        answers[name] = asked
    assert answers["w"] and answers["w_shared"] and answers["c"] and answers["c_ints"]
    assert answers[f"hop{IDENTITY_HOPS - 2}"] and not answers[f"hop{IDENTITY_HOPS}"]
    for name in ("x", "computed", "default", "default_shared", "text", "text_shared", "c_text"):
        assert not answers[name], name
    assert _view(graph, model, constant).has_array(None) is False


def test_has_array_reads_no_initializer(reads):
    model = ir.serde.deserialize_model(_products((8, 8)))
    graph = model.graph
    view = _view(graph, model, set(graph.initializers.values()))
    assert all(view.has_array(w) for w in graph.initializers.values())
    assert not reads
