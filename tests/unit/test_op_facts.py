"""Every op the catalogue declares bitwise, run against onnxruntime (issue 67, item 2).

A ``bitwise`` op fact (``rules/facts.py``) says the op's native folder gives onnxruntime's bits
for every attribute and dtype, and the check then demands those bits of every fold of it: a
wrong declaration fails a user's check (a false alarm) or lets a wrong fold through. So each
declared op runs here on random inputs at the attribute values and dtypes exporters write
(broadcasts, negative axes, float16 and float64, every mode of Pad, per-axis quantization,
three inputs of a variadic op, ...), through its folder and through onnxruntime, fed once
from aligned buffers and once from buffers 4 bytes off alignment (onnxruntime's vectorized
reductions sum in another order there: an op whose kernel does is not bitwise, it varies,
``order_varies``). Every result must be the same bits, the sign of every zero included.

``test_every_bitwise_op_has_cases`` fails for an op declared bitwise with no cases here, so a
new declaration comes with its evidence. A case the folder declines proves nothing and is
counted apart: every op must fold at least one of its cases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest

from onnxfold.declare.catalogue import load_catalogue
from onnxfold.declare.registry import Decline
from tests.support.ort_oracle import _run_bf16, assert_same, make_node_model, rand, run_rule

F32, F16, F64, BF16 = np.float32, np.float16, np.float64, ml_dtypes.bfloat16
FLOATS = (F32, F16, F64)


@dataclass(frozen=True)
class Case:
    """One node: its inputs (made from a seeded generator), attributes, opset, outputs."""

    inputs: Callable[[np.random.Generator], list[np.ndarray | None]]
    attrs: dict = field(default_factory=dict)
    opset: int = 18
    outputs: int = 1


def _floats(*shapes, lo=-4.0, hi=4.0, dtype=F32, specials=True):
    """Inputs of ``shapes``: random floats with zeros of both signs, infinities and a NaN."""
    def make(rs: np.random.Generator) -> list[np.ndarray | None]:
        arrays = []
        for shape in shapes:
            x = rand(shape, dtype, rs, lo, hi)
            if specials and x.size >= 8:
                flat = x.reshape(-1)
                flat[:5] = np.array([0.0, -0.0, np.inf, -np.inf, np.nan]).astype(dtype)
            arrays.append(x)
        return arrays
    return make


def _given(*arrays):
    return lambda rs: [None if a is None else np.asarray(a) for a in arrays]


def _with(first: Callable, *rest):
    """``first``'s inputs followed by the fixed arrays ``rest``."""
    return lambda rs: [*first(rs), *[None if a is None else np.asarray(a) for a in rest]]


def _unary(op: str, dtypes=FLOATS, ints=(), opset=18, lo=-4.0, hi=4.0) -> list[Case]:
    cases = [Case(_floats((3, 5, 8), dtype=d, lo=lo, hi=hi), opset=opset) for d in dtypes]
    cases += [Case(lambda rs, d=d: [rand((4, 6), d, rs, -50, 50)], opset=opset) for d in ints]
    return cases


def _binary(op: str, dtypes=(*FLOATS, np.int64, np.int32), opset=14) -> list[Case]:
    cases = []
    for d in dtypes:
        float_kind = np.dtype(d).kind == "f"
        for a, b in (((2, 3, 8), (2, 3, 8)), ((2, 3, 8), (8,)), ((3, 1), (1, 4)), ((), (5,))):
            if float_kind:
                cases.append(Case(_floats(a, b, dtype=d), opset=opset))
            elif op == "Div":  # integer division by zero is declined: not a claim about bits
                cases.append(Case(lambda rs, a=a, b=b, d=d: [
                    rand(a, d, rs, -50, 50), rand(b, d, rs, 1, 9)], opset=opset))
            else:
                cases.append(Case(lambda rs, a=a, b=b, d=d: [
                    rand(a, d, rs, -50, 50), rand(b, d, rs, -50, 50)], opset=opset))
    return cases


def _compare(op: str) -> list[Case]:
    return [Case(_floats((2, 3, 8), (8,), dtype=d), opset=16) for d in FLOATS] + [
        Case(lambda rs: [rand((4, 5), np.int64, rs, -3, 3), rand((5,), np.int64, rs, -3, 3)],
             opset=16)]


def _logic() -> list[Case]:
    return [Case(lambda rs: [rand((4, 5), np.bool_, rs), rand((5,), np.bool_, rs)], opset=7)]


def _bits(op: str) -> list[Case]:
    two = op != "BitwiseNot"
    return [Case(lambda rs, d=d: [rand((4, 5), d, rs, 0, 120)] + (
        [rand((5,), d, rs, 0, 120)] if two else []), opset=18) for d in (np.int32, np.uint8)]


def _reduce_extreme() -> list[Case]:
    cases = []
    for d in (F32, F16, np.int64):
        for axes, keep in (([1], 1), ([-1], 0), ([0, 2], 1), (None, 0)):
            make = _floats((3, 4, 5), dtype=d, specials=False) if d != np.int64 else \
                (lambda rs: [rand((3, 4, 5), np.int64, rs, -9, 9)])
            tail = [np.array(axes, np.int64)] if axes is not None else []
            cases.append(Case(_with(make, *tail), {"keepdims": keep}, opset=18))
    return cases


def _arg() -> list[Case]:
    return [Case(_floats((3, 4, 5), dtype=d, specials=False),
                 {"axis": axis, "keepdims": keep, "select_last_index": last}, opset=13)
            for d in (F32, F16) for axis in (0, -1) for keep in (0, 1) for last in (0, 1)]


def _cast(op: str) -> list[Case]:
    pairs = [(F32, F16), (F16, F32), (F32, F64), (F64, F32), (F32, np.int64), (np.int64, F32),
             (np.int32, np.int64), (np.bool_, F32), (F32, np.bool_), (F32, BF16),
             (np.int64, np.int32), (F16, F64)]
    cases = []
    for src, dst in pairs:
        if np.dtype(src).kind == "f":
            make = _floats((3, 8), dtype=src, lo=-1e4, hi=1e4, specials=False)
        else:
            make = lambda rs, src=src: [rand((3, 8), src, rs, -1000, 1000)]  # noqa: E731
        if op == "Cast":
            cases.append(Case(make, {"to": _onnx(dst)}, opset=19))
        else:
            cases.append(Case(_with(make, np.zeros(1, dst)), opset=19))
    return cases


def _onnx(dtype) -> int:
    from onnxfold.ir.dtypes import onnx_type
    return onnx_type(np.dtype(dtype))


def _quantize() -> list[Case]:
    cases = []
    for out in (np.uint8, np.int8):
        zero = np.array(3 if out == np.uint8 else -2, out)
        cases.append(Case(_with(_floats((2, 4, 6), lo=-30, hi=30, specials=False),
                                np.float32(0.17), zero), opset=13))
        cases.append(Case(_with(_floats((2, 4, 6), lo=-30, hi=30, specials=False),
                                np.array([0.1, 0.2, 0.3, 0.05], F32), np.full(4, zero, out)),
                          {"axis": 1}, opset=13))
    cases += [Case(_with(_floats((4, 6), lo=-3000, hi=3000, specials=False), np.float32(0.3),
                         np.array(7, out)), opset=21) for out in (np.int16, np.uint16)]
    cases.append(Case(_with(_floats((4, 6), lo=-30, hi=30, specials=False, dtype=F16),
                            np.float16(0.25), np.array(1, np.int8)), opset=21))
    return cases


def _dequantize() -> list[Case]:
    cases = []
    for d in (np.uint8, np.int8):
        cases.append(Case(lambda rs, d=d: [rand((2, 4, 6), d, rs, -128, 255), np.float32(0.17),
                                           np.array(3, d)], opset=13))
        cases.append(Case(lambda rs, d=d: [rand((2, 4, 6), d, rs, -128, 255),
                                           np.array([0.1, 0.2, 0.3, 0.05], F32),
                                           np.array([1, 2, 3, 4], d)], {"axis": 1}, opset=13))
    cases.append(Case(lambda rs: [rand((4, 6), np.int32, rs, -10**6, 10**6),
                                  np.float32(0.013)], opset=13))
    cases.append(Case(lambda rs: [rand((4, 6), np.int8, rs, -128, 127), np.float16(0.25),
                                  np.array(1, np.int8)], opset=21))
    return cases


def _clip() -> list[Case]:
    cases = [Case(_with(_floats((3, 8), dtype=d), np.array(-1.5, d), np.array(2.25, d)),
                  opset=13) for d in FLOATS]
    cases.append(Case(_with(_floats((3, 8)), None, np.float32(0.5)), opset=13))
    cases.append(Case(_with(lambda rs: [rand((3, 8), np.int64, rs, -50, 50)],
                            np.array(-7, np.int64), np.array(9, np.int64)), opset=13))
    return cases


def _variadic() -> list[Case]:
    return [Case(_floats((2, 3, 8), (8,), dtype=d), opset=13) for d in FLOATS] + [
        Case(_floats((2, 3, 8), (3, 8), (1, 8), dtype=d), opset=13) for d in (F32, F16)] + [
        Case(_floats((4, 5)), opset=13),
        Case(lambda rs: [rand((4, 5), np.int64, rs, -9, 9), rand((5,), np.int64, rs, -9, 9)],
             opset=13)]


def _where() -> list[Case]:
    return [Case(lambda rs, d=d: [rand((3, 8), np.bool_, rs), *_floats((3, 8), (8,), dtype=d)(rs)],
                 opset=16) for d in FLOATS]


def _is_inf() -> list[Case]:
    return [Case(_floats((3, 8), dtype=d), {"detect_negative": n, "detect_positive": p},
                 opset=20) for d in (F32, F16, F64) for n, p in ((1, 1), (0, 1), (1, 0))]


def _moves() -> dict[str, list[Case]]:
    """Data movement: the shapes and attributes exporters write."""
    x = _floats((2, 3, 4, 5), specials=True)
    h = _floats((2, 3, 4, 5), dtype=F16)

    def i64(rs: np.random.Generator) -> list[np.ndarray | None]:
        return [rand((2, 3, 4, 5), np.int64, rs, -9, 9)]

    return {
        "Identity": [Case(x), Case(h), Case(i64)],
        "Reshape": [Case(_with(x, np.array([2, -1, 5], np.int64))),
                    Case(_with(h, np.array([0, 12, -1], np.int64)), {"allowzero": 0}),
                    Case(_with(i64, np.array([6, 20], np.int64)), {"allowzero": 1})],
        "Flatten": [Case(x, {"axis": a}) for a in (0, 1, -1)] + [Case(h, {"axis": 2})],
        "Squeeze": [Case(_with(_floats((2, 1, 4, 1)), np.array([1, -1], np.int64)), opset=13),
                    Case(_floats((1, 3, 1)), opset=13)],
        "Unsqueeze": [Case(_with(x, np.array([0, -1], np.int64)), opset=13),
                      Case(_with(h, np.array([2], np.int64)), opset=13)],
        "Transpose": [Case(x, {"perm": [0, 2, 1, 3]}), Case(h, {"perm": [3, 2, 1, 0]}),
                      Case(i64), Case(_floats((7, 9)), {"perm": [1, 0]})],
        "Concat": [Case(_floats((2, 3, 4), (2, 5, 4)), {"axis": 1}),
                   Case(_floats((2, 3, 4), (2, 3, 4), (2, 3, 1), dtype=F16), {"axis": -1}),
                   Case(lambda rs: [rand((2,), np.int64, rs, 0, 9), rand((1,), np.int64, rs, 0, 9)],
                        {"axis": 0})],
        "Split": [Case(_with(x, np.array([1, 2], np.int64)), {"axis": 1}, outputs=2),
                  Case(h, {"axis": -1, "num_outputs": 2}, outputs=2),
                  Case(_floats((6, 4)), {"axis": 0, "num_outputs": 3}, outputs=3)],
        "Slice": [Case(_with(x, np.array([1], np.int64), np.array([3], np.int64),
                             np.array([2], np.int64))),
                  Case(_with(h, np.array([-1, 0], np.int64), np.array([-6, 99], np.int64),
                             np.array([3, 1], np.int64), np.array([-1, 1], np.int64))),
                  Case(_with(i64, np.array([0], np.int64), np.array([2**62], np.int64),
                             np.array([-1], np.int64), np.array([2], np.int64)))],
        "Gather": [Case(_with(x, np.array([2, 0, -1], np.int64)), {"axis": 1}),
                   Case(_with(_floats((10, 8), dtype=F16), np.array([[1, 2], [9, 0]], np.int64))),
                   Case(_with(x, np.array(1, np.int64)), {"axis": -1})],
        "GatherElements": [
            Case(_with(_floats((3, 4)), np.array([[0, 1, 3], [2, 0, 1]], np.int64)), {"axis": 1}),
            Case(_with(_floats((3, 4), dtype=F16), np.array([[2, -1, 0, 1]], np.int64)),
                 {"axis": 0})],
        "GatherND": [Case(_with(_floats((3, 4, 5)), np.array([[0, 1], [2, 3]], np.int64))),
                     Case(_with(_floats((2, 4, 5), dtype=F16), np.array([[1], [3]], np.int64)),
                          {"batch_dims": 1})],
        "Expand": [Case(_with(_floats((3, 1)), np.array([2, 3, 4], np.int64))),
                   Case(_with(_floats((1, 5), dtype=F16), np.array([4, 1], np.int64))),
                   Case(_with(i64, np.array([1, 1, 1, 1], np.int64)))],
        "Tile": [Case(_with(_floats((2, 3)), np.array([2, 1], np.int64))),
                 Case(_with(_floats((2, 3, 1), dtype=F16), np.array([1, 2, 4], np.int64)))],
        "Pad": [Case(_with(_floats((2, 3, 4)), np.array([0, 1, 2, 0, 2, 1], np.int64),
                           np.float32(-0.0)), {"mode": "constant"}),
                *[Case(_with(_floats((2, 3, 4), dtype=d), np.array([0, 1, 2, 0, 2, 1], np.int64)),
                       {"mode": mode}) for mode in ("reflect", "edge", "wrap") for d in (F32, F16)],
                Case(_with(_floats((2, 3, 4)), np.array([1, 1], np.int64), np.float32(2.5),
                           np.array([-1], np.int64)), {"mode": "constant"})],
        "Compress": [Case(_with(_floats((3, 4)), np.array([True, False, True])), {"axis": 0}),
                     Case(_with(_floats((3, 4), dtype=F16), np.array([0, 1, 1, 0, 1], np.bool_)))],
        "Trilu": [Case(_floats((3, 5, 5), dtype=d), {"upper": u}, opset=14)
                  for d in (F32, F16) for u in (0, 1)] + [
                  Case(_with(_floats((4, 6)), np.array(-1, np.int64)), {"upper": 1}, opset=14),
                  Case(lambda rs: [rand((4, 4), np.int64, rs, -9, 9), np.array(2, np.int64)],
                       {"upper": 0}, opset=14)],
        "Shape": [Case(x), Case(x, {"start": 1, "end": -1}, opset=15),
                  Case(x, {"start": -2}, opset=15)],
        "Size": [Case(x), Case(_floats((0, 3)))],
    }


def _generators() -> dict[str, list[Case]]:
    return {
        "ConstantOfShape": [Case(_given(np.array([2, 3], np.int64)),
                                 {"value": np.array([v], d)}, opset=20)
                            for v, d in ((1.5, F32), (-0.0, F32), (7, np.int64), (0.25, F16))] + [
                            Case(_given(np.array([4], np.int64)))],
        "EyeLike": [Case(_floats((3, 4)), {"k": k}) for k in (0, 1, -2)] + [
            Case(_floats((4, 4)), {"dtype": _onnx(np.int64)})],
        "OneHot": [Case(_given(np.array([0, 2, -1, 1], np.int64), np.array(3, np.int64),
                               np.array([0.0, 1.0], F32)), {"axis": -1}, opset=11),
                   Case(_given(np.array([[1, 0]], np.int64), np.array([4], np.int64),
                               np.array([-1, 5], np.int64)), {"axis": 0}, opset=11)],
        "NonZero": [Case(_floats((3, 4)), opset=13),
                    Case(lambda rs: [rand((3, 5), np.bool_, rs)], opset=13),
                    Case(lambda rs: [rand((6,), np.int64, rs, -1, 1)], opset=13)],
        "Unique": [Case(lambda rs, s=s: [rand((12,), np.int64, rs, 0, 5)], {"sorted": s},
                        outputs=4, opset=11) for s in (0, 1)] + [
                   Case(_floats((10,), specials=False), {"sorted": 1}, outputs=4, opset=11)],
        "Dropout": [Case(_floats((3, 8)), opset=13),
                    Case(_with(_floats((3, 8), dtype=F16), np.float16(0.1)), outputs=2, opset=13),
                    Case(_with(_floats((3, 8)), np.float32(0.5), np.array(False)), outputs=2,
                         opset=13)],
    }


def cases() -> dict[str, list[Case]]:
    """Every op declared bitwise -> its cases."""
    found: dict[str, list[Case]] = {
        **{op: _unary(op, ints=(np.int64, np.int32, np.int8)) for op in ("Abs", "Neg", "Sign")},
        **{op: _unary(op) for op in ("Relu", "Floor", "Ceil", "Round")},
        "Sqrt": _unary("Sqrt", lo=0.0, hi=9.0),
        "Reciprocal": _unary("Reciprocal"),
        **{op: _binary(op) for op in ("Add", "Sub", "Mul", "Div")},
        **{op: _variadic() for op in ("Max", "Min")},
        "Clip": _clip(), "Where": _where(),
        "Cast": _cast("Cast"), "CastLike": _cast("CastLike"),
        "QuantizeLinear": _quantize(), "DequantizeLinear": _dequantize(),
        **{op: _reduce_extreme() for op in ("ReduceMax", "ReduceMin")},
        **{op: _compare(op) for op in ("Equal", "Less", "Greater", "LessOrEqual",
                                         "GreaterOrEqual")},
        **{op: _logic() for op in ("And", "Or", "Xor")},
        "Not": [Case(lambda rs: [rand((4, 5), np.bool_, rs)], opset=1)],
        "IsNaN": [Case(_floats((3, 8), dtype=d), opset=20) for d in FLOATS],
        "IsInf": _is_inf(),
        **{op: _arg() for op in ("ArgMax", "ArgMin")},
        "BitShift": [Case(lambda rs, d=d: [rand((4, 5), d, rs, 0, 200), rand((5,), d, rs, 0, 7)],
                          {"direction": direction}, opset=11)
                     for d in (np.uint8, np.uint32, np.uint64) for direction in ("LEFT", "RIGHT")],
        **{op: _bits(op) for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot")},
        **_moves(), **_generators(),
    }
    return found


def _session(case: Case, op: str, inputs: list[np.ndarray | None]) -> ort.InferenceSession | None:
    model = make_node_model(op, inputs, case.attrs, case.opset, case.outputs)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(model.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime has no kernel for this op and dtype: nothing to hold
        if "NOT_IMPLEMENTED" in str(e) or "Could not find an implementation" in str(e):
            return None
        raise


def _aligned(x: np.ndarray) -> np.ndarray:
    """``x``'s values in a buffer that starts on a 64-byte boundary (its shape kept: a
    scalar stays a scalar)."""
    raw = np.empty(x.nbytes + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    view = raw[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
    view[...] = x
    return view


def _misaligned(x: np.ndarray) -> np.ndarray:
    """``x``'s values in a buffer 4 bytes (one itemsize for wider types) off a 64-byte
    boundary, where a vectorized kernel starts with an unaligned head."""
    shift = max(x.itemsize, 4) if x.itemsize <= 4 else x.itemsize + 4
    raw = np.empty(x.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + shift
    view = raw[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
    view[...] = x
    return view


def _runs(sess: ort.InferenceSession, inputs: list[np.ndarray | None], got: list[np.ndarray]
          ) -> list[list[np.ndarray]]:
    """onnxruntime's results: fed aligned arrays, then misaligned ones (bfloat16: aligned,
    through raw buffers: the Python API takes no bfloat16 array)."""
    if any(a is not None and a.dtype == BF16 for a in [*inputs, *got]):
        return [_run_bf16(sess, inputs, got)]
    runs = []
    for place in (_aligned, _misaligned):
        feeds = {f"in{i}": place(np.asarray(x)) for i, x in enumerate(inputs) if x is not None}
        runs.append([np.asarray(r) for r in sess.run(None, feeds)])
    return runs


BITWISE = sorted(op for domain, op in load_catalogue().bitwise if domain == "")


def test_every_bitwise_op_has_cases():
    """A new bitwise declaration comes with cases here; a case for an op no longer declared
    bitwise goes (the test would hold nothing)."""
    declared, covered = set(BITWISE), set(cases())
    assert not declared - covered, f"declared bitwise without cases: {declared - covered}"
    assert not covered - declared, f"cases for ops not declared bitwise: {covered - declared}"
    assert all(domain == "" for domain, _ in load_catalogue().bitwise)


@pytest.mark.parametrize("op", BITWISE)
def test_declared_bitwise_op_gives_onnxruntimes_bits(op):
    folded = 0
    for k, case in enumerate(cases()[op]):
        inputs = case.inputs(np.random.default_rng(67 + k))
        try:
            got = run_rule(op, inputs, case.attrs, case.opset)
        except Decline:
            continue  # the folder leaves it to onnxruntime: it claims nothing here
        sess = _session(case, op, inputs)
        if sess is None:
            continue
        folded += 1
        for run in _runs(sess, inputs, got):
            assert len(run) == case.outputs <= len(got), (op, k)  # the folder may give more
            for g, w in zip(got, run):
                try:
                    assert_same(g, w)
                except AssertionError as e:
                    raise AssertionError(f"{op} case {k} ({case.attrs}, opset {case.opset}, "
                                         f"inputs {[getattr(a, 'dtype', None) for a in inputs]})"
                                         f": {e}") from None
    assert folded, f"{op}: its folder declined every case (nothing shown bitwise)"


def test_an_op_whose_kernel_varies_is_never_expected_bitwise():
    """The regression of issue 67's item 2: a training-mode BatchNormalization (weight
    standardization) computes batch statistics by a reduction whose order onnxruntime's
    kernel takes from its input's alignment, so the catalogue says it varies (and an
    inference-mode one, whose statistics are inputs, does not); every reduction that adds
    varies too."""
    import onnx_ir as ir

    catalogue = load_catalogue()

    def node(op: str, **ints: int) -> ir.Node:
        return ir.Node("", op, [], attributes=[ir.AttrInt64(k, v) for k, v in ints.items()])

    assert catalogue.order_varies(node("BatchNormalization", training_mode=1))
    assert not catalogue.order_varies(node("BatchNormalization", training_mode=0))
    assert not catalogue.order_varies(node("BatchNormalization"))
    for op in ("ReduceSum", "ReduceMean", "InstanceNormalization", "ReduceLogSum"):
        assert catalogue.order_varies(node(op)), op
        assert ("", op) not in catalogue.bitwise
    for op in ("MatMul", "Conv", "Add", "Transpose"):  # reproducible kernels
        assert not catalogue.order_varies(node(op)), op
