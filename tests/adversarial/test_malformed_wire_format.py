"""Malformed protobuf wire data in a model file (tensor fields that run past their message, raw
data given twice, endless varints, op types that are not UTF-8, unknown data types, absurd
external dims): one error line and exit 2, never an internal error, or, for raw_data given
twice, the value protobuf itself reads."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper, numpy_helper

from onnxfold.io import protowire as pw
from tests.support.cli import run_cli


def _field(number: int, payload: bytes) -> bytes:
    return pw.len_prefix(number, len(payload)) + payload


def _varint(number: int, value: int) -> bytes:
    return pw.tag(number, pw.VARINT) + pw.encode_varint(value)


def _add_w_model(tensor: bytes) -> bytes:
    """A model ``y = x + W`` whose initializer W is the hand-written TensorProto bytes."""
    graph = helper.make_graph([helper.make_node("Add", ["x", "W"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    graph_bytes = model.graph.SerializeToString() + _field(5, tensor)
    model.ClearField("graph")
    return model.SerializeToString() + _field(7, graph_bytes)


def _refused(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("onnxfold: error: "), proc.stderr
    return lines[0]


def test_raw_data_given_twice_folds_with_the_last_one_as_protobuf_reads_it(tmp_path):
    ones, twos = (np.full(1024, v, np.float32).tobytes() for v in (1, 2))
    tensor = _varint(1, 1024) + _varint(2, 1) + _field(8, b"W") + _field(9, ones) + \
        _field(9, twos)
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    src.write_bytes(_add_w_model(tensor))
    proc = run_cli("optimize", src, "-o", out, "-q")
    assert proc.returncode == 0, proc.stderr
    feeds = {"x": np.zeros(1024, np.float32)}
    y = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
         for p in (src, out)]
    assert y[0][0] == y[1][0] == 2.0


def test_a_raw_data_field_running_past_its_tensor_is_refused(tmp_path):
    # raw_data claims 4096 bytes; 100 are inside the tensor, the rest parse as graph fields
    head = _varint(1, 1024) + _varint(2, 1) + _field(8, b"W") + pw.len_prefix(9, 4096) + \
        b"\0" * 100
    doc = pw.len_prefix(10, 4096 - 100 - 3) + b"A" * (4096 - 100 - 3)  # graph doc_string
    graph = helper.make_graph([helper.make_node("Add", ["x", "W"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024])])
    model = helper.make_model(helper.make_graph([], "g", [], []),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ClearField("graph")
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString() +
                    _field(7, _field(5, head) + doc + graph.SerializeToString()))
    with pytest.raises(DecodeError):  # protobuf itself refuses the file
        onnx.load(str(src))
    assert "runs past the end" in _refused(run_cli("optimize", src, "-o", tmp_path / "o.onnx"))
    assert not (tmp_path / "o.onnx").exists()


def test_a_run_of_varint_continuation_bytes_is_refused_at_once(tmp_path):
    src = tmp_path / "ff.onnx"
    src.write_bytes(b"\xff" * (1 << 20))  # took minutes: a varint was decoded to the end
    done = run_cli("optimize", src, "-o", tmp_path / "o.onnx")
    assert "varint" in _refused(done)
    assert done.cpu < 30  # CPU seconds, not minutes (a loaded machine stretches wall time)


@pytest.mark.parametrize("skip_check", [False, True])
def test_an_op_type_that_is_not_utf8_is_bad_input_not_an_internal_error(tmp_path, skip_check):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="n")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString().replace(b"Relu", b"Rel\x88"))
    flags = ["--skip-check"] if skip_check else []
    assert "UTF-8" in _refused(run_cli("optimize", src, "-o", tmp_path / "o.onnx", *flags))


def test_a_tensor_attribute_of_an_unknown_data_type_is_bad_input(tmp_path):
    value = numpy_helper.from_array(np.zeros(4, np.float32), "v")
    value.data_type = 99
    node = helper.make_node("Constant", [], ["c"], value=value)
    graph = helper.make_graph([node, helper.make_node("Identity", ["c"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), src)
    flags = ("--skip-check",)  # onnx's checker refuses it first otherwise
    assert "unknown data type 99" in _refused(run_cli("optimize", src, "-o", tmp_path / "o.onnx",
                                                   *flags))


def test_external_data_of_absurd_dims_is_bad_input_in_one_short_line(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"\0" * 64)
    tensor = onnx.TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[2**62] * 17)
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="w.bin")
    graph = helper.make_graph([helper.make_node("Identity", ["W"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [tensor])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), src)
    line = _refused(run_cli("optimize", src, "-o", tmp_path / "o.onnx", "--skip-check"))
    assert len(line) < 300, line  # not a 300-digit byte offset


@pytest.mark.parametrize("skip_check", [False, True])
@pytest.mark.parametrize("name", ["QQNODE", "QQVALUE"])
def test_a_node_or_value_name_that_is_not_utf8_is_bad_input(tmp_path, skip_check, name):
    """onnx's checker lets such a name through; the fold then failed to save it (exit 3)."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["QQVALUE"], name="QQNODE"),
                               helper.make_node("Neg", ["QQVALUE"], ["y"], name="m")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString().replace(name.encode(), b"QQ\xff\xfe" + b"E" * (
        len(name) - 4)))
    flags = ["--skip-check"] if skip_check else []
    assert "not UTF-8 text" in _refused(run_cli("optimize", src, "-o", tmp_path / "o.onnx",
                                                *flags))
