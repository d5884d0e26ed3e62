"""``x + 0.0`` goes only where nothing downstream tells ``-0.0`` from ``+0.0``
(``rules/zero_sign.py``): an input full of ``-0.0`` runs through both models in onnxruntime, and
every output must be the same number (``1 / -0.0`` and ``1 / +0.0`` are not)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnxfold.rules import zero_sign

from tests.support.models import make_model, tensor, vinfo
from tests.support.running import fold_proto, run_ort


def _feeds(n=4):
    x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
    x[:, 0] = -0.0
    x[0, :] = 0.0
    return {"x": x}


def _model(after, op="Add", c=0.0, extra_inits=()):
    """x -> op(x, c) as "a" -> ``after`` nodes (reading "a") -> output "y"."""
    nodes = [helper.make_node(op, ["x", "c"], ["a"]), *after]
    inits = [tensor("c", np.asarray(c, np.float32)), *extra_inits]
    return make_model(nodes, [vinfo("x", shape=["N", 3])], [vinfo("y", shape=["N", 3])], inits)


def _node(op, ins, **attrs):
    return helper.make_node(op, ins, ["y"], **attrs)


CASES = [  # (consumers, initializers, op, constant, the zero Add goes)
    ([_node("Neg", ["a"])], (), "Add", np.float32(0.0), True),  # a graph output compares ==
    ([_node("Reciprocal", ["a"])], (), "Add", np.float32(0.0), False),
    ([_node("Div", ["one", "a"])], [tensor("one", np.float32(1))], "Add", np.float32(0), False),
    ([_node("Div", ["a", "two"])], [tensor("two", np.float32(2))], "Add", np.float32(0), True),
    ([_node("Pow", ["a", "e"])], [tensor("e", np.float32(-1))], "Add", np.float32(0), False),
    ([_node("Pow", ["a", "e"])], [tensor("e", np.float32(2))], "Add", np.float32(0), True),
    ([helper.make_node("Add", ["a", "eps"], ["b"]), _node("Reciprocal", ["b"])],
     [tensor("eps", np.float32(1e-5))], "Add", np.float32(0), True),  # +-0 + eps is eps
    ([helper.make_node("Add", ["a", "z"], ["b"]), _node("Reciprocal", ["b"])],
     [tensor("z", np.array([1, 0, 1], np.float32))], "Add", np.float32(0), False),
    ([helper.make_node("Mul", ["a", "two"], ["b"]), _node("Reciprocal", ["b"])],
     [tensor("two", np.float32(2))], "Add", np.float32(0), False),  # passes the sign on
    ([helper.make_node("Exp", ["a"], ["b"]), _node("Reciprocal", ["b"])], (), "Add",
     np.float32(0), True),
    ([helper.make_node("Cast", ["a"], ["b"], to=TensorProto.INT32),
      helper.make_node("Cast", ["b"], ["f"], to=TensorProto.FLOAT), _node("Reciprocal", ["f"])],
     (), "Add", np.float32(0), True),
    ([helper.make_node("Transpose", ["a"], ["b"]), helper.make_node("Tanh", ["b"], ["t"]),
      _node("Reciprocal", ["t"])], (), "Add", np.float32(0), False),
    ([helper.make_node("Neg", ["a"], ["n"]), helper.make_node("Reciprocal", ["a"], ["r"]),
      _node("Add", ["n", "r"])], (), "Add", np.float32(0), False),  # one reader of two observes
    ([_node("Reciprocal", ["a"])], (), "Sub", np.float32(-0.0), False),  # x - -0 is x + 0
    ([_node("Neg", ["a"])], (), "Sub", np.float32(-0.0), True),
    ([_node("Reciprocal", ["a"])], (), "Add", np.zeros((1, 3), np.float32), False),
    ([_node("Relu", ["a"])], (), "Add", np.zeros((1, 3), np.float32), True),
]


@pytest.mark.parametrize("after, inits, op, c, gone", CASES)
def test_a_zero_add_goes_only_where_no_reader_tells_the_zeros_apart(tmp_path, after, inits,
                                                                    op, c, gone):
    proto = _model(after, op, c, inits)
    folded, _, out = fold_proto(proto, tmp_path)
    assert len(folded.graph.node) == len(proto.graph.node) - gone
    feeds = _feeds()
    for want, got in zip(run_ort(proto, feeds), run_ort(out, feeds)):
        np.testing.assert_array_equal(got, want)  # -inf != inf, -0.0 == 0.0


def test_a_zero_add_read_inside_a_subgraph_stays(tmp_path):
    branch = helper.make_graph([helper.make_node("Reciprocal", ["a"], ["r"])], "then", [],
                               [vinfo("r", shape=["N", 3])])
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)]
    proto = _model(nodes, extra_inits=[tensor("cond", np.array(True))])
    proto.graph.initializer.remove(proto.graph.initializer[-1])
    proto.graph.input.append(vinfo("cond", TensorProto.BOOL, []))
    folded, _, out = fold_proto(proto, tmp_path)
    assert any(n.op_type == "Add" for n in folded.graph.node)
    feeds = {**_feeds(), "cond": np.array(True)}
    np.testing.assert_array_equal(run_ort(out, feeds)[0], run_ort(proto, feeds)[0])


def test_every_op_the_tables_name_is_an_onnx_op():
    for table in (zero_sign.ABSORBS, zero_sign.PASSES_ON):
        for op in table:
            assert onnx.defs.has(op), op
