"""Arrays handed to onnxruntime start 64 bytes aligned, as a session's initializers do: its
vectorized reductions sum the elements before the first aligned address apart, so the same
values fed 4 bytes off give other bits. The fold's fallback (``to_ort``) and the check's own
runner each align what they feed, so both compute the bits the original session computes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from onnxfold.check.running.runner import Wanted, run_nodes
from onnxfold.fold.fallback_session import to_ort

ROWS, COLS = 64, 147


def _misaligned(values: np.ndarray) -> np.ndarray:
    """``values`` copied to an address 4 bytes past a multiple of 64."""
    raw = np.empty(values.nbytes + 128, np.uint8)
    start = -raw.ctypes.data % 64 + 4
    out = raw[start:start + values.nbytes].view(values.dtype).reshape(values.shape)
    out[...] = values
    assert out.ctypes.data % 64 == 4
    return out


def _reduce_mean_session() -> ort.InferenceSession:
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, COLS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_fed_values_are_aligned_so_a_reduction_gives_the_sessions_bits():
    session = _reduce_mean_session()
    x = np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float32)
    aligned_bits = session.run(None, {"x": x.copy()})[0]
    off = _misaligned(x)
    fallback = session.run_with_ort_values(["y"], {"x": to_ort(off)})[0].numpy()
    assert fallback.tobytes() == aligned_bits.tobytes()
    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=0)
    (checked,) = run_nodes([node], [Wanted("y")], inputs={"x": off}, opsets={"": 17},
                           ir_version=8)
    assert checked.tobytes() == aligned_bits.tobytes()
    (handed,) = run_nodes([node], [Wanted("y")], constants={"x": off}, opsets={"": 17},
                          ir_version=8)
    assert handed.tobytes() == aligned_bits.tobytes()


def test_the_misalignment_matters_on_this_onnxruntime():
    """What the alignment is for: fed 4 bytes off, onnxruntime's ReduceMean gives other bits
    in some rows (if a release stops doing so, the alignment costs a copy for nothing)."""
    session = _reduce_mean_session()
    x = np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float32)
    aligned_bits = session.run(None, {"x": x.copy()})[0]
    off = session.run_with_ort_values(
        ["y"], {"x": ort.OrtValue.ortvalue_from_numpy(_misaligned(x))})[0].numpy()
    assert off.tobytes() != aligned_bits.tobytes()
