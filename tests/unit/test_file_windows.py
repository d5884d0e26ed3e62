"""The windows the check finds in a file (``check.rewrites.file_windows``) and the tensors it
judges with them (``check.rewrites.in_files``), on small graphs written here."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper

from onnxfold.check.judging.verdicts import BITWISE, DIFFERS, PARAMETER, UNVERIFIABLE, Verdict
from onnxfold.check.rewrites.file_windows import asks_bits, rewritten_windows
from onnxfold.check.rewrites.in_files import judge_parameters
from onnxfold.check.rewrites.validation import RewriteValidation, rewrite_verdict
from tests.support.models import make_model, tensor, vinfo

F = TensorProto.FLOAT


def _model(nodes, inits=()) -> ir.Model:
    return ir.serde.deserialize_model(make_model(
        nodes, [vinfo("x", F, [2, 4])], [vinfo("y", F, [2, 4])], list(inits)))


ORIGINAL = [helper.make_node("Mul", ["x", "k"], ["a"], name="m"),
            helper.make_node("Transpose", ["a"], ["t"], perm=[1, 0]),
            helper.make_node("Transpose", ["t"], ["b"], perm=[1, 0]),
            helper.make_node("Gemm", ["b", "w", "c"], ["y"], alpha=2.0, beta=1.0)]
CONSTANTS = [tensor("k", np.full((2, 4), 3, np.float32)), tensor("w", np.eye(4, dtype=np.float32)),
             tensor("c", np.ones(4, np.float32))]


def test_kept_nodes_are_found_whatever_their_names_and_attribute_order():
    optimized = [helper.make_node("Mul", ["x", "k"], ["a"], name="renamed"),
                 helper.make_node("Transpose", ["a"], ["t"], perm=[1, 0]),
                 helper.make_node("Transpose", ["t"], ["b"], perm=[1, 0]),
                 helper.make_node("Gemm", ["b", "w", "c"], ["y"], beta=1.0, alpha=2.0)]
    gemm = optimized[-1]  # make_node sorts its attributes: written in the other order here
    reordered = list(reversed(gemm.attribute))
    del gemm.attribute[:]
    gemm.attribute.extend(reordered)
    assert [a.name for a in gemm.attribute] == ["beta", "alpha"]
    found = rewritten_windows(_model(ORIGINAL, CONSTANTS), _model(optimized, CONSTANTS))
    assert found.records == []


def test_new_nodes_linked_by_new_names_are_one_window_cut_at_the_original_s_names():
    """The two Transposes gone (b is a now: a new Gemm), and the Mul by a new constant whose
    output has a new name: one window from x to y; an attribute changed: a window of its own."""
    optimized = [helper.make_node("Mul", ["x", "k2"], ["a2"]),
                 helper.make_node("Gemm", ["a2", "w", "c"], ["y"], alpha=2.0, beta=1.0)]
    found = rewritten_windows(_model(ORIGINAL, CONSTANTS),
                              _model(optimized, [*CONSTANTS, tensor("k2", np.full((2, 4), 3,
                                                                                  np.float32))]))
    (record,) = found.records
    assert [n.op_type for n in record.after.nodes] == ["Mul", "Gemm"]
    assert record.after.outputs == ["y"] and set(record.after.constants) == {"k2", "w", "c"}
    assert [n.op_type for n in record.before.nodes] == ["Mul", "Transpose", "Transpose",
                                                        "Gemm"]
    assert not asks_bits(record)  # Gemm and Mul round: a tolerance, never bits asked
    changed = [*ORIGINAL[:3], helper.make_node("Gemm", ["b", "w", "c"], ["y"], alpha=3.0,
                                               beta=1.0)]
    (record,) = rewritten_windows(_model(ORIGINAL, CONSTANTS), _model(changed, CONSTANTS)).records
    assert [n.op_type for n in record.after.nodes] == ["Gemm"]
    assert record.after.originals == {"b": "b"} and set(record.after.constants) == {"w", "c"}


def test_an_opened_value_joins_the_windows_on_both_sides_of_it():
    """b written in another form under its name: opened, the Gemm that reads it joins the
    window that makes it, and the comparison moves to y."""
    optimized = [helper.make_node("Mul", ["x", "k"], ["a"]),
                 helper.make_node("Identity", ["a"], ["b"]),
                 helper.make_node("Gemm", ["b", "w", "c"], ["y"], alpha=2.0, beta=1.0)]
    a, b = _model(ORIGINAL, CONSTANTS), _model(optimized, CONSTANTS)
    (record,) = rewritten_windows(a, b).records
    assert record.after.outputs == ["b"]
    (record,) = rewritten_windows(a, b, opened={"b"}).records
    assert [n.op_type for n in record.after.nodes] == ["Identity", "Gemm"]
    assert record.after.outputs == ["y"]


def test_bits_are_asked_where_neither_window_rounds():
    """The two Transposes as one Identity: data movement on both sides, bits asked; the Mul
    by 3 as a Mul by another constant: a float rounds, a tolerance."""
    moved = [ORIGINAL[0], helper.make_node("Identity", ["a"], ["b"]), ORIGINAL[3]]
    found = rewritten_windows(_model(ORIGINAL, CONSTANTS), _model(moved, CONSTANTS))
    (record,) = found.records
    assert [n.op_type for n in record.before.nodes] == ["Transpose", "Transpose"]
    assert asks_bits(record)
    scaled = [helper.make_node("Mul", ["x", "k2"], ["a"]), *ORIGINAL[1:]]
    found = rewritten_windows(_model(ORIGINAL, CONSTANTS), _model(scaled, [
        *CONSTANTS, tensor("k2", np.full((2, 4), 3, np.float32))]))
    (record,) = found.records
    assert not asks_bits(record)


def test_only_validated_windows_make_a_claimed_tensor_their_parameter():
    """A tensor the file says a rewrite made becomes a parameter only where every node that
    reads it is in a window that validated; one read by a window that differs, also read by a
    kept node, named by no such word, or an edited original weight, keeps its verdict."""
    optimized = [helper.make_node("Mul", ["x", "p1"], ["n1"]),  # window 1: p1, p3, p2, edited
                 helper.make_node("Add", ["n1", "p3"], ["n1b"]),
                 helper.make_node("Add", ["n1b", "p2"], ["n1c"]),
                 helper.make_node("Add", ["n1c", "p1_edited"], ["a"]),
                 helper.make_node("Mul", ["a", "p1"], ["n2"]),  # window 2: p1 again
                 helper.make_node("Identity", ["n2"], ["b"]),
                 helper.make_node("Gemm", ["b", "w", "c"], ["y"], alpha=2.0, beta=1.0)]
    consts = [tensor(n, np.ones((2, 4), np.float32)) for n in ("p1", "p2", "p3", "p1_edited")]
    found = rewritten_windows(_model(ORIGINAL, CONSTANTS), _model(optimized, [*CONSTANTS,
                                                                              *consts]))
    assert [r.after.outputs for r in found.records] == [["a"], ["b"]]  # type: ignore[union-attr]
    validation = RewriteValidation(rewrites=[rewrite_verdict("r", "1", BITWISE),
                                             rewrite_verdict("r", "2", DIFFERS)], sets=1)
    tensors = [Verdict(name, UNVERIFIABLE, via=via) for name, via in
               (("p1", "rewrite"), ("p2", ""), ("p3", "recipe"), ("w", "rewired"),
                ("p1_edited", "rewrite"))]
    judge_parameters(tensors, found, validation, edited=["p1_edited"])
    states = {t.name: t.state for t in tensors}
    assert states == {"p1": UNVERIFIABLE, "p2": UNVERIFIABLE, "p3": PARAMETER,
                      "w": UNVERIFIABLE, "p1_edited": UNVERIFIABLE}, states
