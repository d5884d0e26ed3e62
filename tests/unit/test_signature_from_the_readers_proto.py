"""The signature reads the input from the reader's own proto (weights as typed inputs, node
metadata dropped: ``optimize(..., read_light=...)``) instead of serializing the loaded model
again; it must say exactly what it says when it serializes the model itself: the same facts,
the same input set and the same compute before and after."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from onnxfold.app.signature import read_original, signature
from onnxfold.check.running.options import CompareOptions
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.pipeline.optimizer import optimize

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.mark.parametrize("name", ["tiny_bert_ts.onnx", "tiny_gpt2_ts.onnx"])
def test_the_readers_proto_gives_the_signature_serializing_gives(name):
    read: list = []

    def from_reader(model, light):
        assert light is not None, "the reader's proto describes these models"
        read.append((read_original(model, light), read_original(model)))

    result = optimize(str(MODELS / name), read_light=from_reader)
    (from_light, serialized), = read
    assert from_light.facts == serialized.facts
    catalogue = load_catalogue()
    found = [signature(original, result.model, 1, None, CompareOptions(), catalogue)
             for original in (from_light, serialized)]
    assert found[0] == found[1]
    assert found[0]["compute"]["before"]["flops"] > found[0]["compute"]["after"]["flops"] > 0


def test_the_signature_copies_the_readers_proto(tmp_path):
    """The fold's first inference takes the reader's proto after the signature read it: what
    the signature keeps is its own copy."""
    kept: list = []
    optimize(str(MODELS / "tiny_bert_ts.onnx"),
             read_light=lambda model, light: kept.append((read_original(model, light), light)))
    (original, light), = kept
    assert isinstance(original.light, onnx.ModelProto) and original.light is not light
