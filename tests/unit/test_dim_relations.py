"""Feeds whose dims respect what the graph states: expression dims, ``?`` dims, guesses."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxfold
from onnxfold.analysis.dim_algebra import parse_expression
from onnxfold.check.inputs.feeds import synthetic_feeds
from onnxfold.errors import InputError
from tests.support.models import make_model, reshape_to_rows_of_thirteen


def _concat_past():
    """y = Concat(past, x) along axis 1, then + mask: the mask is declared ``s0 + s1`` long."""
    f = TensorProto.FLOAT
    return make_model(
        [helper.make_node("Concat", ["past", "x"], ["cat"], axis=1),
         helper.make_node("Add", ["cat", "mask"], ["y"])],
        [helper.make_tensor_value_info("past", f, [1, "s0"]),
         helper.make_tensor_value_info("x", f, [1, "s1"]),
         helper.make_tensor_value_info("mask", f, [1, "s0 + s1"])],
        [helper.make_tensor_value_info("y", f, [1, "s0 + s1"])])


@pytest.mark.parametrize(("text", "form"), [
    ("s0 + s1", {"s0": 1, "s1": 1}), ("2*s0 - 1", {"s0": 2, "": -1}), ("seq", {"seq": 1}),
    ("Min(64, s53)", None)])
def test_parse_expression(text, form):
    assert parse_expression(text) == form


def test_a_dim_declared_as_an_expression_is_computed():
    result = onnxfold.compare(_concat_past(), _concat_past(), n=2)
    assert result.ok, result.summary()
    assert result.bindings == [{"s0": 16, "s1": 16, "s0 + s1": 32},
                               {"s0": 1, "s1": 1, "s0 + s1": 2},
                               {"s0": 7, "s1": 7, "s0 + s1": 14}]
    assert "s0 + s1 = s0 + s1 (declared by the input)" in result.summary()
    assert result.defaulted_dims == ["s0", "s1"] and "s0=16/1/7" in result.summary()
    # a given dim is used as given, the relation still holds
    assert onnxfold.compare(_concat_past(), _concat_past(), dims={"s0": 5}).dims == {
        "s0": 5, "s1": 16, "s0 + s1": 21}


def test_unnamed_question_mark_dims_are_independent():
    """Paddle names every unknown dim ``?``: (1, 48, 192) fits [1, ?, ?]."""
    f = TensorProto.FLOAT
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                   [helper.make_tensor_value_info("x", f, [1, "?", "?"])],
                   [helper.make_tensor_value_info("y", f, [1, "?", "?"])])
    x = np.ones((1, 48, 192), np.float32)
    result = onnxfold.compare(model, model, inputs={"x": x})
    assert result.ok and result.rows[0].shape_a == [1, 48, 192]


def test_rows_of_thirteen_run_at_multiples_of_thirteen():
    """Reshape to [-1, 13] needs a multiple of 13 elements: no guessed binding fits, and
    onnxruntime's error names 13, so lengths of 13, 26 and 39 are tried and run."""
    model = reshape_to_rows_of_thirteen()
    result = onnxfold.compare(model, model)
    assert result.ok and all(b["n"] % 13 == 0 for b in result.bindings), result.summary()
    assert "bindings of the guessed dims, the first n=16" in " ".join(result.notes)
    assert onnxfold.compare(model, model, dims={"n": 26}).ok


def _string_model():
    """A model with a string input and a string output."""
    return make_model([helper.make_node("Identity", ["x"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.STRING, ["n"])],
                  [helper.make_tensor_value_info("y", TensorProto.STRING, ["n"])])


@pytest.mark.parametrize("dtype", ["<U1", "S1"])
def test_string_inputs_come_from_an_npz_of_string_arrays(tmp_path, dtype):
    path = tmp_path / "inputs.npz"
    np.savez(path, x=np.array(["a", "b", "c"], dtype))
    result = onnxfold.compare(_string_model(), _string_model(), inputs=str(path))
    assert result.ok and result.rows[0].elements == 3
    assert result.inputs[0].source == "from --inputs"


def test_string_inputs_without_arrays_are_random_words():
    """A tokenizer's text input is fed random words (in several scripts), seeded."""
    result = onnxfold.compare(_string_model(), _string_model(), n=2)
    assert result.ok and result.inputs[0].source == "random words (text)"
    assert result.inputs[0].dtype == "string"
    feeds, _ = synthetic_feeds(_string_model(), seed=3)
    again, _ = synthetic_feeds(_string_model(), seed=3)
    assert feeds["x"].dtype == object and feeds["x"].tolist() == again["x"].tolist()
    assert all(isinstance(t, str) and t for t in feeds["x"].tolist())


def test_position_ids_continue_after_the_past():
    """The mask is declared past + seq long: positions are past .. past+seq-1."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    model = make_model(
        [helper.make_node("Concat", ["past", "x"], ["cat"], axis=1),
         helper.make_node("Cast", ["mask"], ["mask_f"], to=f),
         helper.make_node("Mul", ["cat", "mask_f"], ["y"]),
         helper.make_node("Identity", ["position_ids"], ["positions"])],
        [helper.make_tensor_value_info("past", f, [1, "past"]),
         helper.make_tensor_value_info("x", f, [1, "seq"]),
         helper.make_tensor_value_info("mask", i64, [1, "past + seq"]),
         helper.make_tensor_value_info("position_ids", i64, [1, "seq"])],
        [helper.make_tensor_value_info("y", f, [1, "past + seq"]),
         helper.make_tensor_value_info("positions", i64, [1, "seq"])])
    feeds, _ = synthetic_feeds(model)
    assert feeds["position_ids"].tolist() == [list(range(16, 32))]
    assert feeds["mask"].shape == (1, 32)
    assert onnxfold.compare(model, model, n=2).ok


def test_dim_question_mark_sets_the_random_question_mark_dims():
    f = TensorProto.FLOAT
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                   [helper.make_tensor_value_info("x", f, [1, "?", "?"])],
                   [helper.make_tensor_value_info("y", f, [1, "?", "?"])])
    result = onnxfold.compare(model, model, dims={"?": 7})
    assert result.ok and result.inputs[0].shape == [1, 7, 7]


def test_a_binding_the_reference_cannot_run_is_dropped_with_a_note():
    """Reshape to [1, 1] runs only when n is 1: the prefill binding (n=16) is dropped."""
    f = TensorProto.FLOAT
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1, 1])
    model = make_model([helper.make_node("Constant", [], ["s"], value=shape),
                    helper.make_node("Reshape", ["x", "s"], ["y"])],
                   [helper.make_tensor_value_info("x", f, [1, "n"])],
                   [helper.make_tensor_value_info("y", f, [1, 1])])
    result = onnxfold.compare(model, model, n=2)
    assert result.ok and result.bindings == [{"n": 1}]
    assert result.notes and result.notes[0].startswith(
        "the reference could not run 3 bindings of the guessed dims, the first n=16 (")
    assert result.single_dims == ["n=1"]  # it runs n = 1 only: said, not a full verification
    row = result.to_dict()["outputs"][0]
    assert row["max_ulps"] is None
    assert row["tolerance"] == "rtol 0.0001, atol 1e-05 + 64u of |terms|"


def test_larger_guesses_are_tried_when_no_small_one_runs():
    """A reflect Pad of 40 needs more than 40 samples: 16 and 1 fail, 64 runs (as an audio
    model's STFT padding or a detector's downsampling need long inputs)."""
    f = TensorProto.FLOAT
    pads = helper.make_tensor("pads", TensorProto.INT64, [4], [0, 0, 0, 40])
    model = make_model([helper.make_node("Constant", [], ["p"], value=pads),
                    helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")],
                   [helper.make_tensor_value_info("x", f, [1, "samples"])],
                   [helper.make_tensor_value_info("y", f, [1, "out"])])
    result = onnxfold.compare(model, model, n=2)
    assert result.ok and result.bindings == [{"samples": 64}, {"samples": 97}, {"samples": 81}]
    notes = " ".join(result.notes)
    assert notes.startswith("the reference could not run 2 bindings of the guessed dims, the "
                            "first samples=16")
    assert "samples=1 " in notes  # another reason: named apart


def test_no_guess_running_is_one_error_listing_every_guess():
    f = TensorProto.FLOAT
    pads = helper.make_tensor("pads", TensorProto.INT64, [4], [0, 0, 0, 5000])
    model = make_model([helper.make_node("Constant", [], ["p"], value=pads),
                    helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")],
                   [helper.make_tensor_value_info("x", f, [1, "samples"])],
                   [helper.make_tensor_value_info("y", f, [1, "out"])])
    with pytest.raises(InputError) as refused:
        onnxfold.compare(model, model)
    said = str(refused.value)  # every guess, each dim once, and the flag: nothing cut
    assert "dims guessed: samples=16,1,7,64,97,81,256,385,321,1024,1537,1281," in said
    assert said.endswith("(dims={NAME: VALUE} sets one the model runs at)"), said  # Python


def test_lengths_in_blocks_the_error_names_are_tried_where_no_guess_runs():
    """A Reshape into blocks of 24 (Falcon-H1 and Zamba2 need lengths in multiples of 8): no
    guess runs, onnxruntime's error names 24, and lengths of 24, 48 and 72 run (said)."""
    f = TensorProto.FLOAT
    model = make_model([helper.make_node("Constant", [], ["s"], value=helper.make_tensor(
                            "s", TensorProto.INT64, [3], [0, -1, 24])),
                        helper.make_node("Reshape", ["x", "s"], ["y"])],
                       [helper.make_tensor_value_info("x", f, ["b", "seq"])],
                       [helper.make_tensor_value_info("y", f, ["b", None, 24])])
    result = onnxfold.compare(model, model, n=2)
    assert result.ok and [b["seq"] for b in result.bindings] == [24, 48, 72], result.summary()
    assert "every guessed length is a multiple of 24" in " ".join(result.notes)


def test_unnamed_trailing_dims_are_guessed_larger_and_a_state_in_the_middle_follows_the_batch():
    """Like an audio model: samples ``[None, None]`` needs 64 (reflect Pad of 40); the state's
    unnamed batch in the middle of ``[2, None, 4]`` follows each binding's batch (it must
    equal the samples' batch). Each unnamed dim is its own, named by input and axis, and
    takes two values."""
    f = TensorProto.FLOAT
    pads = helper.make_tensor("pads", TensorProto.INT64, [4], [0, 0, 0, 40])
    model = make_model([helper.make_node("Constant", [], ["p"], value=pads),
                    helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect"),
                    helper.make_node("ReduceSum", ["state"], ["s"], keepdims=0),
                    helper.make_node("Relu", ["s"], ["z"])],
                   [helper.make_tensor_value_info("x", f, [None, None]),
                    helper.make_tensor_value_info("state", f, [2, None, 4])],
                   [helper.make_tensor_value_info("y", f, None),
                    helper.make_tensor_value_info("z", f, None)])
    result = onnxfold.compare(model, model)
    assert result.ok and [i.shapes for i in result.inputs] == [[[1, 64], [2, 97], [3, 81]],
                                                                [[2, 1, 4], [2, 2, 4], [2, 3, 4]]]
    assert result.defaulted_dims == ["state[1]", "x[0]", "x[1]"] and not result.single_dims
    assert onnxfold.compare(model, model, dims={"?": 50}).inputs[0].shape == [50, 50]


def test_given_arrays_fix_the_dims_their_relations_imply():
    """Given the mask (total 7) and x (seq 2), the random past is 5 long."""
    x, mask = np.ones((1, 2), np.float32), np.ones((1, 7), np.float32)
    result = onnxfold.compare(_concat_past(), _concat_past(), inputs={"x": x, "mask": mask})
    assert result.ok, result.summary()
    past = next(i for i in result.inputs if i.name == "past")
    assert past.shape == [1, 5] and result.defaulted_dims == []
    assert result.derived_dims == {"s0": "5 (from s0 + s1 = s0 + s1)"}


def _relu(*inputs):
    """A model reading each (name, dtype, shape) input: its outputs are their Identities."""
    return make_model([helper.make_node("Identity", [name], [f"{name}_out"])
                       for name, _, _ in inputs],
                      [helper.make_tensor_value_info(name, t, shape) for name, t, shape in inputs],
                      [helper.make_tensor_value_info(f"{name}_out", t, shape)
                       for name, t, shape in inputs])


@pytest.mark.parametrize(("shape", "fed"), [
    (["n", 3, "h", "w"], [1, 3, 224, 224]),     # a photo with a dynamic size
    (["n", 3, "?", "?"], [1, 3, 224, 224]),     # the same, unnamed
    (["n", 3, 48, "w"], [1, 3, 48, 224]),       # an OCR line: 48 high, as wide as its text
    (["n", 4, "past", 8], [1, 4, 16, 8]),       # a KV cache (4 heads), not an image
    (["n", "?"], [1, 16]),                       # samples
])
def test_images_are_224_and_sequences_16(shape, fed):
    model = _relu(("x", TensorProto.FLOAT, shape))
    feeds, _ = synthetic_feeds(model)
    assert list(feeds["x"].shape) == fed


def test_the_decode_step_keeps_the_cache_length():
    """Token ids and a cache: the second binding is one new token after a past of 16 (batch
    2), the third another batch, length and past again: every guessed dim takes two values."""
    model = _relu(("ids", TensorProto.INT64, ["b", "seq"]),
                  ("cache", TensorProto.FLOAT, ["b", 2, "past", 8]))
    result = onnxfold.compare(model, model, n=2)
    assert result.ok and result.bindings == [{"b": 1, "past": 16, "seq": 16},
                                             {"b": 2, "past": 16, "seq": 1},
                                             {"b": 3, "past": 5, "seq": 7}]
