"""The save-time check that onnxruntime loads a folded model (``onnxfold.app.verify``)."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from onnxfold.app.verify import OutputRejected, load_check_options, ort_load_error, verifier


def _add_model(second_type: int) -> onnx.ModelProto:
    """``y = Add(a, b)`` with ``a`` float and ``b`` of ``second_type`` (float loads, anything
    else is refused by onnxruntime's type check)."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("b", second_type, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_loadable_model_has_no_load_error():
    assert ort_load_error(_add_model(TensorProto.FLOAT).SerializeToString()) is None


def test_a_type_mismatch_is_a_load_error():
    problem = ort_load_error(_add_model(TensorProto.INT64).SerializeToString())
    assert problem is not None and "\n" not in problem


def test_the_verifier_refuses_an_output_onnxruntime_cannot_load(tmp_path):
    original, output = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(_add_model(TensorProto.FLOAT), original)
    onnx.save(_add_model(TensorProto.INT64), output)
    with pytest.raises(OutputRejected, match="onnxruntime refuses the folded model"):
        verifier(original)(str(output))
    verifier(original)(str(original))  # a loadable output passes


def test_the_load_check_starts_no_thread_pools():
    """The session is created and dropped, never run: one thread per pool (starting a pool
    per core costs a third of a large graph's session)."""
    options = load_check_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
