"""Slice's clamping, checked against onnxruntime on a grid of starts, ends and steps.

``Slice(Shape(x), starts=-6, ends=-2**31+1, steps=-1)`` of a 2-D ``x`` is ``[dim 0]`` in
onnxruntime (and by the spec: going backwards, a start before the first element clamps to it,
an end before it means "down to it inclusive"), where Python's slicing gives nothing: shape
values and the dims derived for a Slice's output must clamp as onnxruntime does, or the folded
model declares a shape it does not have. onnxruntime also reads an end of INT32_MAX or
INT64_MAX as "to the end in the step's direction" where the spec would clamp it
(``onnxfold.ir.slicing``): taking the spec's word, ``x[INT_MAX:INT_MAX:-1]``-style slices would
fold to nothing.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxfold.analysis.dim_algebra import Known
from onnxfold.analysis.dim_algebra import slice_elements as shape_value_slice
from rules.shape_ops import slice_ as folding_slice
from rules.shape_steps import sliced

BIG = 2**31 - 1
EDGES = (-2**63, -BIG - 1, -BIG, -7, -4, -3, -2, -1, 0, 1, 2, 3, 4, 7, BIG, 2**63 - 1)


def _session() -> ort.InferenceSession:
    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, [1])
            for n in ("starts", "ends", "steps")]
    graph = helper.make_graph(
        [helper.make_node("Slice", ["data", "starts", "ends", "axes", "steps"], ["out"])], "g",
        [helper.make_tensor_value_info("data", TensorProto.INT64, ["n"]), *ints],
        [helper.make_tensor_value_info("out", TensorProto.INT64, ["m"])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    options = ort.SessionOptions()
    options.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("dim", [0, 1, 2, 3, 5])
def test_shape_values_the_folding_rule_and_refined_dims_slice_as_onnxruntime_does(dim):
    session = _session()
    data = np.arange(10, 10 + dim, dtype=np.int64)
    for start, end, step in itertools.product(EDGES, EDGES, (-3, -2, -1, 1, 2, 3)):
        feeds = {"data": data, "starts": np.array([start], np.int64),
                 "ends": np.array([end], np.int64), "steps": np.array([step], np.int64)}
        expected = session.run(None, feeds)[0].tolist()
        case = f"dim {dim}, [{start}:{end}:{step}]"
        assert list(shape_value_slice(tuple(data.tolist()), start, end, step)) == expected, case
        folded = folding_slice(data, np.array([start]), np.array([end]), np.array([0]),
                               np.array([step]))
        assert folded.tolist() == expected, case
        dims = sliced((dim,), Known((start,), False, np.dtype(np.int64)),
                       Known((end,), False, np.dtype(np.int64)), [0], [step])
        assert dims == (len(expected),), case  # the output's length, for shape refinement


def test_the_fuzzer_case_folds_to_what_onnxruntime_computes(tmp_path):
    from onnxfold import optimize

    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["shape"]),
         helper.make_node("Slice", ["shape", "starts", "ends", "axes", "steps"], ["part"]),
         helper.make_node("Add", ["scalar", "part"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.INT32, ["N", "N"]),
         helper.make_tensor_value_info("scalar", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [None])],
        [helper.make_tensor("starts", TensorProto.INT32, [1], [-6]),
         helper.make_tensor("ends", TensorProto.INT32, [1], [-BIG]),
         helper.make_tensor("axes", TensorProto.INT32, [1], [0]),
         helper.make_tensor("steps", TensorProto.INT32, [1], [-1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    folded = optimize(model).to_proto()
    feeds = {"x": np.zeros((3, 3), np.int32), "scalar": np.array(1, np.int64)}
    runs = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            .run(None, feeds)[0] for m in (model, folded)]
    assert runs[0].tolist() == runs[1].tolist() == [4]
