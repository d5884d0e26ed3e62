"""The signature reads the input from the reader's own proto (weights as typed inputs, node
metadata dropped: ``optimize(..., read_light=...)``) instead of serializing the loaded model
again; it must say exactly what it says when it serializes the model itself: the same facts,
the same input set and the same compute before and after."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.app.signature import read_original, signature
from onnxfold.check.running.options import CompareOptions
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.pipeline.optimizer import optimize
from tests.support.models import make_model

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


def _state(model) -> list:
    """Every node output's name, type, dims and metadata, and the model's metadata."""
    from onnxfold.ir.graph import all_graphs

    return [(v.name, v.type, None if v.shape is None else tuple(v.shape), dict(v.meta.data))
            for graph in all_graphs(model) for node in graph for v in node.outputs] + \
        [dict(model.meta.data)]


def _related_dims(path) -> str:
    """y = (Concat(past, x) + mask) * (w + w): the mask's own dim ``m`` broadcasts against
    ``s0 + s1``, which only the graph says (inference and the symbolic walk find it)."""
    f = TensorProto.FLOAT
    model = make_model(
        [helper.make_node("Concat", ["past", "x"], ["cat"], axis=1),
         helper.make_node("Add", ["cat", "mask"], ["masked"]),
         helper.make_node("Add", ["w", "w"], ["w2"]),
         helper.make_node("Mul", ["masked", "w2"], ["y"])],
        [helper.make_tensor_value_info("past", f, [1, "s0"]),
         helper.make_tensor_value_info("x", f, [1, "s1"]),
         helper.make_tensor_value_info("mask", f, [1, "m"])],
        [helper.make_tensor_value_info("y", f, [1, "m"])],
        [numpy_helper.from_array(np.full((1, 1), 3, np.float32), "w")])
    onnx.save(model, str(path))
    return str(path)


@pytest.mark.parametrize("name", ["related", "tiny_gpt2_ts.onnx"])
def test_planning_as_the_input_is_read_leaves_it_as_found_and_plans_as_after(name, tmp_path):
    """The check's first input set planned on the model just read (its inference and symbolic
    walk write shapes and marks into it) leaves every value as it was, and gives the set
    planned on a second copy of the input once the fold is done."""
    catalogue = load_catalogue()
    options = CompareOptions()
    read: list = []

    def from_reader(model, light):
        before = _state(model)
        read.append(read_original(model, light, (options, catalogue.shape_steps)))
        assert _state(model) == before
        read.append(read_original(model, light))

    source = _related_dims(tmp_path / "m.onnx") if name == "related" else str(MODELS / name)
    result = optimize(source, read_light=from_reader)
    at_load, at_end = read
    if name != "related":  # static: the declared shapes are the set, nothing is planned
        assert at_load.planned is None
        return
    assert at_load.planned is not None and at_end.planned is None
    assert at_load.planned[1] == {"s0": 16, "s1": 16, "m": 32}, at_load.planned
    found = [signature(original, result.model, 1, None, options, catalogue)
             for original in (at_load, at_end)]
    assert found[0] == found[1]


def test_the_output_is_the_same_bytes_whether_the_signature_is_shown_or_not(tmp_path):
    """The signature plans on the model the fold then takes: shown (the summary) or not
    (``-q``), the fold writes the same bytes, and the signature says the set the plan gives
   ."""
    from tests.support.cli import run_cli

    src = _related_dims(tmp_path / "m.onnx")
    shown, quiet = tmp_path / "shown.onnx", tmp_path / "quiet.onnx"
    said = run_cli("optimize", src, "-o", shown)
    assert said.returncode == 0, said.stderr
    assert "at s0=16, s1=16, m=32 (the first input set --check would use)" in said.stdout
    assert run_cli("optimize", src, "-o", quiet, "-q").returncode == 0
    assert shown.read_bytes() == quiet.read_bytes()


@pytest.mark.parametrize("dim", [2, "n"])
def test_an_input_the_check_cannot_feed_is_said_and_the_fold_goes_on(dim, tmp_path):
    """A sequence input (static or not): the signature, read as the input loads, says the
    compute is not counted and why; it never stops the fold (a static one once did:
    ``onnxfold: error`` before anything was folded)."""
    from tests.support.cli import run_cli

    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["zero"],
                          value=helper.make_tensor("z", TensorProto.INT64, [], [0])),
         helper.make_node("SequenceAt", ["s", "zero"], ["t"]),
         helper.make_node("Add", ["t", "x"], ["y"])], "g",
        [helper.make_tensor_sequence_value_info("s", f, [dim]),
         helper.make_tensor_value_info("x", f, [dim])],
        [helper.make_tensor_value_info("y", f, [dim])])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(src))
    done = run_cli("optimize", src, "-o", tmp_path / "o.onnx")
    assert done.returncode == 0, done.stderr
    assert "compute      not counted: the original: input s has type Sequence" in done.stdout
    assert (tmp_path / "o.onnx").exists()


def test_a_plan_that_fails_as_the_input_loads_is_made_again_once_the_fold_is_done(
        tmp_path, monkeypatch):
    """Whatever else fails in the plan made as the input loads (the machine short of memory,
    a bug) neither stops the fold nor leaves a trace in the model: the signature plans once
    the fold is done, where such a failure was met before."""
    import onnxfold.check.running.feeds as feeds

    real = feeds.FeedPlan
    calls = []

    def failing_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise MemoryError("planted")
        return real(*args, **kwargs)

    monkeypatch.setattr(feeds, "FeedPlan", failing_once)
    catalogue, options = load_catalogue(), CompareOptions()
    read: list = []

    def from_reader(model, light):
        before = _state(model)
        read.append(read_original(model, light, (options, catalogue.shape_steps)))
        assert _state(model) == before

    result = optimize(_related_dims(tmp_path / "m.onnx"), read_light=from_reader)
    (original,) = read
    assert original.planned is None and len(calls) == 1
    found = signature(original, result.model, 1, None, options, catalogue)
    assert found["compute"]["dims"] == {"s0": 16, "s1": 16, "m": 32} and len(calls) == 2
