"""Signed zeros and NaNs: a fold gives onnxruntime's zeros, sign included, and its NaNs.

A zero's sign is a value: ``1 / -0.0`` is ``-inf``, ``Cast(-0.0, to=STRING)`` is ``"-0"``. So
every fold declared bitwise gives onnxruntime's zeros bit for bit, onnxruntime's quirks
included: its ``Where`` gives ``+0.0`` for a zero it selects from X, its bfloat16 ``Sign`` of
``-0.0`` is ``+0.0``. A NaN's sign and payload are not: no op reads them (comparisons are false,
``IsNaN`` true, ``Abs`` clears the sign, onnxruntime casts either to the string ``"NaN"``). The
fold gives onnxruntime's NaN bits wherever it computes the same operation on one NaN; where two
NaNs meet in an ``Add`` or ``Mul``, which one onnxruntime returns depends on its kernel's
operand order, and the fold's is a NaN too (docs/exactness.md).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.cli import REFUSAL_TIMEOUT, assert_ok, run_cli
from tests.support.models import make_model, tensor, vinfo
from tests.support.ort_oracle import run_node_ort, run_rule
from tests.support.running import assert_same_bits, fold_proto, run_ort

SPECIAL = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.5, -2.5]
DTYPES = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16),
          np.dtype(ml_dtypes.bfloat16)]
UNARY = ["Abs", "Neg", "Sqrt", "Reciprocal", "Relu", "Floor", "Ceil", "Round", "Sign",
         "Identity"]
BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min"]
BITS = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(BITS[a.dtype.itemsize])


def _specials(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of special values, as two arrays."""
    values = np.array(SPECIAL, np.float32).astype(dtype)
    return np.repeat(values, len(values)), np.tile(values, len(values))


def _fold_and_oracle(op: str, inputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The rule's result and onnxruntime's, for one node."""
    got = run_rule(op, inputs, {}, 18)[0]
    want = run_node_ort(op, inputs, {}, 18, like=[got] if got.dtype.name == "bfloat16" else None)
    return got, want[0]


def _cases() -> list[tuple[str, str]]:
    return [(op, d.name) for d in DTYPES for op in [*UNARY, *BINARY, "Where", "Clip"]]


@pytest.mark.parametrize(("op", "dtype"), _cases())
def test_bitwise_folds_give_onnxruntimes_bits(op, dtype):
    """Every pair of +-0, +-NaN, +-inf and finite values: the same bits as onnxruntime, but
    for the NaN an Add or a Mul of two NaNs returns (a NaN either way)."""
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    x, y = _specials(dt)
    inputs = {"Where": [np.arange(x.size) % 3 != 0, x, y],
              "Clip": [x, np.array(-1, dt), np.array(1, dt)]}.get(op, [x, y] if op in BINARY
                                                                   else [x])
    got, want = _fold_and_oracle(op, inputs)
    differ = _bits(got) != _bits(want)
    if op in ("Add", "Mul"):
        both_nan = np.isnan(x.astype(np.float32)) & np.isnan(y.astype(np.float32))
        assert np.isnan(got.astype(np.float32)[both_nan]).all()
        differ &= ~both_nan
    where = np.nonzero(differ)[0]
    assert not where.size, (f"{op} {dtype} differs from onnxruntime at inputs "
                            f"{[a[where[:3]] for a in inputs if a.ndim]}: fold "
                            f"{got[where[:3]]}, onnxruntime {want[where[:3]]}")


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("shapes", ["same", "scalar x", "scalar y", "scalar true", "scalar false"])
def test_where_gives_a_positive_zero_for_xs_zeros_as_onnxruntime(dtype, shapes):
    """onnxruntime's Where merges X's selection with Y's by taking X's where it is not zero:
    a -0.0 selected from X is +0.0, one selected from Y stays -0.0, in every broadcast."""
    c = np.array([True, True, False, True])
    x = np.array([-0.0, 1.0, 2.0, np.nan], dtype)
    y = np.array([3.0, -0.0, -0.0, 5.0], dtype)
    if shapes == "scalar x":
        x = np.array(-0.0, dtype)
    elif shapes == "scalar y":
        y = np.array(-0.0, dtype)
    elif shapes.startswith("scalar "):
        c = np.array(shapes == "scalar true")
    got, want = _fold_and_oracle("Where", [c, x, y])
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _reciprocal_of_where(cond: np.ndarray, x_input: bool) -> onnx.ModelProto:
    """y = 1 / Where(cond, x, z), with ``x`` holding -0.0 (a graph input or a constant)."""
    inits = [tensor("c", cond), tensor("z", np.array([-0.0, 3.0, -0.0], np.float32))]
    inputs = [vinfo("x", shape=[3])] if x_input else []
    if not x_input:
        inits.append(tensor("x", np.array([-0.0, 2.0, -0.0], np.float32)))
    nodes = [helper.make_node("Where", ["c", "x", "z"], ["w"]),
             helper.make_node("Reciprocal", ["w"], ["y"])]
    return make_model(nodes, inputs, [vinfo("y", shape=[3])], inits)


@pytest.mark.parametrize("cond", [[True, False, True], [True, True, True], [False, False, False]],
                         ids=["mixed", "all true", "all false"])
@pytest.mark.parametrize("x_input", [False, True], ids=["constant x", "x an input"])
def test_one_over_a_selected_zero_is_onnxruntimes_infinity(tmp_path, cond, x_input):
    """The issue's case: a folded Where kept -0.0 where onnxruntime gives +0.0, and a later
    ``1 / x`` made that -inf against +inf. With X an input and the condition all true, the
    Where stays (its removal would keep X's -0.0)."""
    model = _reciprocal_of_where(np.array(cond), x_input)
    folded = fold_proto(model, tmp_path)[0]
    feeds = {"x": np.array([-0.0, 2.0, -0.0], np.float32)} if x_input else {}
    assert_same_bits(model, folded, feeds)
    if not x_input:
        assert not [n for n in folded.graph.node if n.op_type == "Where"]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_abs_of_neg_of_nans_folds_to_onnxruntimes_bits(tmp_path, dtype):
    """``Abs(Neg(c))`` of NaNs of both signs: onnxruntime's bits (a NaN with its sign bit
    clear), as every other fold of one NaN through the same operations."""
    c = np.array([np.nan, -np.nan, -0.0, 1.0], np.float32).astype(dtype)
    nodes = [helper.make_node("Neg", ["c"], ["n"]), helper.make_node("Abs", ["n"], ["y"])]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = make_model(nodes, [], [vinfo("y", elem, [4])], [numpy_helper.from_array(c, "c")])
    (want,) = run_ort(model, {})
    (got,) = run_ort(fold_proto(model, tmp_path)[0], {})
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_two_nans_added_are_a_nan_and_compare_equal(tmp_path):
    """The documented exception: ``NaN + -NaN`` is a NaN of either sign (onnxruntime's Add
    returns its second operand's, numpy its first's); the outputs compare equal."""
    a = np.array([np.nan, -np.nan], np.float32)
    model = make_model([helper.make_node("Add", ["a", "b"], ["s"]),
                        helper.make_node("Mul", ["x", "s"], ["y"])],
                       [vinfo("x", shape=[2])], [vinfo("y", shape=[2])],
                       [tensor("a", a), tensor("b", a[::-1].copy())])
    folded = fold_proto(model, tmp_path)[0]
    assert "Add" not in [n.op_type for n in folded.graph.node]
    feeds = {"x": np.ones(2, np.float32)}
    (want,), (got,) = run_ort(model, feeds), run_ort(folded, feeds)
    assert np.isnan(want).all() and np.isnan(got).all()


def test_cast_to_string_reads_a_zeros_sign_but_not_a_nans():
    """Why zeros are matched and NaN signs are not: onnxruntime writes ``-0`` for -0.0, and
    ``NaN`` for a NaN of either sign."""
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.STRING)],
                       [vinfo("x", shape=[4])], [vinfo("y", TensorProto.STRING, [4])])
    (out,) = run_ort(model, {"x": np.array([-0.0, 0.0, np.nan, -np.nan], np.float32)})
    assert list(out) == ["-0", "0", "NaN", "NaN"]


def _scaled_by_a_where(path) -> str:
    """y = x * Where(c, a, b) and z = x * (p + q): the Where folds to a tensor holding a zero
    selected from ``a`` (-0.0 there; onnxruntime computes +0.0), the Add to a NaN added to a
    NaN of the other sign (numpy's NaN is not onnxruntime's)."""
    nan = np.array([np.nan, -np.nan, 1.0, 2.0], np.float32)
    nodes = [helper.make_node("Where", ["c", "a", "b"], ["w"]),
             helper.make_node("Mul", ["x", "w"], ["y"]),
             helper.make_node("Add", ["p", "q"], ["s"]),
             helper.make_node("Mul", ["x", "s"], ["z"])]
    model = make_model(nodes, [vinfo("x", shape=[4])],
                       [vinfo("y", shape=[4]), vinfo("z", shape=[4])],
                       [tensor("c", np.array([True, True, True, False])),
                        tensor("a", np.array([-0.0, 1.0, np.nan, 2.0], np.float32)),
                        tensor("b", np.array([5.0, 6.0, 7.0, 8.0], np.float32)),
                        tensor("p", nan), tensor("q", -nan)])
    onnx.save(model, path)
    return str(path)


def test_check_passes_with_other_nan_bits_and_catches_a_zero_of_the_wrong_sign(tmp_path):
    """``--check`` (its fold verification) takes a NaN of other bits for the same value, and
    ``verify-folds`` refuses a folded -0.0 where the original computes +0.0."""
    source = _scaled_by_a_where(tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    done = run_cli("optimize", source, "-o", out, "--check", "1", timeout=REFUSAL_TIMEOUT)
    assert_ok(done)
    folded = onnx.load(out)
    (w,) = [t for t in folded.graph.initializer if t.name == "w"]
    values = numpy_helper.to_array(w)
    assert values[0] == 0 and not np.signbit(values[0])  # onnxruntime's +0.0
    planted = values.copy()
    planted[0] = -0.0
    w.CopyFrom(numpy_helper.from_array(planted, "w"))
    onnx.save(folded, tmp_path / "planted.onnx")
    done = run_cli("verify-folds", source, tmp_path / "planted.onnx", timeout=REFUSAL_TIMEOUT)
    assert done.returncode == 1, done.stdout
