"""A text field of a file that is not UTF-8 (protobuf's C++ parser, onnxruntime's, lets such
bytes through; Python's gives ``bytes`` for them) is refused by the reader in one line, exit 2:
it was an internal error in the metadata's stripping or the writer. The model's own doc string
is carried as its bytes, as it was."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from tests.support.cli import assert_ok, assert_one_error_line, run_cli

MARK = b"QQQQ"  # replaced in the file by bytes that are no UTF-8
NOT_TEXT = b"\xff\xfe\xff\xfe"


def _relu() -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _entry(props, key: str, value: str) -> None:
    entry = props.add()
    entry.key, entry.value = key, value


PLANTED = {
    "a node's metadata value": (lambda m: _entry(m.graph.node[0].metadata_props, "k", "QQQQ"),
                                "the metadata of a node"),
    "a node's metadata key": (lambda m: _entry(m.graph.node[0].metadata_props, "QQQQ", "v"),
                              "the metadata of a node"),
    "a node's doc string": (lambda m: setattr(m.graph.node[0], "doc_string", "QQQQ"),
                            "of a node"),
    "the model's metadata": (lambda m: _entry(m.metadata_props, "k", "QQQQ"),
                             "the metadata of the model"),
    "an output's metadata": (lambda m: _entry(m.graph.output[0].metadata_props, "k", "QQQQ"),
                             "the metadata of a value"),
    "the graph's metadata": (lambda m: _entry(m.graph.metadata_props, "k", "QQQQ"),
                             "the metadata of a graph"),
    "the graph's doc string": (lambda m: setattr(m.graph, "doc_string", "QQQQ"), "of a graph"),
    "the producer's name": (lambda m: setattr(m, "producer_name", "QQQQ"), "of the model"),
}


def _planted(tmp_path, plant) -> str:
    model = _relu()
    plant(model)
    raw = model.SerializeToString()
    assert raw.count(MARK) == 1
    path = tmp_path / "m.onnx"
    path.write_bytes(raw.replace(MARK, NOT_TEXT))
    return str(path)


@pytest.mark.parametrize("where", sorted(PLANTED))
@pytest.mark.parametrize("keep", [False, True], ids=["stripped", "kept"])
def test_a_text_field_that_is_no_utf8_is_refused_in_one_line(tmp_path, where, keep):
    plant, said = PLANTED[where]
    path = _planted(tmp_path, plant)
    out = tmp_path / "out.onnx"
    done = run_cli("optimize", path, "-o", out, "-q", *(["--keep-metadata"] if keep else []))
    assert_one_error_line(done, "invalid model", said, "is not UTF-8 text")
    assert not out.exists()


def test_the_models_own_doc_string_is_carried_as_its_bytes(tmp_path):
    path = _planted(tmp_path, lambda m: setattr(m, "doc_string", "QQQQ"))
    out = tmp_path / "out.onnx"
    assert_ok(run_cli("optimize", path, "-o", out, "-q"))
    assert NOT_TEXT in out.read_bytes()


def _with_function() -> onnx.ModelProto:
    """y = MyFn(x) with MyFn a local function: o = Abs(i), its node named ``absnode``."""
    function = helper.make_function(
        "custom", "MyFn", ["fin"], ["fout"],
        [helper.make_node("Abs", ["fin"], ["fout"], name="absnode")],
        [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("MyFn", ["x"], ["y"], domain="custom")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, functions=[function], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)])


@pytest.mark.parametrize("name", [b"absnode", b"fin", b"fout"])
def test_a_local_functions_name_that_is_no_utf8_is_refused(tmp_path, name):
    """The reader's graph checks read the graphs' names; a local function's node, input or
    output name that is no text ended in the writer (an internal error)."""
    raw = _with_function().SerializeToString()
    path, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    path.write_bytes(raw.replace(name, b"\xff" * len(name)))
    done = run_cli("optimize", path, "-o", out, "-q")
    assert_one_error_line(done, "invalid model", "name is not UTF-8 text")
    assert not out.exists()
