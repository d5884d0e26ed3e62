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


def _matmul_model(shape_source: str) -> onnx.ModelProto:
    """``y = x[batch, seq, 8] @ W`` where ``W`` is 48 numbers reshaped to ``[12, 4]``: by a
    Cast of a float constant (``"cast"``: onnxruntime loads it unoptimized, its shapes
    unknown) or an initializer (``"folded"``: what a fold of the first writes)."""
    import numpy as np
    from onnx import numpy_helper

    flat = numpy_helper.from_array(np.arange(48, dtype=np.float32), "wf")
    if shape_source == "cast":
        nodes = [helper.make_node("Cast", ["a"], ["shape"], to=TensorProto.INT64),
                 helper.make_node("Reshape", ["wf", "shape"], ["W"])]
        inits = [flat, numpy_helper.from_array(np.array([12, 4], np.float32), "a")]
    else:
        nodes, inits = [], [numpy_helper.from_array(np.arange(48, dtype=np.float32)
                                                    .reshape(12, 4), "W")]
    graph = helper.make_graph(
        [*nodes, helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", "c"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_op_the_original_cannot_run_at_any_dims_is_the_inputs_fault(tmp_path):
    """A MatMul whose operands cannot meet at any dims, hidden from onnxruntime's load by a
    shape it computes (a CANINE-style TorchScript export): folded, the shapes are known and
    onnxruntime refuses the output. The original fails in the same op when run: a broken
    input (exit 2), not a bug of onnxfold's (it was "internal error: OutputRejected", exit
    3). An output that fails in an op the original runs is still onnxfold's bug."""
    from onnxfold.errors import InputError

    original, output = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(_matmul_model("cast"), original)
    onnx.save(_matmul_model("folded"), output)
    with pytest.raises(InputError, match=r"the original fails in the same op .*MatMul"):
        verifier(original)(str(output))
    onnx.save(_add_model(TensorProto.FLOAT), original)
    with pytest.raises(OutputRejected):
        verifier(original)(str(output))
