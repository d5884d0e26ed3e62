"""A chain's growth is judged against the constants it derives from: a Concat(x, x) doubling
chain the pool budget cuts short leaves no grown intermediate behind as a folded constant (each
step is only 1x its direct inputs)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.pipeline.options import FoldOptions

T = TensorProto


def _doubling_chain(steps: int) -> onnx.ModelProto:
    """NonZero hides the length from shape inference, so only the budget sees the sizes."""
    nodes = [helper.make_node("NonZero", ["ones"], ["nz"]),
             helper.make_node("Cast", ["nz"], ["cz"], to=T.FLOAT),
             helper.make_node("Reshape", ["cz", "flat"], ["c0"])]
    nodes.extend(helper.make_node("Concat", [f"c{i}", f"c{i}"], [f"c{i + 1}"], axis=0)
                 for i in range(steps))
    nodes.append(helper.make_node("Gather", [f"c{steps}", "x"], ["y"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", T.INT64, [1])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1])],
        [numpy_helper.from_array(np.ones(4, np.float32), "ones"),
         numpy_helper.from_array(np.array([-1], np.int64), "flat")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_doubling_chain_cut_by_the_budget_writes_no_grown_constant():
    """22 doublings (64 MiB at the end, what onnxruntime then computes at run time) under a
    16 MiB budget: the 8 MiB step the budget stops after is not kept."""
    proto = _doubling_chain(22)
    assert len(proto.SerializeToString()) < 2048
    options = FoldOptions(strict=True, pool_budget=16 << 20)
    folded = onnxfold.optimize(proto, options).to_proto()
    largest = max((numpy_helper.to_array(t).nbytes for t in folded.graph.initializer),
                  default=0)
    assert largest <= options.expansion_min_bytes, f"a {largest} B constant was written"
    session = ort.InferenceSession(folded.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": np.array([3], np.int64)})
    assert y.tolist() == [3.0]  # NonZero(ones(4)) = 0, 1, 2, 3
