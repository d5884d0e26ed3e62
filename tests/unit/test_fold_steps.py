"""The three steps of a graph's fold, each on its own: plan (pure), evaluate (into the pool),
materialize (kept values become constants); and what a fold counts as folded."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper

from onnxfold.analysis.constness import plan_graph
from onnxfold.analysis.declines import DeclineKind
from onnxfold.analysis.shapes import infer_shapes
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.fold.evaluate import Evaluator
from onnxfold.fold.materialize import as_initializer, materialize
from onnxfold.fold.plan import needed_only, plan_fold
from onnxfold.fold.pool import BufferPool
from onnxfold.fold.settings import Evaluation, SizePolicy
from onnxfold.io.reader import model_from_proto
from onnxfold.ir.provenance import FOLDED_FROM as PROVENANCE_KEY
from onnxfold.ir.provenance import ROUNDING as ROUNDING_KEY
from onnxfold.pipeline.options import FoldOptions
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import fold_proto, run_ort

W = np.arange(12, dtype=np.float32).reshape(3, 4) / 5


def _chain_and_tile() -> ir.Model:
    """w -> Transpose -> Neg (read by MatMul), and v -> Tile (x16) -> Abs (read by Add): the
    growth policy refuses the Tile and the Abs."""
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0], name="tr"),
             helper.make_node("Neg", ["wt"], ["n"], name="neg"),
             helper.make_node("MatMul", ["x", "n"], ["y"], name="mm"),
             helper.make_node("Tile", ["v", "reps"], ["big"], name="tile"),
             helper.make_node("Abs", ["big"], ["abig"], name="abs"),
             helper.make_node("Add", ["z", "abig"], ["u"], name="add")]
    proto = make_model(nodes, [vinfo("x", shape=[2, 4]), vinfo("z", shape=[12, 16])],
                       [vinfo("y", shape=[2, 3]), vinfo("u", shape=[12, 16])],
                       [tensor("w", W), tensor("v", W), tensor("reps", np.array([4, 4], np.int64))])
    model = model_from_proto(proto, check=False)
    infer_shapes(model)  # the growth policy judges static sizes
    return model


def _plan(model: ir.Model, policy: SizePolicy):
    facts = load_catalogue()
    const = plan_graph(model.graph, model.ir_version, (), facts=facts)
    return plan_fold(const, model.graph, model, policy, facts, facts.shape_only, 17)


def test_the_plan_says_what_folds_and_why_not_and_changes_nothing():
    model = _chain_and_tile()
    before = ir.serde.serialize_model(model).SerializeToString()
    plan = _plan(model, SizePolicy(growth_min_bytes=0))
    assert ir.serde.serialize_model(model).SerializeToString() == before
    assert [n.name for n in plan.order] == ["tr", "neg"]
    assert sorted((n.name, r.kind) for n, r in plan.refused) == [
        ("abs", DeclineKind.GROWTH), ("tile", DeclineKind.GROWTH)]
    graph = model.graph
    assert plan.readers[graph.initializers["w"]] == 1  # the planned Transpose
    assert plan.readers[graph.initializers["v"]] == 0  # read by the refused Tile only
    assert plan.growth_bytes == 0


def test_a_node_downstream_of_a_growth_refusal_is_left_out_of_the_plan():
    """The Tile grows the model and is refused; the ReduceSum of its result is small (no growth
    of its own) but can no longer fold: it is not planned, nor refused."""
    nodes = [helper.make_node("Tile", ["v", "reps"], ["big"], name="tile"),
             helper.make_node("Abs", ["big"], ["abig"], name="abs"),
             helper.make_node("ReduceSum", ["big", "axes"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Add", ["z", "abig"], ["u"], name="add"),
             helper.make_node("Add", ["x", "s"], ["y"], name="add2")]
    proto = make_model(nodes, [vinfo("x", shape=[16]), vinfo("z", shape=[12, 16])],
                       [vinfo("y", shape=[16]), vinfo("u", shape=[12, 16])],
                       [tensor("v", W), tensor("reps", np.array([4, 4], np.int64)),
                        tensor("axes", np.array([0], np.int64))])
    model = model_from_proto(proto, check=False)
    infer_shapes(model)
    plan = _plan(model, SizePolicy(growth_min_bytes=100))  # the sum's 64 B are under it
    assert plan.order == []
    assert sorted((n.name, r.kind) for n, r in plan.refused) == [
        ("abs", DeclineKind.GROWTH), ("tile", DeclineKind.GROWTH)]
    assert not plan.readers


def test_the_plan_holds_what_each_foldable_node_reads():
    """A shape-only fold reads its input's buffer only when that input is constant; another
    node reads each distinct input once (Mul(wt, wt) reads wt once)."""
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0], name="tr"),
             helper.make_node("Mul", ["wt", "wt"], ["sq"], name="sq"),
             helper.make_node("Shape", ["sq"], ["s1"], name="shape_of_constant"),
             helper.make_node("Shape", ["x"], ["s2"], name="shape_of_input"),
             helper.make_node("Concat", ["s1", "s2"], ["s"], axis=0, name="cat")]
    proto = make_model(nodes, [vinfo("x", shape=[2, 4])], [vinfo("s", TensorProto.INT64, [4])],
                       [tensor("w", W)])
    model = model_from_proto(proto, check=False)
    infer_shapes(model)
    plan = _plan(model, SizePolicy())
    reads = {n.name: [v.name for v in plan.reads(n)] for n in plan.order}
    assert reads == {"tr": ["w"], "sq": ["wt"], "shape_of_constant": ["sq"],
                     "shape_of_input": [], "cat": ["s1", "s2"]}
    assert {v.name: n for v, n in plan.readers.items()} == {"w": 1, "wt": 1, "sq": 1, "s1": 1,
                                                            "s2": 1}


def test_evaluate_then_materialize_writes_only_what_the_graph_keeps():
    model = _chain_and_tile()
    policy = SizePolicy(growth_min_bytes=0)
    plan = _plan(model, policy)
    pool = BufferPool()
    evaluated = Evaluator(plan, model.graph, model, Evaluation(strict=True), load_catalogue(), pool,
                          dict(model.opset_imports)).run()
    assert {n.name: how for n, how in evaluated.how.items()} == {"tr": "native",
                                                                 "neg": "native"}
    assert [v.name for v in evaluated.keep] == ["n"]  # wt died in the pool
    assert sorted(n.name for n, _ in evaluated.declined) == ["abs", "tile"]
    np.testing.assert_array_equal(pool.get(next(iter(evaluated.keep))), -W.T)
    done = materialize(evaluated, plan, model.graph, pool, policy,
                       as_initializer(model.graph, model))
    assert (done.stored, done.stored_bytes, done.refused) == (1, W.nbytes, [])
    assert len(pool) == 0
    stored = model.graph.initializers["n"]
    assert stored.const_value is not None
    assert stored.const_value.metadata_props[PROVENANCE_KEY] == "neg,tr"
    assert model.graph.node("mm").inputs[1] is stored


def test_a_result_the_expansion_bound_refuses_is_not_counted_as_folded(tmp_path):
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
             helper.make_node("Add", ["x", "big"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[1024, 1024])], [vinfo("y", shape=[1024, 1024])],
                       [tensor("shape", np.array([1024, 1024], np.int64))])
    folded, report, out = fold_proto(proto, tmp_path, FoldOptions(growth_factor=None,
                                                                  strict=True))
    assert [n.op_type for n in folded.graph.node] == ["ConstantOfShape", "Add"]
    assert (report.folded_nodes, report.folded_native, report.new_initializers) == (0, 0, 0)
    assert report.declined == {"size": 1}
    x = np.ones((1024, 1024), np.float32)
    np.testing.assert_array_equal(run_ort(proto, {"x": x})[0], run_ort(out, {"x": x})[0])
    onnx.checker.check_model(folded)


def _with_unread_branch() -> ir.Model:
    """``n = Neg(w)`` read by ``y = MatMul(x, n)`` and by ``Abs(n) -> Exp`` that nothing reads,
    and a Loop whose body reads ``t = Transpose(w)`` (only there)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Add", ["acc", "t"], ["acc_out"])], "body",
        [vinfo("i", TensorProto.INT64, []), vinfo("cond", TensorProto.BOOL, []),
         vinfo("acc", shape=[4, 3])],
        [vinfo("cond_out", TensorProto.BOOL, []), vinfo("acc_out", shape=[4, 3])])
    nodes = [helper.make_node("Neg", ["w"], ["n"], name="neg"),
             helper.make_node("MatMul", ["x", "n"], ["y"], name="mm"),
             helper.make_node("Abs", ["n"], ["a"], name="abs"),
             helper.make_node("Exp", ["a"], ["e"], name="exp"),
             helper.make_node("Transpose", ["w"], ["t"], name="tr", perm=[1, 0]),
             helper.make_node("Loop", ["trips", "", "z"], ["u"], name="loop", body=body)]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3]), vinfo("z", shape=[4, 3])],
                       [vinfo("y", shape=[2, 4]), vinfo("u", shape=[4, 3])],
                       [tensor("w", W), tensor("trips", np.array(2, np.int64))])
    model = model_from_proto(proto, check=False)
    infer_shapes(model)
    return model


def test_nodes_whose_results_nothing_needs_are_not_evaluated():
    """Abs and Exp compute what nothing reads: evaluated, their results would be dropped; the
    Transpose a subgraph reads is needed, and so is Neg, which MatMul reads beside Abs."""
    model = _with_unread_branch()
    plan = _plan(model, SizePolicy())
    assert [n.name for n in plan.order] == ["neg", "abs", "exp", "tr"]
    needed = needed_only(plan, model.graph)
    assert [n.name for n in needed.order] == ["neg", "tr"]
    assert sorted(n.name for n in needed.unneeded) == ["abs", "exp"]
    assert {v.name: n for v, n in needed.readers.items()} == {"w": 2}
    pool = BufferPool()
    evaluated = Evaluator(needed, model.graph, model, Evaluation(strict=True), load_catalogue(),
                          pool, dict(model.opset_imports)).run()
    assert sorted(n.name for n in evaluated.how) == ["neg", "tr"]
    assert sorted(v.name for v in evaluated.keep) == ["n", "t"]  # Abs does not keep n
    materialize(evaluated, needed, model.graph, pool, SizePolicy(),
                as_initializer(model.graph, model))
    assert len(pool) == 0


def test_a_fold_leaves_unneeded_nodes_to_the_prune(tmp_path):
    proto = ir.serde.serialize_model(_with_unread_branch())
    folded, report, out = fold_proto(proto, tmp_path)
    assert [n.op_type for n in folded.graph.node] == ["MatMul", "Loop"]
    assert report.folded_nodes == 2  # Neg and Transpose; Abs and Exp were pruned unevaluated
    assert report.unneeded_nodes == 2
    x, z = np.ones((2, 3), np.float32), np.ones((4, 3), np.float32)
    for got, want in zip(run_ort(out, {"x": x, "z": z}), run_ort(proto, {"x": x, "z": z})):
        np.testing.assert_array_equal(got, want)


def test_what_a_fallback_batch_computes_within_it_keeps_its_provenance(tmp_path):
    """Softplus and Elu have no native rule: onnxruntime runs them in one session, which hands
    back only Elu's result. The stored constant still names every node it comes from, and is
    still marked as rounded by numpy (the Exp upstream is not bitwise onnxruntime's)."""
    nodes = [helper.make_node("Exp", ["c"], ["x_exp"], name="exp"),
             helper.make_node("Softplus", ["x_exp"], ["s"], name="softplus"),
             helper.make_node("Elu", ["s"], ["e"], name="elu"),
             helper.make_node("Add", ["x", "e"], ["y"], name="add")]
    proto = make_model(nodes, [vinfo("x", shape=[4])], [vinfo("y", shape=[4])],
                       [tensor("c", np.array([0.5, -1.0, 2.0, 0.0], np.float32))])
    folded, report, _ = fold_proto(proto, tmp_path)
    assert report.folded_fallback == 2 and report.fallback_sessions == 1
    (stored,) = folded.graph.initializer
    props = {p.key: p.value for p in stored.metadata_props}
    assert props[PROVENANCE_KEY] == "elu,softplus,exp"
    assert props[ROUNDING_KEY] == "numpy"
