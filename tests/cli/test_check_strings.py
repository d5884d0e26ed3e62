"""Strings under the check: a string initializer, a folded string tensor and string outputs go
through ``optimize --check``, ``compare`` and ``verify-folds`` like numbers (onnx-ir hands
strings as fixed-width bytes, onnxruntime as ``str`` objects: the check compares values, not
representations). Real onnxruntime, models built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.check.folds.verification import BITWISE, DIFFERS, verify_folds
from tests.support.cli import assert_ok, run_cli
from tests.support.models import make_model, vinfo


def _strings(name: str, words: list[str]):
    return numpy_helper.from_array(np.array(words, dtype=object), name)


def _meta(tensor, **props):
    for key, value in props.items():
        entry = tensor.metadata_props.add()
        entry.key, entry.value = "onnxfold." + key, value
    return tensor


def _equal_to_vocabulary(vocabulary=None, **kwargs):
    """text [n] == vocab ([3] strings, a Concat of two Constant nodes unless ``vocabulary``
    is given as an initializer) -> float [n, 3]."""
    nodes = [helper.make_node("Unsqueeze", ["text", "ax"], ["t2"]),
             helper.make_node("Equal", ["t2", "vocab"], ["eq"]),
             helper.make_node("Cast", ["eq"], ["y"], to=TensorProto.FLOAT)]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "ax")]
    if vocabulary is None:
        nodes[:0] = [helper.make_node("Constant", [], ["c1"],
                                      value=_strings("c1", ["the", "model"])),
                     helper.make_node("Constant", [], ["c2"], value=_strings("c2", ["folds"])),
                     helper.make_node("Concat", ["c1", "c2"], ["vocab"], axis=0)]
    else:
        inits.append(_meta(_strings("vocab", vocabulary), **kwargs))
    return make_model(nodes, [vinfo("text", TensorProto.STRING, ["n"])],
                      [vinfo("y", TensorProto.FLOAT, ["n", 3])], inits, opset=20, ir_version=9)


def _string_initializer():
    """Equal(text, "the") with "the" an initializer, cast to float."""
    return make_model([helper.make_node("Equal", ["text", "the"], ["eq"]),
                       helper.make_node("Cast", ["eq"], ["y"], to=TensorProto.FLOAT)],
                      [vinfo("text", TensorProto.STRING, ["n"])],
                      [vinfo("y", TensorProto.FLOAT, ["n"])], [_strings("the", ["the"])],
                      opset=20, ir_version=9)


@pytest.mark.parametrize("command", ["optimize", "compare", "verify-folds"])
def test_a_string_initializer_goes_through_the_check(tmp_path, command):
    path = tmp_path / "a.onnx"
    onnx.save(_string_initializer(), path)
    args = {"optimize": ["optimize", path, "-o", tmp_path / "o.onnx", "--check", "2"],
            "compare": ["compare", path, path, "-n", "2"],
            "verify-folds": ["verify-folds", path, path]}[command]
    done = run_cli(*args)
    assert_ok(done)


def test_a_folded_string_tensor_verifies_bitwise(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(_equal_to_vocabulary(), a)
    onnx.save(_equal_to_vocabulary(["the", "model", "folds"], folded_from="Concat->vocab"), b)
    result = verify_folds(str(a), str(b))
    (verdict,) = result.tensors
    assert verdict.state == BITWISE, result.summary()
    done = run_cli("compare", a, b, "-n", "2")
    assert_ok(done)
    assert "1 bitwise, 0 differ" in done.stdout


@pytest.mark.parametrize("words", [["the", "model", "fold"], ["the", "model", "folds!"],
                                   ["the", "model"], ["the", "models", "folds"]])
def test_a_wrong_string_fold_differs(tmp_path, words):
    """Another word, a longer or shorter one, one word fewer: each differs, and the message
    shows both values as the same kind of strings, saying "the original computes" once."""
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(_equal_to_vocabulary(), a)
    onnx.save(_equal_to_vocabulary(words, folded_from="Concat->vocab"), b)
    result = verify_folds(str(a), str(b))
    (verdict,) = result.tensors
    assert verdict.state == DIFFERS
    done = run_cli("verify-folds", a, b)
    assert done.returncode == 1, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if "DIFFERS vocab" in x)
    assert line.count("the original computes") == 1, line
    assert "['the', 'model', 'folds']" in line, line
    assert "b'" not in line, line


def test_a_cone_reading_string_constants_sees_their_text(tmp_path):
    """A LabelEncoder of a string initializer, folded: the cone hands onnxruntime the strings
    as text (onnxruntime reads a ``bytes`` object as its repr, ``"b'the'"``, which no key
    matches), so the fold verifies bitwise; a wrong fold of it differs."""
    ml = helper.make_opsetid("ai.onnx.ml", 3)

    def model(folded=None):
        nodes = [helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT),
                 helper.make_node("Mul", ["x", "f"], ["y"])]
        inits = [_strings("words", ["the", "model", "é"])]
        if folded is None:
            nodes.insert(0, helper.make_node(
                "LabelEncoder", ["words"], ["ids"], domain="ai.onnx.ml",
                keys_strings=["the", "model", "é"], values_int64s=[1, 2, 3], default_int64=0))
        else:
            inits = [_meta(numpy_helper.from_array(np.array(folded, np.int64), "ids"),
                           folded_from="LabelEncoder->ids")]
        m = make_model(nodes, [vinfo("x", TensorProto.FLOAT, [3])],
                       [vinfo("y", TensorProto.FLOAT, [3])], inits, opset=17)
        m.opset_import.append(ml)
        return m
    a, b, wrong = tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path / "w.onnx"
    onnx.save(model(), a)
    onnx.save(model([1, 2, 3]), b)
    onnx.save(model([1, 2, 0]), wrong)
    assert [t.state for t in verify_folds(str(a), str(b)).tensors] == [BITWISE]
    assert [t.state for t in verify_folds(str(a), str(wrong)).tensors] == [DIFFERS]


def test_a_folded_string_ending_in_nul_verifies_bitwise(tmp_path):
    """A string whose last byte is NUL: onnx-ir's fixed-width form of a string tensor drops
    trailing NULs, so the check compares each string's exact bytes (a right fold is bitwise,
    not a false alarm) and a fold that lost the NUL still differs."""
    def model(vocabulary=None, **kwargs):
        m = _equal_to_vocabulary(vocabulary, **kwargs)
        if vocabulary is None:  # the original's second constant ends in NUL
            node = m.graph.node[1]
            node.attribute[0].t.string_data[0] = b"folds\x00"
        return m
    a, b, lost = tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path / "lost.onnx"
    onnx.save(model(), a)
    onnx.save(model(["the", "model", "folds\x00"], folded_from="Concat->vocab"), b)
    onnx.save(model(["the", "model", "folds"], folded_from="Concat->vocab"), lost)
    assert [t.state for t in verify_folds(str(a), str(b)).tensors] == [BITWISE]
    assert [t.state for t in verify_folds(str(a), str(lost)).tensors] == [DIFFERS]
