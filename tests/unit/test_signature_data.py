"""The signature as data of the run (issue 66, item 1): ``OptimizeResult.signature`` carries
the input's facts as loaded and both models' compute profiles, read from the shapes the run
already has (its first inference, the fold's walk), and counts them at a binding with no
shape inference of its own; where a profile leaves a costed node's shape unknown, ONNX's
inference at the bound shapes counts instead (``signature.inferred``), held here as the
reference a complete profile must equal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.app.signature import signature
from onnxfold.check.running.options import CompareOptions
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.io import load_model
from onnxfold.pipeline.optimizer import optimize
from tests.support import inferred_count as inferred
from tests.support.models import make_model
from tests.support.run_macs import run_macs

MODELS = Path(__file__).resolve().parents[2] / "models"


def _related_dims(path) -> str:
    """y = (Concat(past, x) + mask) * (w + w): the mask's own dim ``m`` broadcasts against
    ``s0 + s1``, which only the graph says."""
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


def _dynamo_like(path) -> str:
    """Two projections and a Softmax over ``[batch, past + seq, 32]``: dims as dynamo writes
    them (every value's declared, a sum where it is one), which shape inference keeps."""
    f, rng = TensorProto.FLOAT, np.random.default_rng(0)
    model = make_model(
        [helper.make_node("Concat", ["past", "x"], ["cat"], axis=1),
         helper.make_node("MatMul", ["cat", "w1"], ["h"]),
         helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["o"]),
         helper.make_node("Softmax", ["o"], ["y"], axis=-1)],
        [helper.make_tensor_value_info("past", f, ["batch", "past", 32]),
         helper.make_tensor_value_info("x", f, ["batch", "seq", 32])],
        [helper.make_tensor_value_info("y", f, ["batch", "past + seq", 8])],
        [numpy_helper.from_array(rng.standard_normal((32, 64)).astype(np.float32), "w1"),
         numpy_helper.from_array(rng.standard_normal((64, 8)).astype(np.float32), "w2")])
    model.graph.value_info.extend(
        helper.make_tensor_value_info(name, f, ["batch", "past + seq", width])
        for name, width in (("cat", 32), ("h", 64), ("r", 64), ("o", 8)))
    onnx.save(model, str(path))
    return str(path)


SOURCES = {"dynamo_like": _dynamo_like, "related": _related_dims,
           "tiny_gpt2_ts": lambda _: str(MODELS / "tiny_gpt2_ts.onnx"),
           "tiny_bert_ts": lambda _: str(MODELS / "tiny_bert_ts.onnx")}


def _shapes(facts: dict) -> dict[str, list[int]]:
    return {i["name"]: [d if isinstance(d, int) else 5 for d in i["shape"]]
            for i in facts["inputs"]}


@pytest.mark.parametrize("name", SOURCES)
def test_a_complete_profile_counts_what_inference_at_the_bound_shapes_counts(name, tmp_path):
    source = SOURCES[name](tmp_path / "m.onnx")
    result = optimize(source)
    data = result.signature
    assert data is not None and data.after_profile is not None
    # the check's first input set (the dims the graph relates, related)
    shapes = signature(data, 1, None, CompareOptions())["compute"]["inputs"]
    before, after = data.compute(shapes)
    costs = load_catalogue().costs
    assert after.unknown == 0, after.uncounted  # the fold's shapes say every one
    assert after.ops == inferred.compute(result.model, shapes, costs).ops
    if before.unknown == 0:  # (inference counts no more: the walk sizes what it cannot)
        reference = inferred.compute(load_model(source, check=False), shapes, costs)
        assert {op: row for op, row in before.ops.items() if op not in reference.uncounted} \
            == {op: row for op, row in reference.ops.items() if op not in reference.uncounted}
        feeds = {name: np.ones(shape, np.float32 if name in ("past", "x", "mask") else np.int64)
                 for name, shape in shapes.items()}
        assert sum(before.ops.get(op, [0, 0, 0])[2] for op in ("MatMul", "Gemm")) == \
            run_macs(source, feeds)  # onnxruntime's own run, where inference said less
    assert sum(row[1] for row in before.ops.values()) > 0


def _counting_inference(monkeypatch) -> list[int]:
    """Every ONNX shape inference from now on, counted."""
    calls: list[int] = []
    real = onnx.shape_inference.infer_shapes

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counted)
    return calls


def _state(model) -> list:
    """Every node output's name, type, dims and metadata, and the model's metadata."""
    from onnxfold.ir.graph import all_graphs

    return [(v.name, v.type, None if v.shape is None else tuple(v.shape), dict(v.meta.data))
            for graph in all_graphs(model) for node in graph for v in node.outputs] + \
        [dict(model.meta.data)]


@pytest.mark.parametrize("name", ["dynamo_like", "related"])
def test_the_signature_infers_no_shape_and_leaves_the_model_as_it_found_it(name, tmp_path,
                                                                            monkeypatch):
    """Rendered from a run whose profiles are complete (the input's, where its first
    inference left a dim unknown, completed by the optimized model's values of the same
    names): no shape inference, and the optimized model exactly as the run left it (the plan
    of the first input set reads it and writes nothing). No proto of the input is kept
    either: a dynamo export's declared dims leave none unknown, the walk sizes the others."""
    result = optimize(SOURCES[name](tmp_path / "m.onnx"))
    assert result.signature is not None
    assert result.signature.light is None  # (the related dims: sized by the walk)
    calls = _counting_inference(monkeypatch)
    state = _state(result.model)
    found = signature(result.signature, 1, None, CompareOptions())
    assert calls == [] and _state(result.model) == state
    assert found["compute"]["before"]["flops"] > 0 and not found["compute"]["after"][
        "not_counted"]


def test_the_plan_on_the_optimized_graph_relates_the_dims_the_graph_relates(tmp_path):
    result = optimize(_related_dims(tmp_path / "m.onnx"))
    assert result.signature is not None
    found = signature(result.signature, 1, None, CompareOptions())
    assert found["compute"]["dims"] == {"s0": 16, "s1": 16, "m": 32}, found["compute"]
    assert found["compute"]["from"] == "planned as --check plans it, on the optimized graph"


@pytest.mark.parametrize("name", ["tiny_bert_ts", "tiny_bert_ts_dynamic"])
def test_a_torchscript_attention_is_counted_from_the_walks_dims(name, monkeypatch):
    """A TorchScript BERT (its batch and sequence static, or dynamic): its first inference
    leaves the attention's products unsized (``unk__``: Shape, Gather and Concat chains), and
    the fold removes some of them. The walk the fold runs sizes them before any pass changes
    a node: no proto of the input is kept, no inference and no walk at fixed shapes run for
    the count, and every MatMul and Gemm is counted, as many multiply-accumulates as
    onnxruntime's run does."""
    import onnxfold.signature as signature_data

    source = str(MODELS / f"{name}.onnx")
    result = optimize(source)
    data = result.signature
    assert data is not None and data.light is None
    calls = _counting_inference(monkeypatch)
    monkeypatch.setattr(signature_data, "pinned_shapes", lambda *_: pytest.fail("walked again"))
    found = signature(data, 1, None, CompareOptions())["compute"]
    assert calls == [], "inferred again"
    monkeypatch.undo()
    feeds = {name: np.ones(shape, np.int64) for name, shape in found["inputs"].items()}
    ran = run_macs(source, feeds)
    for side in ("before", "after"):
        ops = found[side]["ops"]
        assert sum(ops.get(op, {}).get("macs", 0) for op in ("MatMul", "Gemm")) == ran, side
        assert not {"MatMul", "Gemm"} & set(found[side]["not_counted"])


def test_the_library_call_carries_the_facts_before_and_after(tmp_path):
    source = _dynamo_like(tmp_path / "m.onnx")
    result = optimize(source)
    data = result.signature
    assert data is not None and data.after is not None
    assert data.before["inputs"] == [
        {"name": "past", "dtype": "float32", "shape": ["batch", "past", 32]},
        {"name": "x", "dtype": "float32", "shape": ["batch", "seq", 32]}]
    assert data.before["parameters"] == {"count": 32 * 64 + 64 * 8,
                                         "bytes": 4 * (32 * 64 + 64 * 8)}
    assert data.before["file_bytes"] == Path(source).stat().st_size
    assert data.after["file_bytes"] is None  # a save says what it wrote
    before, _ = data.compute({"past": [2, 3, 32], "x": [2, 4, 32]})
    macs = 2 * 7 * 32 * 64 + 2 * 7 * 64 * 8
    assert before.ops["MatMul"] == [2, 2 * macs, macs]
    assert before.ops["Softmax"][1] == 5 * 2 * 7 * 8  # the declared factor per element


def test_the_output_is_the_same_bytes_whether_the_signature_is_shown_or_not(tmp_path):
    from tests.support.cli import run_cli

    src = _related_dims(tmp_path / "m.onnx")
    shown, quiet = tmp_path / "shown.onnx", tmp_path / "quiet.onnx"
    said = run_cli("optimize", src, "-o", shown)
    assert said.returncode == 0, said.stderr
    assert "at s0=16, s1=16, m=32 (planned as --check plans it, on the optimized graph)" in \
        said.stdout
    assert run_cli("optimize", src, "-o", quiet, "-q").returncode == 0
    assert shown.read_bytes() == quiet.read_bytes()


@pytest.mark.parametrize("dim", [2, "n"])
def test_an_input_the_check_cannot_feed_is_said_and_the_fold_goes_on(dim, tmp_path):
    """A sequence input (static or not): the signature says the compute is not counted and
    why; it never stops the run."""
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


def test_a_profile_that_cannot_be_read_is_said_and_the_fold_goes_on(tmp_path, monkeypatch):
    """Whatever fails in reading the input's compute (a bug, the machine short of memory):
    the fold goes on and writes what it writes without it, and the signature says why it
    has no count."""
    import onnxfold.signature as signature_data

    real, calls = signature_data.profile, []

    def failing(*args, **kwargs):  # the input's profile only (the run's first)
        calls.append(1)
        if len(calls) == 1:
            raise MemoryError("planted")
        return real(*args, **kwargs)

    source = _dynamo_like(tmp_path / "m.onnx")
    want = optimize(source).to_proto().SerializeToString()
    monkeypatch.setattr(signature_data, "profile", failing)
    result = optimize(source)
    assert calls == [1]
    assert result.to_proto().SerializeToString() == want
    assert result.signature is not None and result.signature.unread == "planted"
    found = signature(result.signature, 1, None, CompareOptions())
    assert found["compute"] == {"reason": "the input's compute was not read: planted"}


@pytest.mark.parametrize("name", ["tiny_bert_ts_dynamic", "tiny_gpt2_ts"])
def test_the_walk_for_the_count_leaves_no_trace_on_the_fold(name, tmp_path, monkeypatch):
    """The input's profile walks the dims before the fold's first sweep does (its records
    and the shapes it gave shapeless values taken off after): the fold writes the same bytes
    as a run whose profile is read without that walk."""
    import onnxfold.signature as signature_data

    source = str(MODELS / f"{name}.onnx")
    walked = optimize(source)
    assert walked.signature is not None and walked.signature.light is None
    monkeypatch.setattr(signature_data.RecordsCosts, "_walked",
                        lambda self, model: signature_data.profile(model, self.costs))
    unwalked = optimize(source)
    assert unwalked.signature is not None and unwalked.signature.light is not None
    assert walked.to_proto().SerializeToString() == unwalked.to_proto().SerializeToString()


def _shapeless(path) -> str:
    """Opset 13: ``Reshape(x, Concat(Shape(x)[0], 2, 2))`` gets no rank from inference, nor
    the MatMul after it: the walk gives both their shapes."""
    f = TensorProto.FLOAT
    model = make_model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
         helper.make_node("Concat", ["n", "two_two"], ["target"], axis=0),
         helper.make_node("Reshape", ["x", "target"], ["r"]),
         helper.make_node("MatMul", ["r", "w"], ["y"])],
        [helper.make_tensor_value_info("x", f, ["n", 4])],
        [helper.make_tensor_value_info("y", f, None)],
        [numpy_helper.from_array(np.array([0], np.int64), "zero"),
         numpy_helper.from_array(np.array([2, 2], np.int64), "two_two"),
         numpy_helper.from_array(np.ones((2, 3), np.float32), "w")], opset=13)
    onnx.save(model, str(path))
    return str(path)


@pytest.mark.parametrize("name", ["tiny_bert_ts_dynamic", "tiny_gpt2_ts", "shapeless"])
def test_the_profiles_walk_takes_its_records_off(name, tmp_path):
    """The pass that reads the input's profile changes nothing on the model: the walk's dims
    and the shapes it gave values inference left shapeless are taken off after (the fold's
    own sweep would write them again; a rule between could read them)."""
    from onnxfold.pipeline.passes import InferShapes
    from onnxfold.signature import RecordsCosts, Signature, facts

    source = _shapeless(tmp_path / "m.onnx") if name == "shapeless" else \
        str(MODELS / f"{name}.onnx")
    model = load_model(source, check=False)
    InferShapes()(model)
    assert (name == "shapeless") == any(v.shape is None for n in model.graph for v in n.outputs)
    state = _state(model)
    catalogue = load_catalogue()
    data = Signature(facts(model))
    RecordsCosts(data, catalogue.costs, catalogue.shape_steps)(model)
    assert data.before_profile is not None and data.before_profile.complete()
    assert _state(model) == state
