"""``x + 0.0`` goes only where nothing downstream tells ``-0.0`` from ``+0.0``
(``rules/zero_sign.py``): an input full of ``-0.0`` runs through both models in onnxruntime, and
every output must be the same number (``1 / -0.0`` and ``1 / +0.0`` are not). A zero Add that
an If branch or a Loop returns, or a Cast to string reads, stays; every op the table
``zero_sign.ABSORBS`` names gives the same bits for either zero in onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnxfold.rules import zero_sign

from onnxfold import FoldOptions
from onnxfold.io.reader import model_from_proto
from onnxfold.pipeline.optimizer import optimize
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
    *[([helper.make_node("Unsqueeze", ["a", "last"], ["u"]),
        helper.make_node("DFT", ["u"], ["f"], axis=1), *after],
       [tensor("last", np.asarray([-1], np.int64))], "Add", np.float32(0), gone)
      for after, gone in (  # a DFT is linear: it passes the signs of zeros on
          ([helper.make_node("ReduceSum", ["f", "last"], ["y"], keepdims=0)], True),
          ([helper.make_node("ReduceSum", ["f", "last"], ["s"], keepdims=0),
            _node("Reciprocal", ["s"])], False))],
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


ZEROS = np.array([-0.0, 1.0, 0.0, -2.5], np.float32)


def _same_numbers(original, folded, feeds):
    for want, got in zip(run_ort(original, feeds), run_ort(folded, feeds), strict=True):
        np.testing.assert_array_equal(got, want)  # -inf != inf; -0.0 == 0.0


def test_a_zero_add_returned_by_an_if_branch_stays(tmp_path):
    """An If's result goes on to the enclosing graph (here a Reciprocal): a branch output is
    not a graph output that only compares numbers."""
    then = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["t"]), helper.make_node("Add", ["t", "z"], ["r"])],
        "then", [], [vinfo("r", shape=[4])], [tensor("z", np.float32(0.0))])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [vinfo("e", shape=[4])])
    proto = make_model(
        [helper.make_node("If", ["cond"], ["b"], then_branch=then, else_branch=other),
         helper.make_node("Reciprocal", ["b"], ["y"])],
        [vinfo("x", shape=[4]), vinfo("cond", TensorProto.BOOL, [])], [vinfo("y", shape=[4])])
    _, _, out = fold_proto(proto, tmp_path)
    _same_numbers(proto, out, {"x": ZEROS, "cond": np.array(True)})


def test_a_zero_add_returned_as_a_loop_state_stays(tmp_path):
    """A Loop body's output is its next state, read again by the body (a Reciprocal)."""
    body = helper.make_graph(
        [helper.make_node("Neg", ["s"], ["t"]), helper.make_node("Add", ["t", "z"], ["s2"]),
         helper.make_node("Identity", ["c"], ["c2"]), helper.make_node("Reciprocal", ["s"], ["r"])],
        "body", [vinfo("i", TensorProto.INT64, []), vinfo("c", TensorProto.BOOL, []),
                 vinfo("s", shape=[4])],
        [vinfo("c2", TensorProto.BOOL, []), vinfo("s2", shape=[4]), vinfo("r", shape=[4])],
        [tensor("z", np.float32(0.0))])
    proto = make_model([helper.make_node("Loop", ["n", "", "x"], ["last", "rs"], body=body)],
                       [vinfo("x", shape=[4]), vinfo("n", TensorProto.INT64, [])],
                       [vinfo("last", shape=[4]), vinfo("rs", shape=[3, 4])])
    _, _, out = fold_proto(proto, tmp_path)
    _same_numbers(proto, out, {"x": ZEROS, "n": np.array(3, np.int64)})


def test_a_zero_add_cast_to_string_stays(tmp_path):
    """Cast to string writes "-0" for -0.0 and "0" for +0.0: it observes the sign."""
    proto = make_model(
        [helper.make_node("Add", ["x", "z"], ["a"]),
         helper.make_node("Cast", ["a"], ["y"], to=TensorProto.STRING)],
        [vinfo("x", shape=[4])], [vinfo("y", TensorProto.STRING, [4])],
        [tensor("z", np.float32(0.0))])
    folded, _, out = fold_proto(proto, tmp_path)
    assert [n.op_type for n in folded.graph.node] == ["Add", "Cast"]
    feeds = {"x": ZEROS}
    assert list(run_ort(out, feeds)[0]) == list(run_ort(proto, feeds)[0])


def _one_node(op, arrays, attrs, n_out):
    ins = [helper.make_tensor_value_info(f"i{k}", helper.np_dtype_to_tensor_dtype(a.dtype),
                                         a.shape) for k, a in enumerate(arrays)]
    outs = [helper.make_empty_tensor_value_info(f"o{k}") for k in range(n_out)]
    graph = helper.make_graph([helper.make_node(op, [i.name for i in ins],
                                                [o.name for o in outs], **attrs)], "g", ins, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {f"i{k}": a for k, a in enumerate(arrays)})


def _with_zeros(dtype, shape=(3, 8), seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    flat = x.reshape(-1)
    flat[: 8] = [0.0, np.inf, -np.inf, np.nan, 1e-40, 0.0, 0.0, 3.0]
    rng.shuffle(flat)
    return x.astype(dtype)


_INPUTS = {  # op -> (other inputs, attributes), the zeros going into input 0
    "Equal": ([_with_zeros], {}), "Less": ([_with_zeros], {}), "Greater": ([_with_zeros], {}),
    "LessOrEqual": ([_with_zeros], {}), "GreaterOrEqual": ([_with_zeros], {}),
    "ArgMax": ([], {"axis": 1}), "ArgMin": ([], {"axis": 1}),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("op", sorted(zero_sign.ABSORBS))
def test_an_absorbing_op_gives_the_same_bits_for_either_zero(op, dtype):
    """Every (op, input) of ``ABSORBS``, in onnxruntime: -0.0 and +0.0 give identical bits."""
    others, attrs = _INPUTS.get(op, ([], {}))
    x = _with_zeros(dtype)
    arrays = [x] + [make(dtype, seed=1) for make in others]
    index = zero_sign.ABSORBS[op]
    if op == "Pow":  # the exponent: a base of any value
        arrays = [_with_zeros(dtype, seed=2), x]
    if op == "Where":  # X, selected half the time, and a Y with zeros of its own
        arrays = [np.arange(x.size).reshape(x.shape) % 2 == 0, x, _with_zeros(dtype, seed=3)]
    index = max(index, 0)
    results = []
    for sign in (-0.0, 0.0):
        feeds = list(arrays)
        feeds[index] = np.where(arrays[index] == 0, dtype(sign), arrays[index]).astype(dtype)
        try:
            results.append(_one_node(op, feeds, attrs, 3 if op == "DynamicQuantizeLinear" else 1))
        except Exception as e:
            pytest.skip(f"{op} {np.dtype(dtype)}: {str(e).splitlines()[0][:80]}")
    for a, b in zip(*results, strict=True):
        assert a.tobytes() == b.tobytes(), op


def test_an_unknown_cast_type_after_a_zero_add_keeps_the_add(tmp_path):
    """Cast(to=99), a type onnx does not know: the zero-sign check keeps the Add instead of
    raising (which would skip the rule for the whole model, or fail the run under --strict)."""
    nodes = [helper.make_node("Add", ["x", "z"], ["a"]),
             helper.make_node("Cast", ["a"], ["y"], to=99)]
    proto = make_model(nodes, [vinfo("x", shape=[3])], [vinfo("y", shape=[3])],
                       [tensor("z", np.zeros(3, np.float32))])
    result = optimize(model_from_proto(proto), FoldOptions(strict=True))
    assert [n.op_type for n in result.model.graph] == ["Add", "Cast"]


def _flipped(x):
    """``x`` with every zero +0.0 (what ``x + 0.0`` gives)."""
    return np.where(x == 0, np.zeros_like(x), x)


@pytest.mark.parametrize("size", [1, 2, 7, 64, 1000, 100003])  # 100003: min/max in threads
def test_dynamic_quantize_linear_gives_the_same_bits_for_either_zero(size):
    """All three outputs, for inputs all zeros of mixed signs (the range is [0, 0]: scale 1),
    zeros beside one number, and zeros among many."""
    rng = np.random.default_rng(size)
    for case in range(12):
        x = np.where(rng.random(size) < 0.5, -0.0, 0.0).astype(np.float32)
        if case % 3 == 1:
            x[rng.integers(0, size)] = rng.standard_normal()
        elif case % 3 == 2:
            x = np.where(rng.random(size) < 0.5, rng.standard_normal(size), x).astype(np.float32)
        got = _one_node("DynamicQuantizeLinear", [x], {}, 3)
        want = _one_node("DynamicQuantizeLinear", [_flipped(x)], {}, 3)
        for a, b in zip(got, want, strict=True):
            assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("elem", [TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16,
                                  TensorProto.INT16])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_linear_to_integers_gives_the_same_bits_for_either_zero(elem, per_axis):
    rng = np.random.default_rng(elem)
    scale = np.array([0.05, 0.3, 1e-3] if per_axis else 0.05, np.float32)
    zero_point = np.full(scale.shape, 3, helper.tensor_dtype_to_np_dtype(elem))
    for size in (1, 5, 1000):
        x = rng.standard_normal((size, 3)).astype(np.float32)
        x[rng.random((size, 3)) < 0.4] = -0.0
        got = _one_node("QuantizeLinear", [x, scale, zero_point], {"axis": 1}, 1)
        want = _one_node("QuantizeLinear", [_flipped(x), scale, zero_point], {"axis": 1}, 1)
        assert got[0].tobytes() == want[0].tobytes()


def _quantized_model(quantizer, bias, zero_point_type=TensorProto.UINT8):
    """x + bias -> a quantizer -> its outputs (a float8 one: the Cast of it to float)."""
    nodes = [helper.make_node("Add", ["x", "bias"], ["a"])]
    inits = [tensor("bias", bias)]
    if quantizer == "DynamicQuantizeLinear":
        nodes.append(helper.make_node("DynamicQuantizeLinear", ["a"], ["q", "s", "z"]))
        outs = [vinfo("q", TensorProto.UINT8, ["N", 3]), vinfo("s", shape=[]),
                vinfo("z", TensorProto.UINT8, [])]
    else:
        zero = np.zeros((), helper.tensor_dtype_to_np_dtype(zero_point_type))
        inits += [tensor("scale", np.float32(0.05)),
                  helper.make_tensor("zp", zero_point_type, [], [0])]
        nodes.append(helper.make_node("QuantizeLinear", ["a", "scale", "zp"], ["q"]))
        outs = [vinfo("q", zero_point_type, ["N", 3])]
        if zero.dtype.kind not in "iu":
            nodes.append(helper.make_node("Cast", ["q"], ["f"], to=TensorProto.FLOAT))
            nodes.append(helper.make_node("Reciprocal", ["f"], ["r"]))
            outs = [vinfo("r", shape=["N", 3])]
    return make_model(nodes, [vinfo("x", shape=["N", 3])], outs, inits, opset=21,
                      ir_version=10)


@pytest.mark.parametrize(("quantizer", "zero_point_type", "gone"), [
    ("DynamicQuantizeLinear", None, True),
    ("QuantizeLinear", TensorProto.UINT8, True),
    ("QuantizeLinear", TensorProto.INT8, True),
    ("QuantizeLinear", TensorProto.FLOAT8E4M3FN, False)])  # -0.0 stays -0.0 in float8
def test_a_zero_bias_before_a_quantizer_goes(tmp_path, quantizer, zero_point_type, gone):
    proto = _quantized_model(quantizer, np.zeros(3, np.float32), zero_point_type)
    folded, _, out = fold_proto(proto, tmp_path)
    assert ("Add" not in [n.op_type for n in folded.graph.node]) == gone
    for n in (1, 4):
        feeds = _feeds(n)
        for want, got in zip(run_ort(proto, feeds), run_ort(out, feeds), strict=True):
            assert want.tobytes() == got.tobytes()


_RESIZES = [  # attributes of a Resize by scales [1, 1, 2, 1.5] (antialias: by 0.6)
    {"mode": "nearest"}, {"mode": "nearest", "nearest_mode": "ceil"},
    {"mode": "linear"}, {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
    {"mode": "cubic"}, {"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5},
    {"mode": "linear", "antialias": 1}, {"mode": "cubic", "antialias": 1},
    {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
     "extrapolation_value": -0.0}]


def _resize_model(attrs, after=()):
    """x + 0.0 -> Resize -> ``after`` nodes (reading "r", the last one writing "y")."""
    down = attrs.get("antialias")
    scales = np.array([1, 1, 0.6, 0.6] if down else [1, 1, 2, 1.5], np.float32)
    roi = np.array([0, 0, -0.2, 0.1, 1, 1, 1.1, 0.9], np.float32) \
        if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize" else None
    nodes = [helper.make_node("Add", ["x", "zero"], ["a"]),
             helper.make_node("Resize", ["a", "roi" if roi is not None else "", "scales"],
                              ["r" if after else "y"], **attrs), *after]
    inits = [tensor("zero", np.zeros((3, 1, 1), np.float32)), tensor("scales", scales)]
    if roi is not None:
        inits.append(tensor("roi", roi))
    return make_model(nodes, [vinfo("x", shape=["N", 3, "H", "W"])],
                      [vinfo("y", shape=["N", 3, None, None])], inits, opset=19)


def _images(n, h, w):
    x = np.random.default_rng(n * h).standard_normal((n, 3, h, w)).astype(np.float32)
    x[np.random.default_rng(w).random(x.shape) < 0.5] = -0.0
    x[:, 1] = -0.0  # a channel of zeros: its interpolations are sums of zeros
    return {"x": x}


@pytest.mark.parametrize("attrs", _RESIZES)
def test_a_resize_passes_a_zeros_sign_on(attrs):
    """Resize of -0.0 and of +0.0 in onnxruntime: the same numbers, the same bits but for the
    signs of zeros (what "passes on" claims)."""
    proto = _resize_model(attrs)
    proto.graph.node.remove(proto.graph.node[0])
    proto.graph.node[0].input[0] = "x"
    for n, h, w in ((1, 5, 7), (2, 8, 3)):
        x = _images(n, h, w)["x"]
        (minus,), (plus,) = run_ort(proto, {"x": x}), run_ort(proto, {"x": _flipped(x)})
        np.testing.assert_array_equal(minus, plus)
        assert minus[minus != 0].tobytes() == plus[plus != 0].tobytes()


@pytest.mark.parametrize("attrs", _RESIZES)
@pytest.mark.parametrize(("after", "gone"), [
    ((), True),  # a graph output compares numbers
    ((helper.make_node("Exp", ["r"], ["e"]), helper.make_node("Reciprocal", ["e"], ["y"])),
     True),
    ((helper.make_node("Reciprocal", ["r"], ["y"]),), False)])  # the sign gets there
def test_a_zero_add_before_a_resize_goes_unless_its_sign_reaches_an_observer(
        tmp_path, attrs, after, gone):
    proto = _resize_model(attrs, after)
    folded, _, out = fold_proto(proto, tmp_path)
    assert ("Add" not in [n.op_type for n in folded.graph.node]) == gone
    for n, h, w in ((1, 5, 7), (2, 8, 3)):
        _same_numbers(proto, out, _images(n, h, w))


def test_explain_names_each_zero_add_it_keeps_and_the_reader_that_observes(tmp_path):
    proto = _model([_node("Reciprocal", ["a"])])
    proto.graph.node[0].name, proto.graph.node[1].name = "bias", "inverse"
    _, report, _ = fold_proto(proto, tmp_path)
    assert report.patterns_rejected == {
        "drop_neutral_element: Add bias stays: it adds a zero, and Reciprocal inverse tells "
        "-0.0 from +0.0": 1}


def test_explain_names_a_neutral_element_that_would_broadcast(tmp_path):
    proto = _model([_node("Relu", ["a"])], c=np.zeros((2, 1, 3), np.float32))
    proto.graph.output[0].CopyFrom(vinfo("y", shape=[2, "N", 3]))
    proto.graph.node[0].name = "bias"
    _, report, _ = fold_proto(proto, tmp_path)
    assert report.patterns_rejected == {
        "drop_neutral_element: Add bias stays: its constant may broadcast the other input to a "
        "larger shape": 1}
