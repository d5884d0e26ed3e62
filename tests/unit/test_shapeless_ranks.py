"""Ranks and dims carried to values onnx's shape inference leaves without a shape
(``symbolic.shape_values(complete=...)``): before Reshape-14, onnx infers no rank for
``Reshape(x, Shape(y))`` (an opset-13 ALBERT's attention mask), and every value after it is
shapeless, so no neutral ``+ 0`` or ``* 1`` after it could be proved shape-preserving. The
walk gives such a value the rank and dims its op's step derives; a target element that is a dim
of ``Shape(y)`` is that dim where a 0 there could not copy the input's (onnxruntime refuses a 0
beyond the input's rank). Every folded model is run in onnxruntime against the original at
several bindings of the dynamic dims."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from onnxfold.analysis.dim_algebra import Known, Sym
from onnxfold.analysis.shapes import infer_shapes
from onnxfold.analysis.step_inputs import derived_dims, dim_symbol, shared_dim_names
from onnxfold.analysis.symbolic import shape_values
from onnxfold.analysis.symbolic_update import updated_shape_values
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.ir.constants import source_array
from rules.shape_steps import reshaped
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import assert_same_bits, fold_proto, run_ort

STEPS = load_catalogue().shape_steps


def _every(value: ir.Value) -> bool:
    return True  # every shapeless value is given a shape


def _reshaped_then(x_shape: list, bias: np.ndarray, opset: int, flat_first: bool = False,
                   op: str = "Add") -> onnx.ModelProto:
    """``Relu(Reshape(x, Shape(y)) op bias)``, y: [N, S, 4]; ``flat_first``: x flattened by a
    ``Reshape(x, [-1])`` first (ALBERT's mask: rank 1 into the target's rank). The op's output
    is no graph output: nothing declares its shape."""
    nodes = [helper.make_node("Shape", ["y"], ["s"])]
    source = "x"
    if flat_first:
        nodes.append(helper.make_node("Reshape", ["x", "minus1"], ["flat"]))
        source = "flat"
    nodes += [helper.make_node("Reshape", [source, "s"], ["r"]),
              helper.make_node(op, ["r", "bias"], ["z"]),
              helper.make_node("Relu", ["z"], ["out"])]
    return make_model(nodes, [vinfo("x", shape=x_shape), vinfo("y", shape=["N", "S", 4])],
                      [vinfo("out", shape=["a", "b", "c"])],
                      [tensor("bias", bias), tensor("minus1", np.array([-1], np.int64))],
                      opset=opset)


def _feeds(n: int, s: int, x_shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n * 10 + s)
    x = rng.standard_normal(x_shape).astype(np.float32)
    x.reshape(-1)[::3] = -0.0  # zeros of either sign: a + -0.0 keeps both
    return {"x": x, "y": rng.standard_normal((n, s, 4)).astype(np.float32)}


def _ops(proto: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in proto.graph.node]


@pytest.mark.parametrize("opset", [13, 14, 17])
@pytest.mark.parametrize("flat_first", [False, True])
@pytest.mark.parametrize("op, bias", [("Add", np.full((1, 4), -0.0, np.float32)),
                                      ("Mul", np.ones((1, 1, 4), np.float32))])
def test_a_neutral_element_after_reshape_to_a_shape_goes(tmp_path, opset, flat_first, op, bias):
    proto = _reshaped_then(["M", 2] if flat_first else ["M"], bias, opset, flat_first, op)
    folded, _report, out = fold_proto(proto, tmp_path)
    assert op not in _ops(folded), _ops(folded)
    for n, s in ((2, 3), (1, 1), (0, 5)):
        x_shape = (n * s * 2, 2) if flat_first else (n * s * 4,)
        assert_same_bits(proto, out, _feeds(n, s, x_shape))


@pytest.mark.parametrize("opset", [13, 17])
def test_a_bias_that_would_broadcast_a_dynamic_dim_stays(tmp_path, opset):
    """y's last dim dynamic: a [5] bias broadcasts it from 1 to 5 where it is 1."""
    nodes = [helper.make_node("Shape", ["y"], ["s"]),
             helper.make_node("Reshape", ["x", "s"], ["r"]),
             helper.make_node("Add", ["r", "bias"], ["z"]),
             helper.make_node("Relu", ["z"], ["out"])]
    proto = make_model(nodes, [vinfo("x", shape=["M"]), vinfo("y", shape=["N", "K"])],
                       [vinfo("out", shape=["a", "b"])],
                       [tensor("bias", np.full((5,), -0.0, np.float32))], opset=opset)
    folded, _report, out = fold_proto(proto, tmp_path)
    assert "Add" in _ops(folded)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal(3).astype(np.float32),
             "y": np.zeros((3, 1), np.float32)}
    assert_same_bits(proto, out, feeds)


def _walked(proto: onnx.ModelProto) -> dict[str, ir.Value]:
    model = ir.from_proto(proto)
    infer_shapes(model)
    shape_values(model.graph, source_array, shared_dim_names(model), steps=STEPS,
                 complete=_every)
    return {v.name: v for node in model.graph for v in node.outputs if v.name}


def test_the_reshaped_value_gets_the_shapes_rank_and_its_dims():
    """Reshape(Reshape(x, [-1]), Shape(y)) at opset 13: rank 3; past the flat input's one
    axis a 0 cannot copy, so the target's elements are y's dims; the first is y's N or, were
    N 0, the flat length (an expression of the inputs' dims)."""
    values = _walked(_reshaped_then(["M", 2], np.zeros(4, np.float32), 13, flat_first=True))
    r = values["r"]
    assert r.shape is not None and len(r.shape) == 3
    assert dim_symbol(r, 1) == Sym(("dim", "S")) and dim_symbol(r, 2) == 4
    first = dim_symbol(r, 0)
    assert isinstance(first, Sym) and first.expr[0] == "Reshape0" and \
        first.expr[1] == Sym(("dim", "N"))
    # carried on: the Add's output has y's rank and dims too
    z = values["z"]
    assert z.shape is not None and [dim_symbol(z, i) for i in (1, 2)] == [Sym(("dim", "S")), 4]


def test_without_complete_a_shapeless_value_stays_shapeless():
    model = ir.from_proto(_reshaped_then(["M"], np.zeros(4, np.float32), 13))
    infer_shapes(model)
    shape_values(model.graph, source_array, shared_dim_names(model), steps=STEPS)
    r = next(n for n in model.graph if n.op_type == "Reshape").outputs[0]
    assert r.shape is None


def test_an_edit_that_gives_a_rank_reports_the_values_it_reached():
    """The target of the Reshape is first a custom op's output (unknown): the walk gives no
    shape; once it reads Shape(y), the update gives the Reshape and the Add a shape and names
    both as changed (so that the rules at their readers are tried again)."""
    nodes = [helper.make_node("Shape", ["y"], ["s"]),
             helper.make_node("Opaque", ["s"], ["t"], domain="custom"),
             helper.make_node("Reshape", ["x", "t"], ["r"]),
             helper.make_node("Add", ["r", "bias"], ["z"]),
             helper.make_node("Relu", ["z"], ["out"])]
    # y static: the shapes given are all static, no refined dim records them (the update is
    # not computed whole either: no name of the graph's own)
    proto = make_model(nodes, [vinfo("x", shape=["M"]), vinfo("y", shape=[2, 3, 4])],
                       [vinfo("out", shape=[2, 3, 4])],
                       [tensor("bias", np.zeros(4, np.float32))], opset=13)
    proto.opset_import.append(helper.make_opsetid("custom", 1))
    model = ir.from_proto(proto)
    infer_shapes(model)
    ambiguous = shared_dim_names(model)
    before = shape_values(model.graph, source_array, ambiguous, steps=STEPS, complete=_every)
    reshape = next(n for n in model.graph if n.op_type == "Reshape")
    add = next(n for n in model.graph if n.op_type == "Add")
    assert reshape.outputs[0].shape is None and add.outputs[0].shape is None
    shape_node = next(n for n in model.graph if n.op_type == "Shape")
    reshape.replace_input_with(1, shape_node.outputs[0])
    _known, changed = updated_shape_values(model.graph, before, {reshape}, source_array,
                                           ambiguous, steps=STEPS, complete=_every)
    assert reshape.outputs[0] in changed and add.outputs[0] in changed
    assert add.outputs[0].shape == ir.Shape([2, 3, 4])


def test_a_value_without_a_tensor_type_gets_no_shape():
    """A Reshape whose type inference could not tell (its input untyped) stays shapeless:
    a shape without an element type is not a value info onnx can read."""
    model = ir.from_proto(_reshaped_then(["M"], np.zeros(4, np.float32), 13))
    r = next(n for n in model.graph if n.op_type == "Reshape").outputs[0]
    r.type = None
    shape_values(model.graph, source_array, shared_dim_names(model), steps=STEPS,
                 complete=_every)
    assert r.shape is None


def test_the_reshape_step_without_the_inputs_rank():
    """The input's rank unknown: the target's length is the rank, its static positive
    elements the dims; a dim element may be 0 and copy an unknown dim, so it stays unknown."""
    n = Sym(("dim", "N"))
    assert reshaped(None, Known((n, 3, -1)), allowzero=False) == (None, 3, None)
    assert reshaped(None, Known((n, 3)), allowzero=True) == (n, 3)
    # past a known rank a 0 fails in onnxruntime: the element is the dim
    assert reshaped((12,), Known((n, n)), allowzero=False)[1] == n
    assert reshaped((12,), Known((0, 0)), allowzero=False) == (12, None)


def test_a_dim_of_the_graphs_own_name_is_written_by_that_name():
    """A target element that is a dim inference named (``unk__7``, of a custom op's output,
    related to no input) is written in the shape given by that name: the same symbol for every
    reader, as inference would have named it."""
    nodes = [helper.make_node("Opaque", ["y"], ["c"], domain="custom"),
             helper.make_node("Shape", ["c"], ["s"]),
             helper.make_node("Reshape", ["x", "s"], ["r"]),
             helper.make_node("Relu", ["r"], ["out"])]
    proto = make_model(nodes, [vinfo("x", shape=["M"]), vinfo("y", shape=["N"])],
                       [vinfo("out", shape=["a", "b"])], opset=13)
    proto.graph.value_info.append(vinfo("c", shape=[4, "unk__7"]))
    proto.opset_import.append(helper.make_opsetid("custom", 1))
    r = _walked(proto)["r"]
    assert r.shape is not None and r.shape[1] == ir.SymbolicDim("unk__7")
    assert dim_symbol(r, 1) == Sym(("dim", "unk__7"))


def test_legacy_broadcasting_derives_no_dims():
    """Before opset 7 ``Add(a, b, broadcast=1, axis=1)`` aligns b at axis 1, not at the right:
    right-aligned dims would be wrong ([N, 3, 1] + [3] is [N, 3, 1], not [N, 3, 3])."""
    a = ir.Value(name="a", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["N", 3, 1]))
    b = ir.Value(name="b", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([3]))
    legacy = ir.node("Add", [a, b], attributes={"broadcast": 1, "axis": 1})
    modern = ir.node("Add", [a, b])
    assert derived_dims(legacy, lambda v: None, source_array, steps=STEPS) is None
    assert derived_dims(modern, lambda v: None, source_array, steps=STEPS) == \
        (Sym(("dim", "N")), 3, 3)


def test_a_rewrites_constant_chain_is_left_to_the_fold_shapeless(tmp_path):
    """A BatchNormalization fused into its Conv builds scale / sqrt(var + eps)... from its
    parameters; here they are Identities of weights another node keeps using (an exporter's
    shared all-ones and zeros, as in a TorchScript SegFormer). The rewrite's walk gives no shape
    to that chain (its values are constants): the fold sizes it after evaluation, as before
    shapes were given, and folds it into the Conv's weight and bias."""
    ones, zeros = np.ones(32, np.float32), np.zeros(32, np.float32)  # 128 B: past a scalar
    nodes = [helper.make_node("Identity", ["ones"], [name]) for name in ("scale", "var")]
    nodes += [helper.make_node("Identity", ["zeros"], [name]) for name in ("bias", "mean")]
    nodes += [helper.make_node("Conv", ["x", "w"], ["c"]),
              helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"],
                               ["bn"]),
              helper.make_node("Relu", ["bn"], ["out"]),
              helper.make_node("Sub", ["p", "ones"], ["q"]),  # the shared weights stay used
              helper.make_node("Max", ["q", "zeros"], ["other"])]
    proto = make_model(nodes, [vinfo("x", shape=["N", 3, "H", "W"]), vinfo("p", shape=["M", 32])],
                       [vinfo("out", shape=["N", 32, "H", "W"]), vinfo("other", shape=["M", 32])],
                       [tensor("w", np.random.default_rng(0).standard_normal((32, 3, 1, 1))
                               .astype(np.float32)), tensor("ones", ones),
                        tensor("zeros", zeros)], opset=13)
    folded, _report, out = fold_proto(proto, tmp_path)
    assert sorted(_ops(folded)) == ["Conv", "Max", "Relu", "Sub"], _ops(folded)
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((2, 3, 5, 5)).astype(np.float32),
             "p": rng.standard_normal((3, 32)).astype(np.float32)}
    for a, b in zip(run_ort(proto, feeds), run_ort(onnx.load(out), feeds), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
