"""Nothing is certified that was not shown: a second model that bakes an input's values, or a
dynamic dim, is never "verified"; a few ulps planted in a rewrite-made constant are caught in
another process; what cannot be shown is counted and said. Real onnxruntime, models built for
each case (the exports' matrix runs them on real exports: tools/check_matrix.py, and the
mutation tier plants such bugs in onnxfold itself: tools/mutation_tier.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.ir import provenance
from tests.support.cli import run_cli
from tests.support.models import make_model, tensor, vinfo

I64, F32 = TensorProto.INT64, TensorProto.FLOAT


def _embeddings(path, batch: int | str = "batch", seq: int | str = "seq") -> None:
    """Token ids and token types, each through its own table, summed: ``tt_emb =
    Gather(T, token_type_ids)`` reads an input's values."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gather", ["W", "input_ids"], ["word_emb"]),
             helper.make_node("Gather", ["T", "token_type_ids"], ["tt_emb"]),
             helper.make_node("Add", ["word_emb", "tt_emb"], ["out"])]
    onnx.save(make_model(nodes, [vinfo("input_ids", I64, [batch, seq]),
                                 vinfo("token_type_ids", I64, [batch, seq])],
                         [vinfo("out", F32, [batch, seq, 4])],
                         [tensor("W", rng.standard_normal((10, 4)).astype(np.float32)),
                          tensor("T", rng.standard_normal((2, 4)).astype(np.float32))]), path)


def _baked(original, out, name: str, array: np.ndarray, claim: dict[str, str]) -> None:
    """``original`` with its value ``name`` replaced by an initializer holding ``array``
    (what a wrong fold would write), its tensor claiming ``claim`` (onnxfold's metadata)."""
    proto = onnx.load(original)
    producer = next(n for n in proto.graph.node if name in n.output)
    proto.graph.node.remove(producer)
    init = numpy_helper.from_array(array, name)
    for key, value in claim.items():
        init.metadata_props.add(key=key, value=value)
    proto.graph.initializer.append(init)
    onnx.save(proto, out)


def _rename(path, old: str, new: str) -> None:
    """The model at ``path`` with its initializer ``old`` (and every read of it) named
    ``new``."""
    proto = onnx.load(path)
    for init in proto.graph.initializer:
        init.name = new if init.name == old else init.name
    for node in proto.graph.node:
        node.input[:] = [new if i == old else i for i in node.input]
    onnx.save(proto, path)


def test_a_fold_that_baked_an_input_s_values_differs_by_name(tmp_path):
    """tt_emb baked at token types 0 (static shapes: the very array the original computes
    when fed zeros): its original reads token_type_ids' values, so it is a wrong fold whatever
    the feeds; compare and verify-folds exit 1 naming it."""
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    _embeddings(a, 1, 16)
    table = numpy_helper.to_array(next(t for t in onnx.load(a).graph.initializer
                                       if t.name == "T"))
    _baked(a, b, "tt_emb", np.tile(table[0], (1, 16, 1)),
           {provenance.FOLDED_FROM: "node_Gather_1"})
    for command in (("compare", a, b, "-n", "1"), ("verify-folds", a, b)):
        proc = run_cli(*command)
        assert proc.returncode == 1, proc.stdout
        assert "DIFFERS tt_emb" in proc.stdout and "token_type_ids" in proc.stdout


def test_a_renamed_baked_value_is_caught_by_varied_token_types(tmp_path):
    """The same bake under a name the original does not have and without provenance: no fold
    to re-derive (said), and the token types fed across their table's range differ."""
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    _embeddings(a)
    proto = onnx.load(a)
    table = numpy_helper.to_array(next(t for t in proto.graph.initializer if t.name == "T"))
    _baked(a, b, "tt_emb", table[0].reshape(1, 1, 4), {})
    _rename(b, "tt_emb", "baked")
    result = onnxfold.compare(str(a), str(b), n=3)
    assert not result.ok and result.failing == ["out"], result.summary()
    assert "random [0, 2) (token types" in result.summary()
    verdict = next(t for t in result.folds.tensors if t.name == "baked")
    assert verdict.state == "not verifiable" and "no onnxfold provenance" in verdict.reason


def _shape_fed(path) -> None:
    """``out = x + Expand(c, Shape(x))``: ``Shape(x)`` reads the dynamic dims of x."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Expand", ["c", "s"], ["e"]),
             helper.make_node("Add", ["x", "e"], ["out"])]
    onnx.save(make_model(nodes, [vinfo("x", F32, ["batch", "seq", 4])],
                         [vinfo("out", F32, ["batch", "seq", 4])],
                         [tensor("c", np.ones(1, np.float32))]), path)


@pytest.mark.parametrize("claim", ["fold", "rewrite"])
def test_a_fold_that_baked_a_dynamic_dim_differs_at_another_binding(tmp_path, claim):
    """Shape(x) baked at the first binding's [1, 16, 4] (as a fold of that name, or as a
    rewrite's constant standing for it): re-derived at every binding the reference ran, it
    differs at batch 2; even one compared input set (-n 1) finds it."""
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    _shape_fed(a)
    baked = np.array([1, 16, 4], np.int64)
    if claim == "fold":
        _baked(a, b, "s", baked, {provenance.FOLDED_FROM: "node_Shape_0"})
        name = "s"
    else:
        _baked(a, b, "s", baked, {provenance.STANDS_FOR: "s"})
        name = "s__onnxfold1"
        _rename(b, "s", name)
    result = onnxfold.compare(str(a), str(b), n=1)
    assert not result.ok and f"folded tensor {name}" in result.failing, result.summary()
    verdict = next(t for t in result.folds.tensors if t.name == name)
    assert verdict.state == "differs" and "binding 2" in verdict.reason
    assert "the original computes [2, 16, 4], the fold holds [1, 16, 4]" in verdict.reason


def test_a_value_shown_constant_over_the_dims_verifies_and_one_not_shown_is_sampled(tmp_path):
    """Shape(x)[2] (4 for every batch and seq) is verified for every input; 0 * batch as a
    float is 0 at every binding, but the symbolic dims cannot show it: sampled, said, and the
    verdict line does not call the verification full."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "two"], ["d"]),
             helper.make_node("Gather", ["s", "zero"], ["b"]),
             helper.make_node("Cast", ["b"], ["bf"], to=F32),
             helper.make_node("Mul", ["bf", "zerof"], ["z"]),
             helper.make_node("Cast", ["d"], ["df"], to=F32),
             helper.make_node("Add", ["df", "z"], ["k"]),
             helper.make_node("Mul", ["x", "k"], ["out"])]
    model = make_model(nodes, [vinfo("x", F32, ["batch", "seq", 4])],
                       [vinfo("out", F32, ["batch", "seq", 4])],
                       [tensor("two", np.array(2, np.int64)), tensor("zero", np.array(0, np.int64)),
                        tensor("zerof", np.array(0.0, np.float32))])
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(model, a)
    _baked(a, b, "df", np.array(4.0, np.float32), {provenance.FOLDED_FROM: "node_Cast_5"})
    _baked(b, b, "z", np.array(0.0, np.float32), {provenance.FOLDED_FROM: "node_Mul_4"})
    result = onnxfold.compare(str(a), str(b), n=3)
    verdicts = {t.name: t for t in result.folds.tensors}
    assert verdicts["df"].state == "bitwise" and verdicts["df"].dims == "proved"
    assert verdicts["z"].state == "sampled" and "equal at each of the 3 bindings" in \
        verdicts["z"].reason
    assert result.ok and "not a full verification" in result.summary().splitlines()[-1]


def _shared_input_matmuls(path) -> None:
    """q, k, v = x @ Wq, x @ Wk, x @ Wv: the rewrite merges them into one MatMul whose weight
    is folded from the three (a tensor no value of the original names)."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("MatMul", ["x", w], [o]) for w, o in
             (("Wq", "q"), ("Wk", "k"), ("Wv", "v"))]
    onnx.save(make_model(nodes, [vinfo("x", F32, ["batch", 8])],
                         [vinfo(o, F32, ["batch", 8]) for o in "qkv"],
                         [tensor(w, rng.standard_normal((8, 8)).astype(np.float32))
                          for w in ("Wq", "Wk", "Wv")]), path)


def test_four_ulps_in_a_rewrite_made_weight_are_caught_in_another_process(tmp_path):
    """The merged Q/K/V weight carries its recipe: moved 4 ulps in the written file, compare
    and verify-folds (new processes, no record of the run) name it."""
    a, out, bad = tmp_path / "a.onnx", tmp_path / "o.onnx", tmp_path / "bad.onnx"
    _shared_input_matmuls(a)
    proc = run_cli("optimize", a, "-o", out)
    assert proc.returncode == 0, proc.stderr
    proto = onnx.load(out)
    merged = next(t for t in proto.graph.initializer
                  if any(p.key == provenance.RECIPE for p in t.metadata_props))
    arr = numpy_helper.to_array(merged).copy()
    flat = arr.reshape(-1)
    for _ in range(4):
        flat[0] = np.nextafter(flat[0], np.float32(np.inf))
    moved = numpy_helper.from_array(arr, merged.name)
    moved.metadata_props.extend(merged.metadata_props)
    merged.CopyFrom(moved)
    onnx.save(proto, bad)
    assert run_cli("compare", a, out).returncode == 0
    for command in (("compare", a, bad), ("verify-folds", a, bad)):
        proc = run_cli(*command)
        assert proc.returncode == 1 and f"DIFFERS {merged.name}" in proc.stdout, proc.stdout


def test_folds_inside_function_bodies_are_counted_not_verified(tmp_path):
    """A fold written into a model-local function's body (a Constant node there) is not
    re-derived: it is listed as not verifiable, saying where, and the verdict is not full."""
    body = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
                np.array([1.0, 2.0], np.float32), "c")),
            helper.make_node("Mul", ["c", "c"], ["d"]),
            helper.make_node("Add", ["x", "d"], ["y"])]
    function = helper.make_function("local", "F", ["x"], ["y"], body,
                                    [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("F", ["inp"], ["out"], domain="local")], "g",
                              [vinfo("inp", F32, [2])], [vinfo("out", F32, [2])])
    model = helper.make_model(graph, functions=[function],
                              opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid("local", 1)])
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(model, a)
    onnxfold.optimize(str(a)).save(str(b))
    result = onnxfold.compare(str(a), str(b), n=1)
    nested = [t for t in result.folds.tensors if "local function F" in t.reason]
    assert nested and all(t.state == "not verifiable" for t in nested), result.summary()
    assert result.ok and "not a full verification" in result.summary().splitlines()[-1]
