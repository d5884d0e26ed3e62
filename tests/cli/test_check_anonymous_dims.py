"""Every dynamic dim is varied by the check, whatever the exporter wrote for it: a name, ``?``,
nothing, or Paddle's -1 (onnxruntime accepts any size at each). A fold that baked such a dim
differs at another binding; a dim the second model or ``--input-shape`` fixes is never moved,
also where a relation ties it to guessed dims."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxfold
from onnxfold.check.inputs import dim_relations
from onnxfold.check.inputs.dim_relations import Bound, DimPlan, Profile, settle
from tests.support.cli import run_cli
from tests.support.models import make_model, tensor, vinfo
from tests.support.wild_models import wild_model

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
ANONYMOUS = {"-1": -1, "unnamed": None, "question mark": "?"}


def _batch_scaled(dim0) -> onnx.ModelProto:
    """y = x * float(x.shape[0]): what a fold that baked the batch computes wrongly."""
    return make_model([helper.make_node("Shape", ["x"], ["s"]),
                       helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
                       helper.make_node("Cast", ["n"], ["c"], to=F32),
                       helper.make_node("Mul", ["x", "c"], ["y"])],
                      [vinfo("x", F32, [dim0, 4])], [vinfo("y", F32, [dim0, 4])],
                      [tensor("zero", np.array(0, np.int64))])


def _baked(model: onnx.ModelProto, batch: float) -> onnx.ModelProto:
    """``model`` with ``c`` folded as ``batch`` (and saying so, as onnxfold's folds do)."""
    baked = onnx.ModelProto()
    baked.CopyFrom(model)
    del baked.graph.node[:]
    baked.graph.node.append(helper.make_node("Mul", ["x", "c"], ["y"]))
    del baked.graph.initializer[:]
    weight = tensor("c", np.array(batch, np.float32))
    entry = weight.metadata_props.add()
    entry.key, entry.value = "onnxfold.folded_from", "Cast->c"
    baked.graph.initializer.append(weight)
    return baked


@pytest.mark.parametrize("kind", ANONYMOUS)
@pytest.mark.parametrize("batch", [1.0, 2.0, 3.0])
def test_a_baked_anonymous_batch_fails_whatever_it_was_baked_as(tmp_path, kind, batch):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    model = _batch_scaled(ANONYMOUS[kind])
    onnx.save(model, a)
    onnx.save(_baked(model, batch), b)
    for command in (("compare", a, b, "-n", "3"), ("verify-folds", a, b)):
        proc = run_cli(*command)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "DIFFERS c float[]" in proc.stdout


@pytest.mark.parametrize("kind", ANONYMOUS)
def test_an_anonymous_dim_is_named_by_input_and_axis_and_takes_three_values(tmp_path, kind):
    a, out = tmp_path / "a.onnx", tmp_path / "o.onnx"
    onnx.save(_batch_scaled(ANONYMOUS[kind]), a)
    proc = run_cli("optimize", a, "-o", out, "--check", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "input x: float32[1,4] / [2,4] / [3,4] standard normal" in proc.stdout
    assert "input sets alternate the dims {x[0]=1} and {x[0]=2} and {x[0]=3}" in proc.stdout
    assert "took one value only" not in proc.stdout
    assert "every folded tensor verified for every input" in proc.stdout


def test_two_anonymous_dims_of_one_input_are_each_their_own():
    """``[?, ?, 4]``: each ? is its own dim, varied (the inner one follows the batch, as a
    recurrent state's must), and ``--dim x[1]=5`` sets one alone; ``[?, ?]`` ends in a
    length."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [vinfo("x", F32, ["?", "?", 4])], [vinfo("y", F32, ["?", "?", 4])])
    result = onnxfold.compare(model, model, n=3)
    assert result.ok
    assert result.inputs[0].shapes == [[1, 1, 4], [2, 2, 4], [3, 3, 4]]
    assert result.defaulted_dims == ["x[0]", "x[1]"]
    rows = make_model([helper.make_node("Relu", ["x"], ["y"])],
                      [vinfo("x", F32, ["?", "?"])], [vinfo("y", F32, ["?", "?"])])
    assert onnxfold.compare(rows, rows, n=3).inputs[0].shapes == [[1, 16], [2, 1], [3, 7]]
    assert onnxfold.compare(model, model, dims={"x[1]": 5}).inputs[0].shapes == [
        [1, 5, 4], [2, 5, 4], [3, 5, 4]]


def _flatten(dims) -> onnx.ModelProto:
    """y = Reshape(x, [0, -1]) over ``x: dims``."""
    return make_model([helper.make_node("Reshape", ["x", "to"], ["y"])],
                      [vinfo("x", F32, dims)], [vinfo("y", F32, ["rows", "cols"])],
                      [tensor("to", np.array([0, -1], np.int64))])


@pytest.mark.parametrize("kind", ANONYMOUS)
def test_the_second_models_fixed_dims_pin_anonymous_ones(tmp_path, kind):
    """B fixed at [2, 3, 4] against A's anonymous dims: compared there, and said."""
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    dim = ANONYMOUS[kind]
    onnx.save(_flatten([dim, dim, 4]), a)
    onnx.save(_flatten([2, 3, 4]), b)
    proc = run_cli("compare", a, b, "-n", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "input x: float32[2,3,4] standard normal" in proc.stdout
    assert ("the second model fixes dims the original leaves dynamic: axis 0=2 (x); axis 1=3 "
            "(x)") in proc.stdout


@pytest.mark.parametrize("kind", ANONYMOUS)
def test_input_shape_fixes_each_anonymous_dim_to_any_size(tmp_path, kind):
    a, out = tmp_path / "a.onnx", tmp_path / "o.onnx"
    dim = ANONYMOUS[kind]
    onnx.save(_flatten([dim, dim, 4]), a)
    proc = run_cli("optimize", a, "-o", out, "--input-shape", "x:2,3,4", "--check", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = onnx.load(out)
    assert [d.dim_value for d in written.graph.input[0].type.tensor_type.shape.dim] == [2, 3, 4]
    assert "input x: float32[2,3,4] standard normal" in proc.stdout
    kept = run_cli("optimize", a, "-o", out, "--input-shape", "x:2,?,4", "--check", "2")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    second = onnx.load(out).graph.input[0].type.tensor_type.shape.dim[1]
    assert (second.dim_value, second.dim_param) == ((-1, "") if dim == -1 else
                                                    (0, dim or ""))


def _decoder() -> onnx.ModelProto:
    """A cache and a mask as long as past + sequence (the graph says so by broadcasting the
    mask against the scores over the concatenated keys), as a KV decoder's."""
    nodes = [helper.make_node("Gather", ["E", "input_ids"], ["e"]),  # [b, seq, 8]
             helper.make_node("Reshape", ["e", "split"], ["k"]),  # [b, seq, 2, 4]
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1, 3]),
             helper.make_node("Concat", ["past", "kt"], ["kv"], axis=2),
             helper.make_node("ReduceSum", ["kv", "last"], ["scores"], keepdims=1),
             helper.make_node("Transpose", ["scores"], ["st"], perm=[0, 1, 3, 2]),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=F32),
             helper.make_node("Unsqueeze", ["m", "mid"], ["m4"]),
             helper.make_node("Add", ["st", "m4"], ["logits"])]
    rng = np.random.default_rng(0)
    return make_model(nodes, [vinfo("input_ids", I64, ["batch", "seq"]),
                              vinfo("attention_mask", I64, ["batch", "total"]),
                              vinfo("past", F32, ["batch", 2, "past_len", 4])],
                      [vinfo("logits", F32, ["b", 2, 1, "t"])],
                      [tensor("E", rng.standard_normal((50, 8)).astype(np.float32)),
                       tensor("split", np.array([0, 0, 2, 4], np.int64)),
                       tensor("last", np.array([3], np.int64)),
                       tensor("mid", np.array([1, 2], np.int64))])


def test_input_shape_fixing_a_total_length_keeps_it_in_every_binding(tmp_path):
    """--input-shape attention_mask:1,32 fixes total = past + seq at 32: every binding keeps
    it (the past takes up the difference), none is fed a mask of another length."""
    a, out = tmp_path / "a.onnx", tmp_path / "o.onnx"
    onnx.save(_decoder(), a)
    plain = run_cli("optimize", a, "-o", out, "--check", "3")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "total = past_len + seq" in plain.stdout  # the relation is read
    proc = run_cli("optimize", a, "-o", out, "--input-shape", "attention_mask:1,32",
                   "--check", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "input attention_mask: int64[1,32] ones" in proc.stdout
    assert "input past: float32[1,2,16,4] / [1,2,31,4] / [1,2,25,4]" in proc.stdout
    assert "could not run" not in proc.stdout


def test_a_variant_that_would_move_a_given_dim_is_not_run_and_said():
    """Doubling past and seq would move total, fixed at 32: the variant is not made."""
    forms = {"total": {"past": 1, "seq": 1}}
    plan = DimPlan([], guessed=["past", "seq"], forms=forms, given=frozenset({"total"}))
    first = Bound({"total": 32, "past": 16, "seq": 16}, dim_relations.profiles()[0])
    assert plan.variants(first) == []
    assert plan.notes == ["the prefill, lengths x2 binding was not run: it would move "
                          "total=32 (total = past + seq) (past, seq doubled)"]
    held = DimPlan([], guessed=["past", "seq"], forms={"total": {"past": 1, "seq": 1}},
                   given=frozenset({"total"}))
    decode = Bound({"total": 32, "past": 16, "seq": 1}, Profile("decode", 2, 1, 16, 224))
    (variant,) = held.variants(decode)
    assert variant.dims == {"total": 32, "past": 30, "seq": 2}  # seq doubled, past follows


def test_settle_keeps_given_dims_and_prefers_the_cache_length():
    equations = {"total": ({"past": 1, "seq": 1}, "")}
    names = {"total", "past", "seq"}
    assert settle({"past": 16, "seq": 1}, {"total": 32}, equations, names, held={"past"}) == (
        {"total": 32, "past": 31, "seq": 1}, "")
    assert settle({"past": 40, "seq": 8}, {"total": 32}, equations, names, held={"seq"},
                  keep={"seq"}) == ({"total": 32, "past": 24, "seq": 8}, "")  # seq kept
    assert settle({"past": 5}, {"total": 3, "seq": 4}, equations, names)[1] == \
        "total=3 (total = past + seq)"  # nothing guessed can keep it: said


def test_a_baked_batch_in_a_paddle_model_with_question_mark_dims_fails(tmp_path):
    """rapidocr_cls (``x: [-1, 3, ?, ?]``) with the bake_batch mutant planted: the check
    varies the batch and fails; nothing is written."""
    model = str(wild_model("rapidocr_cls"))
    out = tmp_path / "o.onnx"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-m", "tools.mutants", "bake_batch", "optimize",
                           model, "-o", str(out), "--check", "3"], capture_output=True,
                          text=True, cwd=root, timeout=900, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "x[0]=1" in proc.stdout and "x[0]=2" in proc.stdout
    assert not out.exists()
