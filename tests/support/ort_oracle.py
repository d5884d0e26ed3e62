"""Test helpers: run one ONNX node through onnxruntime (the oracle) or through onnxfold's rule."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from onnxfold.declare.catalogue import load_catalogue
from onnxfold.declare.registry import Decline
from onnxfold.ir.dtypes import onnx_type

MAX_IR_VERSION = 13  # onnxruntime 1.31 refuses IR 14
MAX_OPSET = 26  # and opsets above 26


def _attr_value(value):
    if isinstance(value, np.ndarray):
        return numpy_helper.from_array(value)
    return value


def make_node_model(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: dict,
    opset: int,
    n_outputs: int = 1,
) -> onnx.ModelProto:
    """A one-node model whose non-None inputs are graph inputs (so nothing is pre-folded)."""
    in_names = ["" if x is None else f"in{i}" for i, x in enumerate(inputs)]
    while in_names and in_names[-1] == "":
        in_names.pop()
    out_names = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(
        op_type, in_names, out_names, **{k: _attr_value(v) for k, v in attrs.items()}
    )
    graph_inputs = [
        helper.make_tensor_value_info(name, onnx_type(x.dtype), list(x.shape))
        for name, x in zip(in_names, inputs)
        if x is not None
    ]
    graph_outputs = [helper.make_empty_tensor_value_info(n) for n in out_names]
    graph = helper.make_graph([node], "oracle", graph_inputs, graph_outputs)
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=MAX_IR_VERSION
    )


def _is_bf16(dtype) -> bool:
    return np.dtype(dtype).name == "bfloat16"


def _run_bf16(sess, inputs, like: Sequence[np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's Python API cannot hand over bfloat16 arrays: bind raw uint16 buffers.

    Outputs are written into buffers shaped like ``like`` (the rule's results).
    """
    binding = sess.io_binding()
    for i, x in enumerate(inputs):
        if x is None:
            continue
        x = np.ascontiguousarray(x)
        if _is_bf16(x.dtype):
            binding.bind_ortvalue_input(f"in{i}", ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                x.view(np.uint16), onnx.TensorProto.BFLOAT16))
        else:
            binding.bind_cpu_input(f"in{i}", x)
    outputs = []
    for o, ref in zip(sess.get_outputs(), like):
        buffer = np.empty(ref.shape, np.uint16 if _is_bf16(ref.dtype) else ref.dtype)
        binding.bind_ortvalue_output(o.name, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            buffer, onnx_type(ref.dtype)))
        outputs.append(buffer.view(ref.dtype) if _is_bf16(ref.dtype) else buffer)
    sess.run_with_iobinding(binding)
    return outputs


def run_node_ort(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: dict | None = None,
    opset: int = 18,
    n_outputs: int = 1,
    like: Sequence[np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Run the node on onnxruntime's CPU provider with graph optimizations disabled.

    Skips the test when onnxruntime has no kernel for the op/dtype combination. bfloat16
    inputs or outputs need ``like``: arrays with the outputs' shapes and dtypes.
    """
    model = make_node_model(op_type, inputs, attrs or {}, opset, n_outputs)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    try:
        sess = ort.InferenceSession(
            model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
        )
    except Exception as e:  # onnxruntime raises its own exception types
        if "NOT_IMPLEMENTED" in str(e) or "Could not find an implementation" in str(e):
            pytest.skip(f"onnxruntime has no kernel: {str(e)[:200]}")
        if "Type Error: Type 'tensor(" in str(e):
            pytest.skip(f"dtype not allowed by the ONNX schema: {str(e)[:200]}")
        raise
    if like is not None:
        return _run_bf16(sess, inputs, like)
    feeds = {f"in{i}": np.asarray(x) for i, x in enumerate(inputs) if x is not None}
    return [np.asarray(r) for r in sess.run(None, feeds)]


def run_rule(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: dict | None = None,
    opset: int = 18,
) -> list[np.ndarray]:
    """Run onnxfold's rule for the node (raises Decline like the engine would see it)."""
    rule = load_catalogue().folder("", op_type, opset)
    assert rule is not None, f"no rule for {op_type} at opset {opset}"
    args = list(inputs)
    if rule.shape_only:
        args = [tuple(args[0].shape), *args[1:]]
    while args and args[-1] is None:
        args.pop()
    out = rule.fn(*args, **(attrs or {}))
    outs = list(out) if isinstance(out, tuple) else [out]
    for o in outs:
        assert isinstance(o, np.ndarray), f"{op_type} returned {type(o).__name__}"
    return outs


def assert_same(got: np.ndarray, want: np.ndarray, exact: bool = True, rtol=None, atol=0.0):
    """Same dtype and shape; then equal (NaN equal to NaN, a zero only to a zero of its sign)
    or allclose."""
    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    if _is_bf16(got.dtype):  # compare the bits (nan == nan)
        got, want = got.astype(np.float32), want.astype(np.float32)
    if exact or got.dtype.kind not in "fc":
        if got.dtype.kind in "fc":
            ok = np.array_equal(got, want, equal_nan=True)
            assert ok, f"values differ:\n got={got!r}\nwant={want!r}"
            if got.dtype.kind == "f":  # and the sign of every zero (docs/exactness.md)
                signs = (got == 0) & (np.signbit(got) != np.signbit(want))
                assert not signs.any(), (f"zero signs differ at "
                                         f"{np.argwhere(signs)[:4].tolist()}:"
                                         f"\n got={got!r}\nwant={want!r}")
        else:
            ok = np.array_equal(got, want)
        assert ok, f"values differ:\n got={got!r}\nwant={want!r}"
        return
    if rtol is None:
        rtol = {2: 1e-3, 4: 1e-6, 8: 1e-12}.get(got.dtype.itemsize, 1e-6)
    f32 = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_allclose(*f32, rtol=rtol, atol=atol, equal_nan=True)


def check(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: dict | None = None,
    opset: int = 18,
    n_outputs: int = 1,
    exact: bool = True,
    rtol=None,
    atol=0.0,
) -> list[np.ndarray]:
    """Compare rule vs onnxruntime on every output; returns the rule's outputs."""
    try:
        got = run_rule(op_type, inputs, attrs, opset)
    except Decline:
        got = None  # raised again below, after onnxruntime had the chance to skip the test
    bf16 = any(x is not None and _is_bf16(x.dtype) for x in inputs) or (
        got is not None and any(_is_bf16(g.dtype) for g in got))
    if bf16:
        if got is None:
            got = run_rule(op_type, inputs, attrs, opset)
        want = run_node_ort(op_type, inputs, attrs, opset, n_outputs, like=got)
    else:
        want = run_node_ort(op_type, inputs, attrs, opset, n_outputs)
        if got is None:
            got = run_rule(op_type, inputs, attrs, opset)
    assert len(got) >= n_outputs, f"{len(got)} outputs, expected {n_outputs}"
    for g, w in zip(got, want):
        assert_same(g, w, exact, rtol, atol)
    return got


def check_declines(op_type: str, inputs, attrs: dict | None = None, opset: int = 18) -> None:
    with pytest.raises(Decline):
        run_rule(op_type, inputs, attrs, opset)


RNG_SEED = 1234


def rng() -> np.random.Generator:
    return np.random.default_rng(RNG_SEED)


def rand(shape, dtype, rs: np.random.Generator | None = None, lo=-5, hi=5) -> np.ndarray:
    """Random data of ``dtype`` (floats in [lo, hi), ints in the type's [lo, hi], bools)."""
    rs = rs or rng()
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.asarray(rs.random(shape) < 0.5)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = rs.integers(max(lo, info.min), min(hi, info.max) + 1, size=shape)
        return np.asarray(values).astype(dtype)
    return np.asarray(rs.random(shape) * (hi - lo) + lo).astype(dtype)
