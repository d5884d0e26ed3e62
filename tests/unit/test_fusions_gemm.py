"""Gemm fusions and constant-factor merging (``rules/fusions.py``): MatMul(2-D) + Add -> Gemm,
BatchNormalization into Gemm and MatMul weights, (x * k) * c -> x * (k * c). Each folded model
has fewer nodes and computes, in onnxruntime (its own fusions off), what the original computes
within float tolerance; every refusal keeps the original nodes."""

from __future__ import annotations

import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxfold import optimize
from tests.support.models import make_model, tensor, vinfo

RNG = np.random.default_rng(1)


@pytest.fixture(autouse=True)
def _seeded(monkeypatch):
    """Each test draws the same numbers whatever ran before it in its worker (a shared
    generator made the data, and a tolerance near a cancellation, depend on test order)."""
    monkeypatch.setattr(sys.modules[__name__], "RNG", np.random.default_rng(1))
K, N = 5, 6  # the MatMul's inner dim and its output columns
ELEM = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
        np.float16: TensorProto.FLOAT16}


def _w(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _session(model):
    options = ort.SessionOptions()  # onnxruntime's own fusions off: the plain original
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _folded(original, hit=None):
    """The optimized model (its op types checked by the caller); ``hit``: the rule that must
    have fired."""
    result = optimize(original)
    if hit is not None:
        assert result.report.pattern_hits.get(hit), result.report.pattern_hits
    return result, result.to_proto()


def _out(name, elem, *shapes):
    """A graph output of ``elem`` whose rank is that of ``shapes`` broadcast (dims unknown)."""
    return vinfo(name, elem, [None] * max(len(s) for s in shapes))


def _refused(result, rule, reason):
    """``rule`` did not fire; with a ``reason``, its check refused, saying so."""
    assert rule not in result.report.pattern_hits
    if reason is not None:
        assert any(k.startswith(f"{rule}: ") and reason in k
                   for k in result.report.patterns_rejected), result.report.patterns_rejected


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _same(original, folded, x_shape, dtype=np.float32, rtol=1e-5, atol=1e-5):
    """Both models in onnxruntime agree on random ``x`` of each batch size (a str first dim of
    ``x_shape``: dynamic, run at 1 and 3)."""
    sess_a, sess_b = _session(original), _session(folded)
    batches = (1, 3) if isinstance(x_shape[0], str) else (x_shape[0],)
    for m in batches:
        x = _w(m, *x_shape[1:], dtype=dtype)
        for a, b in zip(sess_a.run(None, {"x": x}), sess_b.run(None, {"x": x})):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)


# --- MatMul + Add -> Gemm -------------------------------------------------------------------

def _matmul_add(c, x_shape=("M", K), c_first=False, dtype=np.float32, extra_reader=False,
                x_typed=True, opset=17):
    add_inputs = ["c", "mm"] if c_first else ["mm", "c"]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"]),
             helper.make_node("Add", add_inputs, ["y"])]
    outputs = [_out("y", ELEM[dtype], x_shape, np.shape(c))]
    if extra_reader:  # the product is read twice
        nodes.append(helper.make_node("Relu", ["mm"], ["r"]))
        outputs.append(_out("r", ELEM[dtype], x_shape))
    inputs = [vinfo("x", ELEM[dtype], list(x_shape))]
    if not x_typed:  # x reshaped to a shape of unknown length: its rank is unknown
        nodes.insert(0, helper.make_node("Reshape", ["x_in", "s"], ["x"]))
        inputs = [vinfo("x_in", ELEM[dtype], list(x_shape)),
                  vinfo("s", TensorProto.INT64, ["r"])]
    inits = [tensor("W", _w(K, N, dtype=dtype)), tensor("c", np.asarray(c, dtype))]
    return make_model(nodes, inputs, outputs, inits, opset=opset)


@pytest.mark.parametrize(("c_shape", "x_shape"), [
    ((N,), ("M", K)), ((1, N), ("M", K)), ((), ("M", K)), ((1, 1), ("M", K)), ((1,), ("M", K)),
    ((4, N), (4, K)), ((4, 1), (4, K))],
    ids=["N", "1N", "scalar", "11", "1", "MN-static", "M1-static"])
@pytest.mark.parametrize("c_first", [False, True], ids=["mm+c", "c+mm"])
def test_matmul_add_becomes_gemm(c_shape, x_shape, c_first):
    original = _matmul_add(_w(*c_shape), x_shape, c_first)
    _, folded = _folded(original, "fuse_matmul_add_into_gemm")
    assert _ops(folded) == ["Gemm"]
    _same(original, folded, x_shape)


@pytest.mark.parametrize(("dtype", "rtol"), [(np.float64, 1e-12), (np.float16, 2e-2)])
def test_matmul_add_becomes_gemm_in_float64_and_float16(dtype, rtol):
    original = _matmul_add(_w(N, dtype=dtype), dtype=dtype)
    _, folded = _folded(original, "fuse_matmul_add_into_gemm")
    assert _ops(folded) == ["Gemm"]
    _same(original, folded, ("M", K), dtype, rtol=rtol, atol=rtol)


NOT_2D, NOT_C = "not a 2-D MatMul", "the constant is not Gemm's C"


@pytest.mark.parametrize(("case", "reason", "runs"), [
    ({"x_shape": ("B", 3, K)}, NOT_2D, True),  # a 3-D MatMul: no Gemm
    ({"x_typed": False}, NOT_2D, False),  # the input's rank unknown
    ({"c": _w(4, N)}, NOT_C, False),  # one row per M, M dynamic (M = 4 only)
    ({"c": _w(2, 1, N)}, NOT_C, True),  # broadcasts the product to 3-D
    ({"extra_reader": True}, None, True),  # the pattern's single-use MatMul: no match
    ({"c": _w(4, N), "x_shape": (4, K), "opset": 6}, "opset < 7", False),  # C by attribute
], ids=["3-D", "rank-unknown", "MN-dynamic-M", "3-D-C", "shared-product", "opset-6"])
def test_matmul_add_stays(case, reason, runs):
    case = {"c": _w(N), **case}
    original = _matmul_add(**case)
    result, folded = _folded(original)
    _refused(result, "fuse_matmul_add_into_gemm", reason)
    assert "Gemm" not in _ops(folded)
    if runs:
        _same(original, folded, case.get("x_shape", ("M", K)))


# --- BatchNormalization into Gemm and MatMul -----------------------------------------------

def _bn_params(dtype=np.float32, var=None):
    var = np.abs(_w(N)) + 0.1 if var is None else var
    return [tensor("scale", _w(N, dtype=dtype)), tensor("bn_bias", _w(N, dtype=dtype)),
            tensor("mean", _w(N, dtype=dtype)), tensor("var", np.asarray(var, dtype))]


def _linear_bn(op="Gemm", trans_b=0, c=(N,), alpha=1.0, beta=1.0, x_shape=("M", K),
               dtype=np.float32, shared=False, training=False, var=None):
    w_shape = (N, K) if trans_b else (K, N)
    inits = [tensor("W", _w(*w_shape, dtype=dtype)), *_bn_params(dtype, var)]
    if op == "Gemm":
        inputs = ["x", "W"]
        if c is not None:
            inputs.append("C")
            inits.append(tensor("C", np.asarray(c if isinstance(c, np.ndarray) else _w(*c),
                                                dtype)))
        layer = helper.make_node("Gemm", inputs, ["h"], transB=trans_b, alpha=alpha, beta=beta)
    else:
        layer = helper.make_node("MatMul", ["x", "W"], ["h"])
    nodes = [layer, helper.make_node("BatchNormalization",
                                     ["h", "scale", "bn_bias", "mean", "var"], ["y"],
                                     epsilon=1e-3, **({"training_mode": 1} if training else {}))]
    outputs = [_out("y", ELEM[dtype], x_shape)]
    if shared:  # the weight is read at run time too
        nodes.append(helper.make_node("Relu", ["W"], ["w_relu"]))
        outputs.append(_out("w_relu", ELEM[dtype], w_shape))
    return make_model(nodes, [vinfo("x", ELEM[dtype], list(x_shape))], outputs, inits,
                      opset=15)


@pytest.mark.parametrize(("trans_b", "c", "alpha", "beta"), [
    (0, (N,), 1.0, 1.0), (1, (N,), 1.0, 1.0), (0, None, 1.0, 1.0), (1, (1, N), 1.0, 1.0),
    (0, (), 1.0, 1.0), (1, (N,), 0.5, 2.0), (0, (N,), 1.0, 0.0)],
    ids=["C", "transB", "no-C", "1N-transB", "scalar-C", "alpha-beta", "beta-0"])
def test_batch_norm_folds_into_gemm(trans_b, c, alpha, beta):
    original = _linear_bn("Gemm", trans_b, c, alpha, beta)
    _, folded = _folded(original, "fuse_batch_norm_into_gemm")
    assert _ops(folded) == ["Gemm"]
    _same(original, folded, ("M", K))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_folds_into_a_2d_matmul_as_gemm(dtype):
    original = _linear_bn("MatMul", dtype=dtype)
    _, folded = _folded(original, "fuse_batch_norm_into_gemm")
    assert _ops(folded) == ["Gemm"]
    _same(original, folded, ("M", K), dtype)


def test_matmul_add_then_batch_norm_is_one_gemm():
    original = _matmul_add(_w(N))
    graph = original.graph
    graph.node[1].output[0] = "h"
    graph.node.append(helper.make_node("BatchNormalization",
                                       ["h", "scale", "bn_bias", "mean", "var"], ["y"]))
    graph.initializer.extend(_bn_params())
    result, folded = _folded(original, "fuse_batch_norm_into_gemm")
    assert result.report.pattern_hits.get("fuse_matmul_add_into_gemm") == 1
    assert _ops(folded) == ["Gemm"]
    _same(original, folded, ("M", K))


def _inf_at(values, i=2):
    values = np.array(values, np.float32)
    values[i] = np.inf
    return values


VAR = "var + epsilon <= 0"


@pytest.mark.parametrize(("case", "reason"), [
    ({"shared": True}, "the weight is shared"),
    ({"training": True}, "training-mode"),
    ({"op": "MatMul", "x_shape": ("B", N, K)}, "not known to be 2-D"),  # BN's axis 1 is not W's
    ({"c": _w(4, N), "x_shape": (4, K)}, "C is not one value per output column"),
    ({"c": _w(4, 1), "x_shape": (4, K)}, "C is not one value per output column"),
    # onnxruntime skips C when beta is 0, the fused 0 * inf would be NaN
    ({"c": _inf_at(_w(N)), "beta": 0.0}, "beta is not 1 and C is not finite"),
    ({"var": np.full(N, -1.0, np.float32)}, VAR),
    ({"var": _inf_at(np.ones(N))}, VAR),
    ({"dtype": np.float16}, "not one float32/float64 dtype"),
], ids=["shared-weight", "training", "3-D-MatMul", "MN-C", "M1-C", "beta-0-inf-C",
        "negative-var", "inf-var", "float16"])
def test_batch_norm_stays_after_gemm_or_matmul(case, reason):
    original = _linear_bn(**case)
    result, folded = _folded(original)
    _refused(result, "fuse_batch_norm_into_gemm", reason)
    assert "BatchNormalization" in _ops(folded)
    if not case.get("training") and "var" not in case:
        _same(original, folded, case.get("x_shape", ("M", K)), case.get("dtype", np.float32),
              rtol=1e-2 if case.get("dtype") is np.float16 else 1e-5)


def test_the_conv_batch_norm_rule_leaves_gemm_to_its_own_name():
    result, _ = _folded(_linear_bn("Gemm"), "fuse_batch_norm_into_gemm")
    assert "fuse_batch_norm_into_conv" not in result.report.pattern_hits


# --- (x * k) * c -> x * (k * c) ----------------------------------------------------------

def _chain(k, c, op="Mul", x_shape=("M", N), k_first=False, c_first=False, extra_reader=False,
           dtype=np.float32):
    inner = ["k", "x"] if k_first else ["x", "k"]
    outer = ["c", "t"] if c_first else ["t", "c"]
    nodes = [helper.make_node(op, inner, ["t"]), helper.make_node(op, outer, ["y"])]
    elem = ELEM.get(dtype, TensorProto.INT64)
    outputs = [_out("y", elem, x_shape, np.shape(k), np.shape(c))]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["t"], ["n"]))
        outputs.append(_out("n", elem, x_shape, np.shape(k)))
    inits = [tensor("k", np.asarray(k, dtype)), tensor("c", np.asarray(c, dtype))]
    return make_model(nodes, [vinfo("x", elem, list(x_shape))], outputs, inits)


@pytest.mark.parametrize(("k", "c"), [(_w(N), np.float32(0.125)), (_w(1, N), _w(N)),
                                      (np.float32(3.0), _w(1, 1))],
                         ids=["N*scalar", "1N*N", "scalar*11"])
@pytest.mark.parametrize(("k_first", "c_first"), [(False, False), (True, False), (False, True),
                                                  (True, True)])
def test_constant_factors_merge(k, c, k_first, c_first):
    original = _chain(k, c, k_first=k_first, c_first=c_first)
    _, folded = _folded(original, "merge_constant_factors")
    assert _ops(folded) == ["Mul"]
    _same(original, folded, ("M", N))


@pytest.mark.parametrize(("case", "reason"), [
    ({"extra_reader": True}, None),  # the pattern's single-use inner Mul: no match
    ({"c": _w(3, 1, N)}, "broadcasts beyond x's shape"),  # the chain broadcasts x to 3-D
    ({"k": _w(N, 1), "c": _w(1, N), "x_shape": (N, N)}, "bigger"),  # k * c is N x N
    ({"k": np.full(N, 1e30), "c": np.float32(1e10)}, "overflow"),
    ({"k": np.full(N, 1e-30), "c": np.float32(1e-10)}, "underflow"),
    ({"k": _inf_at(_w(N))}, "not finite"),
    ({"op": "Add"}, None),  # not built: the low bits x loses to k in the original would stay
    ({"dtype": np.int64, "k": np.arange(N), "c": 3}, "not one float32/float64 dtype"),
], ids=["shared", "3-D", "bigger", "overflow", "underflow", "inf", "add", "int64"])
def test_constant_factors_stay(case, reason):
    case = {"k": _w(N), "c": np.float32(2.0), **case}
    original = _chain(**case)
    result, folded = _folded(original)
    _refused(result, "merge_constant_factors", reason)
    assert len(folded.graph.node) >= 2
    if case.get("dtype") is None:
        _same(original, folded, case.get("x_shape", ("M", N)))
