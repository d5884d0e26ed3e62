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
    # the output differs, and so does the window of the file that reads the bake
    assert not result.ok and result.failing[0] == "out", result.summary()
    assert [f for f in result.failing[1:] if not f.startswith("rewrite rewritten at ")] == []
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


def _merged_with_recipe(tmp_path, recipe: onnx.GraphProto | None, claim: dict[str, str]):
    """The original of three shared-input MatMuls, and onnxfold's output of it with the merged
    weight moved 4 ulps (a wrong fold the output tolerance swallows), its recipe replaced by
    ``recipe`` (None: dropped) and its other claims by ``claim``."""
    a, out, bad = tmp_path / "a.onnx", tmp_path / "o.onnx", tmp_path / "bad.onnx"
    _shared_input_matmuls(a)
    assert run_cli("optimize", a, "-o", out).returncode == 0
    proto = onnx.load(out)
    merged = next(t for t in proto.graph.initializer
                  if any(p.key == provenance.RECIPE for p in t.metadata_props))
    arr = numpy_helper.to_array(merged).copy()
    arr.reshape(-1)[0] = np.nextafter(np.nextafter(arr.reshape(-1)[0], np.float32(np.inf)),
                                      np.float32(np.inf))
    moved = numpy_helper.from_array(arr, merged.name)
    for key, value in claim.items():
        moved.metadata_props.add(key=key, value=value)
    if recipe is not None:
        import base64
        recipe.output.append(onnx.ValueInfoProto(name=recipe.node[-1].output[0]))
        moved.metadata_props.add(key=provenance.RECIPE,
                                 value=base64.b64encode(recipe.SerializeToString()).decode())
    merged.CopyFrom(moved)
    onnx.save(proto, bad)
    return a, bad, merged.name, arr


def _lying_recipes(name: str, arr: np.ndarray) -> dict[str, onnx.GraphProto]:
    """Recipes a model could carry that compute its own wrong tensor: a copy of it inline,
    the tensor itself, and the original's weights plus an inline correction."""
    inline = helper.make_graph([helper.make_node("Identity", ["copy"], ["made"])], "recipe", [],
                               [], [numpy_helper.from_array(arr, "copy")])
    circular = helper.make_graph([helper.make_node("Identity", [name], ["made"])], "recipe",
                                 [], [])
    circular.value_info.append(onnx.ValueInfoProto(name=name))
    return {"inline": inline, "circular": circular}


@pytest.mark.parametrize("kind", ["inline", "circular"])
def test_a_recipe_a_file_carries_never_certifies_its_tensor(tmp_path, kind):
    """compare and verify-folds re-run the recipe a written model carries, but a recipe is the
    model's own claim: one that computes the wrong tensor itself (a copy inline, or the tensor
    read by its own name) is not the original's computation (``recipe_forms``): the tensor is
    not verifiable, never bitwise nor a validated parameter, and the verdict not full."""
    a, bad, name, arr = _merged_with_recipe(tmp_path, None, {})
    _merged_with_recipe(tmp_path, _lying_recipes(name, arr)[kind],
                        {provenance.MADE_BY: "merge_shared_input_matmuls"})
    result = onnxfold.compare(str(a), str(bad), n=2)
    (verdict,) = [t for t in result.folds.tensors if t.name == name]
    assert verdict.state == "not verifiable" and "its recipe" in verdict.reason, \
        result.summary()
    assert "not a full verification" in result.verdict()
    proc = run_cli("verify-folds", a, bad)
    assert proc.returncode == 0 and "0 bitwise" in proc.stdout and "0 differ" in proc.stdout \
        and "not a full verification" in proc.stdout, proc.stdout


def test_a_recipe_that_moves_its_tensor_by_a_constant_of_its_own_is_refused(tmp_path):
    """Issue 82 Why 1: the merged weight moved 40 ulps, its recipe the original's weights
    concatenated plus an ``Add`` of a constant the recipe holds (computing the moved weight
    exactly), tagged as the merge's: not the original's
    computation, so not verifiable and not full, whole and in stages (without that rule of
    the check: a parameter validated on the input sets, and a full verification)."""
    a, bad, name, _ = _merged_with_recipe(tmp_path, None, {})
    proto = onnx.load(bad)
    (merged,) = [t for t in proto.graph.initializer if t.name == name]
    moved = numpy_helper.to_array(merged).copy()
    for _ in range(38):  # 2 ulps already
        moved.reshape(-1)[0] = np.nextafter(moved.reshape(-1)[0], np.float32(np.inf))
    weights = {t.name: numpy_helper.to_array(t) for t in onnx.load(a).graph.initializer}
    true = np.concatenate([weights[w] for w in ("Wq", "Wk", "Wv")], axis=-1)
    assert true.shape == moved.shape
    forged = helper.make_graph(
        [helper.make_node("Concat", ["Wq", "Wk", "Wv"], ["joined"], axis=-1),
         helper.make_node("Add", ["joined", "delta"], ["made"])], "recipe", [], [],
        [numpy_helper.from_array(moved - true, "delta")])
    for w in ("Wq", "Wk", "Wv"):
        forged.value_info.append(onnx.ValueInfoProto(name=w))
    _merged_with_recipe(tmp_path, forged, {provenance.MADE_BY: "merge_shared_input_matmuls"})
    proto = onnx.load(bad)  # the tensor the forged recipe computes: 40 ulps off
    (merged,) = [t for t in proto.graph.initializer if t.name == name]
    merged.raw_data = moved.tobytes()
    onnx.save(proto, bad)
    for window in (None, 1):
        result = onnxfold.compare(str(a), str(bad), n=2, window_bytes=window)
        (verdict,) = [t for t in result.folds.tensors if t.name == name]
        assert verdict.state == "not verifiable" and "holds a constant delta" in \
            verdict.reason, result.summary()
        assert not result.ok or "not a full verification" in result.verdict(), result.summary()


@pytest.mark.parametrize("claim", [provenance.MADE_BY, provenance.REWIRED])
def test_a_rewrite_s_tag_in_a_file_proves_nothing(tmp_path, claim):
    """A float tensor tagged as a rewrite's parameter (made_by), or rewired, with no recipe
    the check accepts, is never verified by its tag, nor made a parameter of the windows that
    read it (their tolerance would excuse what the tag claims): moved 4 ulps, inside a
    MatMul's tolerance, it is not verifiable and the verdict not full, as without the tag (a
    tag may only make a verdict stricter; issue 82). Swapped with another weight's values:
    the window that reads it differs, and compare and verify-folds exit 1 naming it."""
    a, bad, name, arr = _merged_with_recipe(tmp_path, None, {claim: "some_rule"})
    result = onnxfold.compare(str(a), str(bad), n=2)
    (verdict,) = [t for t in result.folds.tensors if t.name == name]
    assert verdict.state == "not verifiable" and result.ok, result.summary()
    assert "not a full verification" in result.verdict(), result.summary()
    proto = onnx.load(bad)
    merged = next(t for t in proto.graph.initializer if t.name == name)
    merged.CopyFrom(numpy_helper.from_array(np.roll(arr, 1, axis=-1), name))
    onnx.save(proto, bad)
    for command in (("compare", a, bad, "-n", "1"), ("verify-folds", a, bad)):
        proc = run_cli(*command)
        assert proc.returncode == 1 and "DIFFERS rewritten at" in proc.stdout, proc.stdout


def _reshaped(path) -> None:
    """y = Reshape(x, Concat(Shape(x)[:2], [-1, 2])): the target a Concat computes."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], end=2),
             helper.make_node("Concat", ["s", "tail"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    onnx.save(make_model(nodes, [vinfo("x", F32, [2, 3, 4])], [vinfo("y", F32, [2, 3, 2, 2])],
                         [tensor("tail", np.array([-1, 2], np.int64))]), path)


@pytest.mark.parametrize("provenance_kept", ["none", "file", "tensor"])
def test_a_value_kept_under_an_original_name_is_judged_by_who_made_the_model(tmp_path,
                                                                          provenance_kept):
    """onnxruntime's optimizer writes a Reshape target as [0, 0, -1, 2] ("copy this dim")
    under the Concat's name: the same meaning, other values. From a model without onnxfold's
    provenance that is not verifiable, not a failure; nor where the model carries onnxfold's
    provenance but the target none (onnxfold carried it through from its input, the
    optimizer's output: export -> optimizer -> onnxfold); where the target itself is recorded
    as onnxfold's fold, it must hold the original's values: it differs. Held in a Constant
    node or an initializer alike."""
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    _reshaped(a)
    proto = onnx.load(a)
    del proto.graph.node[:2]
    target = tensor("target", np.array([0, 0, -1, 2], np.int64))
    if provenance_kept == "tensor":  # an initializer recorded as a fold
        target.metadata_props.add(key=provenance.FOLDED_FROM, value="Concat")
        proto.graph.initializer.append(target)
    else:
        proto.graph.node.insert(0, helper.make_node("Constant", [], ["target"], value=target))
    if provenance_kept == "file":
        proto.graph.initializer[0].metadata_props.add(key=provenance.FOLDED_FROM, value="x")
    onnx.save(proto, b)
    result = onnxfold.compare(str(a), str(b), n=1)
    (verdict,) = [t for t in result.folds.tensors if t.name == "target"]
    if provenance_kept == "tensor":
        assert verdict.state == "differs" and not result.ok, result.summary()
    else:
        assert verdict.state == "not verifiable" and result.ok, result.summary()
        assert "not a full verification" in result.verdict()
        # the file's window compared where the Reshape reads the target, and said
        assert "compared where they are read (1): values the file holds in another form " \
            "under the original's name (target)" in result.summary(), result.summary()


def test_a_wrong_fold_with_its_metadata_stripped_still_differs(tmp_path):
    """The exemption for another tool's Reshape targets (0 and -1 where the original computes
    the dim) covers those codes in those targets only: a wrong fold whose provenance was
    stripped (no onnxfold metadata left anywhere) differs by name, as it did with it; so does
    a Reshape target that holds other numbers than 0 and -1."""
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    _embeddings(a, 1, 16)
    _baked(a, b, "word_emb", np.zeros((1, 16, 4), np.float32), {})
    result = onnxfold.compare(str(a), str(b), n=1)
    (verdict,) = [t for t in result.folds.tensors if t.name == "word_emb"]
    assert verdict.state == "differs" and not result.ok, result.summary()
    _reshaped(a)
    proto = onnx.load(a)
    del proto.graph.node[:2]
    proto.graph.node.insert(0, helper.make_node("Constant", [], ["target"], value=tensor(
        "target", np.array([2, 3, 1, 4], np.int64))))
    onnx.save(proto, b)
    result = onnxfold.compare(str(a), str(b), n=1)
    (verdict,) = [t for t in result.folds.tensors if t.name == "target"]
    assert verdict.state == "differs", result.summary()


def test_a_changed_constant_inside_a_branch_is_counted(tmp_path):
    """An If branch's Constant node that the original holds with other bytes is listed as
    not verifiable (only the comparison on inputs covers it), with or without provenance."""
    branch = lambda value: helper.make_graph(  # noqa: E731
        [helper.make_node("Constant", [], ["c"], value=tensor("c", np.array(value, np.float32))),
         helper.make_node("Add", ["x", "c"], ["r"])], "branch", [], [vinfo("r", F32, [2])])
    def model(value):
        nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
                 helper.make_node("Greater", ["total", "zero"], ["positive"]),
                 helper.make_node("If", ["positive"], ["y"], then_branch=branch(value),
                                  else_branch=branch([0.0, 0.0]))]
        return make_model(nodes, [vinfo("x", F32, [2])], [vinfo("y", F32, [2])],
                          [tensor("zero", np.float32(0))])
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(model([1.0, 2.0]), a)
    onnx.save(model([1.0, 2.0000002]), b)
    result = onnxfold.compare(str(a), str(b), n=2)
    nested = [t for t in result.folds.tensors if "If branch" in t.reason]
    assert len(nested) == 1 and nested[0].state == "not verifiable", result.summary()
    assert not result.folds.complete
    same = onnxfold.compare(str(a), str(a), n=1)
    assert same.folds.tensors == [] and same.folds.complete


def _overridable_scale(path) -> None:
    """y = x * (scale * 3), ``scale`` an initializer that is also a graph input (IR 4 on: a
    default a caller may override)."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["scale", "three"], ["s3"]),
         helper.make_node("Mul", ["x", "s3"], ["y"])], "g",
        [vinfo("x", F32, ["n", 4]), vinfo("scale", F32, [])], [vinfo("y", F32, ["n", 4])],
        [tensor("scale", np.array(2.0, np.float32)), tensor("three", np.array(3.0, np.float32))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_an_overridable_initializer_is_overridden_in_the_comparison(tmp_path):
    """From the second input set on, the original's overridable initializers are fed moved a
    little: a second model that keeps ``scale`` as an input but ignores it (a baked 6) fails;
    onnxfold's own output passes; one that fixed it (--inputs-are-constant) passes with a
    note and not as a full verification."""
    a, ignores = tmp_path / "a.onnx", tmp_path / "ignores.onnx"
    _overridable_scale(a)
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["s3"], value=tensor("s3", np.array(6.0, np.float32))),
         helper.make_node("Mul", ["x", "s3"], ["y"])], "g",
        [vinfo("x", F32, ["n", 4]), vinfo("scale", F32, [])], [vinfo("y", F32, ["n", 4])],
        [tensor("scale", np.array(2.0, np.float32))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), ignores)
    result = onnxfold.compare(str(a), str(ignores), n=2)
    assert not result.ok and "y" in result.failing, result.summary()
    assert "scale (initializers a caller may override) fed from input set 2 on" in \
        result.summary()
    proc = run_cli("optimize", a, "-o", tmp_path / "o.onnx", "--check", "2")
    assert proc.returncode == 0 and "fixed by the second model" not in proc.stdout, proc.stdout
    proc = run_cli("optimize", a, "-o", tmp_path / "c.onnx", "--check", "2",
                   "--inputs-are-constant")
    last = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0 and "scale (overridable in the original) fixed by the second " \
        "model: compared at the default only" in last and "not a full verification" in last


_EQUAL_NEVER_HOLDS = """
import dataclasses, json, sys
from tools import mutants

def plant(catalogue):
    # Equal(d, c) of a dynamic dim and a constant taken as false: batch == 7 folded away
    from onnxfold.analysis.dim_algebra import Known
    from onnxfold.declare.registry import ShapeValueRule

    def wrap(fn):
        def equal(step):
            known = fn(step)
            if known is None or known.is_constant:
                return known
            return Known(tuple(int(e) if isinstance(e, int) else 0 for e in known.elements),
                         known.scalar, known.dtype)
        return equal

    return dataclasses.replace(catalogue, rules=tuple(
        dataclasses.replace(r, fn=wrap(r.fn)) if isinstance(r, ShapeValueRule) and
        r.op_type == "Equal" else r for r in catalogue.rules))

mutants.MUTANTS["equal_never_holds"] = mutants.Mutant("equal_never_holds", "", plant)
mutants.planted("equal_never_holds")
import onnx
import onnxfold
from onnx import numpy_helper
a, b = sys.argv[1:3]
onnxfold.optimize(a).save(b)
baked = [i.name for i in onnx.load(b).graph.initializer
         if i.name in ("k", "kf") and numpy_helper.to_array(i).item() == 4]
result = onnxfold.compare(a, b, n=3)
verdicts = {t.name: [t.state, t.dims] for t in result.folds.tensors}
print(json.dumps({"baked": baked, "verdicts": verdicts, "ok": result.ok,
                  "last": result.summary().splitlines()[-1]}))
"""


def test_a_shape_bug_wrong_only_at_dims_not_sampled_is_never_certified(tmp_path):
    """``Where(Equal(batch, 7), 5, 4)`` scales the input: a bug in the fold's shape code that
    takes ``batch == 7`` as false folds it to 4, right at every batch the check samples but 7.
    Planted as the mutation tier plants bugs (``tools.mutants.planted``: every catalogue the
    process loads, the check's too), it is not shared by the check's own dim prover: the
    folded tensor is sampled, never "verified for every input", and the verdict says the
    verification is not full (the prover before, which read the rules' shape steps,
    certified it bitwise and proved)."""
    import json
    from pathlib import Path

    from tests.support.cli import run_python

    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["b"]),
             helper.make_node("Equal", ["b", "seven"], ["e"]),
             helper.make_node("Where", ["e", "five", "four"], ["k"]),
             helper.make_node("Cast", ["k"], ["kf"], to=F32),
             helper.make_node("Mul", ["x", "kf"], ["out"])]
    scalars = [tensor(name, np.array(v, np.int64))
               for name, v in (("zero", 0), ("seven", 7), ("five", 5), ("four", 4))]
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(make_model(nodes, [vinfo("x", F32, ["batch", 4])],
                         [vinfo("out", F32, ["batch", 4])], scalars), a)
    done = run_python("-c", _EQUAL_NEVER_HOLDS, a, b, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["baked"], "the planted bug folds the scale to 4"
    state, dims = found["verdicts"][found["baked"][0]]
    assert state in ("sampled", "differs") and dims != "proved", found
    assert not found["ok"] or "not a full verification" in found["last"], found
