"""Long string attributes (``onnxfold.ir.long_texts``) go around the protos: the reader leaves
them out of the bytes protobuf parses and gives them to the model, the writer writes each after
its node's other fields. The written model is the same model: every node in its place, every
attribute with its type, text (UTF-8, non-ASCII, or bytes that are no UTF-8) and doc_string."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxfold
from onnxfold.ir.long_texts import LONG_TEXT
from tests.support.models import tensor

DOMAIN = "com.example"
ASCII = b"a" * LONG_TEXT
UTF8 = ("\u00e9\u4e2d" * (LONG_TEXT // 2)).encode()
NOT_UTF8 = b"\xff\xfe" * (LONG_TEXT // 2)


def _string(name: str, value: bytes, doc: str = "") -> onnx.AttributeProto:
    attr = onnx.AttributeProto(name=name, type=onnx.AttributeProto.STRING, s=value)
    if doc:
        attr.doc_string = doc
    return attr


def _model() -> onnx.ModelProto:
    """w * w (folds) -> Engine (kept: long texts) -> Relu -> Engine (a long text) -> y."""
    first = helper.make_node("Engine", ["ww"], ["e"], domain=DOMAIN, mode="fast", k=3)
    first.attribute.extend([_string("payload", ASCII, "the engine"),
                            _string("raw", NOT_UTF8)])
    second = helper.make_node("Engine", ["r"], ["y"], domain=DOMAIN)
    second.attribute.append(_string("payload", UTF8))
    nodes = [helper.make_node("Mul", ["w", "w"], ["ww"]), first,
             helper.make_node("Relu", ["e"], ["r"]), second]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [4])], [tensor("w", np.arange(4, dtype=np.float32))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(DOMAIN, 1)])
    model.ir_version = 8
    return model


def _attributes(node: onnx.NodeProto) -> dict[str, tuple]:
    return {a.name: (a.type, a.s, a.i, a.doc_string) for a in node.attribute}


@pytest.mark.parametrize("external", [False, True], ids=["embedded", "external data"])
@pytest.mark.parametrize("source", ["file", "proto"])
def test_long_texts_are_written_back_in_their_nodes(tmp_path, external, source):
    original = _model()
    path = tmp_path / "in.onnx"
    onnx.save(original, path)
    result = onnxfold.optimize(str(path) if source == "file" else original)
    out = tmp_path / "out.onnx"
    onnxfold.save_model(result.model, out, external_data=external)
    written = onnx.load(out)
    onnx.checker.check_model(written)
    assert [n.op_type for n in written.graph.node] == ["Engine", "Relu", "Engine"]
    kept = [n for n in original.graph.node if n.op_type != "Mul"]
    for old, new in zip(kept, written.graph.node, strict=True):
        assert _attributes(new) == _attributes(old), new.name
        assert list(new.input) == list(old.input) or new.input[0] == "ww"


def test_the_model_holds_the_texts_and_inference_never_sees_them(tmp_path):
    """The loaded model's attributes hold the texts (bytes where they are no UTF-8); the
    proto shape inference is given has them empty."""
    from onnxfold.analysis.shapes import serialize_light
    from onnxfold.io import load_model

    path = tmp_path / "in.onnx"
    onnx.save(_model(), path)
    model = load_model(path)
    engine = next(n for n in model.graph if n.op_type == "Engine")
    assert engine.attributes["payload"].value == ASCII.decode()
    assert engine.attributes["raw"].value == NOT_UTF8
    assert engine.attributes["payload"].doc_string == "the engine"
    light = serialize_light(model)
    texts = {a.name: a.s for n in light.graph.node for a in n.attribute if a.name != "mode"}
    assert set(texts.values()) == {b""}, {k: len(v) for k, v in texts.items()}
    assert engine.attributes["payload"].value == ASCII.decode()  # and back after
