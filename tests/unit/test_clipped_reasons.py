"""Reasons quoted on one line are cut where a sentence or a clause ends, never mid-word, and
onnxruntime's C++ signatures are dropped: the part that names the node and the cause stays.
Real onnxruntime for its message."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxfold.check.running.models import ort_message
from onnxfold.errors import ELLIPSIS, clipped

SQUEEZE = ("Non-zero status code returned while running Squeeze node. Name:'Squeeze_0' Status "
           "Message: input_shape[i] == 1 was false. Dimension of input 2 must be 1 instead "
           "of 16.")


@pytest.mark.parametrize("limit", range(40, len(SQUEEZE) + 2, 7))
def test_a_cut_ends_a_sentence_or_a_clause_or_a_word(limit):
    cut = clipped(SQUEEZE, limit)
    assert len(cut) <= limit
    if len(SQUEEZE) <= limit:
        assert cut == SQUEEZE
        return
    assert cut.endswith(ELLIPSIS)
    kept = cut[:-len(ELLIPSIS)]
    assert SQUEEZE.startswith(kept)
    following = SQUEEZE[len(kept)]
    assert following in " .,;:(", (kept, following)  # never inside a word
    assert len(kept) >= (limit - len(ELLIPSIS)) // 2


def test_a_sentence_end_wins_over_a_word():
    assert clipped(SQUEEZE, 140) == SQUEEZE[:SQUEEZE.index("false.") + 6] + ELLIPSIS


def test_text_without_spaces_is_cut_at_the_limit():
    assert clipped("x" * 500, 100) == "x" * 96 + ELLIPSIS


def test_onnxruntimes_failing_squeeze_names_the_node_and_the_cause():
    """onnxruntime's own message for a Squeeze of a dim that is not 1: its source location
    and the C++ signature before the condition are dropped, whole sentences kept."""
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Squeeze", ["x", "axes"], ["y"], name="Squeeze_0")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [2])]),
        opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception) as caught:
        session.run(None, {"x": np.zeros((1, 3, 16), np.float32)})
    text = ort_message(caught.value)
    assert "Squeeze_0" in text and "must be 1 instead of 16" in text, text
    assert "::" not in text and ".h:" not in text and ".cc:" not in text, text


def test_an_error_onnxruntime_wraps_in_another_keeps_the_cause():
    """onnxruntime's failure to read a truncated file's external data while it builds a
    session (1.32): a signature whose arguments hold parentheses, a status inside another."""
    said = ("[ONNXRuntimeError] : 1 : FAIL : Exception during initialization: /onnxruntime_src/"
            "onnxruntime/core/optimizer/optimizer_execution_frame.cc:74 onnxruntime::"
            "OptimizerExecutionFrame::Info::Info(const std::vector<const onnxruntime::Node*>&, "
            "const onnxruntime::InitializedTensorSet&, const std::filesystem::__cxx11::path&, "
            "const onnxruntime::IExecutionProvider&, const std::function<bool(const "
            "std::__cxx11::basic_string<char>&)>&, const onnxruntime::logging::Logger&) "
            "[ONNXRuntimeError] : 1 : FAIL : tensorprotoutils.cc:2201 GetExtDataFromTensorProto "
            "External initializer: w offset: 425914454 size to read: 9437184 given "
            "file_length: 100000000 are out of bounds or can not be read in full.")
    text = ort_message(Exception(said))
    assert text.startswith("Exception during initialization: tensorprotoutils.cc:2201 "
                           "GetExtDataFromTensorProto External initializer: w offset"), text
    assert "ONNXRuntimeError" not in text and "Info::Info" not in text, text
