"""A model whose fold gives the check all three jobs (a folded weight, a rewrite to validate,
outputs to compare), its check, and what a verdict says: for the tests that hold a change to
how the check runs (a session built aside, weights kept between steps) changes nothing it
says."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxfold.check.compare import compare_models
from onnxfold.check.running.options import CompareOptions
from onnxfold.pipeline.optimizer import optimize


def matmul_chain(path) -> None:
    """x [n, 64] through four MatMuls of random 64 x 64 float32 weights (h0 .. h3), saved at
    ``path``: every value's cone reads the weights before it (the cones' tests)."""
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((64, 64)).astype(np.float32) for _ in range(4)]
    nodes, prev = [], "x"
    for i in range(4):
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"]))
        prev = f"h{i}"
    onnx.save(helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["n", 64])],
        [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)]),
        opset_imports=[helper.make_opsetid("", 17)]), path)


def transposed_layer_norm(rows: int, cols: int, seed: int) -> onnx.ModelProto:
    """x [n, cols] @ Transpose(W [rows, cols]) + b, then a LayerNormalization written out:
    the fold's cone reads W (Transpose(W) folded), and so does the cone of the rewrite's
    leaf h."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((rows, cols)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(rows).astype(np.float32), "b")
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    eps = numpy_helper.from_array(np.array(1e-5, np.float32), "eps")
    nodes = [helper.make_node("Transpose", ["W"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["h"]),
             helper.make_node("ReduceMean", ["h", "axes"], ["m"]),
             helper.make_node("Sub", ["h", "m"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["d2"]),
             helper.make_node("ReduceMean", ["d2", "axes"], ["v"]),
             helper.make_node("Add", ["v", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["s"]),
             helper.make_node("Div", ["d", "s"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", cols])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", rows])],
        [w, b, axes, eps])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def checked_fold(directory: Path, source: onnx.ModelProto, options: CompareOptions,
                 output: onnx.ModelProto | None = None):
    """``compare_models`` on 3 input sets of ``source`` and its fold (its run's evidence at
    hand: the rewrites validated), or of ``output`` instead (a file, no evidence), both
    saved in ``directory``."""
    result = optimize(source, record_rewrites=True)
    a, b = directory / "a.onnx", directory / "b.onnx"
    onnx.save(source, a)
    onnx.save(output or result.to_proto(), b)
    return compare_models(a, b, 3, options,
                          evidence=None if output is not None else result.evidence)


def said(result) -> list:
    """What a verdict says, numbers included (the rows, the folds', the rewrites')."""
    rows = [dataclasses.astuple(r) for r in result.rows]
    return [rows, result.folds and result.folds.summary(),
            result.rewrites and result.rewrites.summary(), result.failure, result.ok]
