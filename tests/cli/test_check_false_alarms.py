"""The check does not cry wolf where a correct model is fed or judged as it should be: ids
behind an exporter's negative-index arithmetic stay in their table, a cone whose types the
exporter left out is judged as floats, a fold more exact than onnxruntime's float32 sum is no
failure, nor a convolution's rounding where its sums cancel, nor a standardized weight's
cone whose kernel sums in an order of its own (running out of memory is
tests/adversarial/test_memory_cgroup.py's). Each on a model
built for it, real onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

import onnxfold
from onnxfold.check.folds.verification import verify_folds
from onnxfold.check.judging.exactness import exact
from onnxfold.check.running.cones import Cones, reinferred
from onnxfold.check.running.models import graph_of
from tests.support.models import make_model, tensor, vinfo

I64, I32, F32 = TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT


def test_ids_behind_negative_index_arithmetic_stay_in_their_table(tmp_path):
    """tf2onnx writes ``Gather(E, ids + n * (ids < 0))``: the ids reach the table through
    arithmetic of their own, and are fed below its 50 rows (they were fed up to 1,000, and
    onnxruntime refused every binding: exit 2 on a correct model)."""
    nodes = [helper.make_node("Cast", ["ids"], ["i64"], to=I64),
             helper.make_node("Less", ["i64", "zero"], ["negative"]),
             helper.make_node("Cast", ["negative"], ["as_int"], to=I64),
             helper.make_node("Mul", ["as_int", "rows"], ["shift"]),
             helper.make_node("Add", ["i64", "shift"], ["fixed"]),
             helper.make_node("Gather", ["E", "fixed"], ["e"]),
             helper.make_node("ReduceSum", ["e", "axes"], ["out"], keepdims=0)]
    path = tmp_path / "m.onnx"
    onnx.save(make_model(nodes, [vinfo("ids", I32, ["unk__1", "unk__2"])],
                         [vinfo("out", F32, ["unk__1", "unk__2"])],
                         [tensor("zero", np.array(0, np.int64)),
                          tensor("rows", np.array(50, np.int64)),
                          tensor("E", np.random.default_rng(0).standard_normal((50, 4))
                                 .astype(np.float32)),
                          tensor("axes", np.array([-1], np.int64))]), path)
    folded = tmp_path / "o.onnx"
    onnxfold.optimize(str(path)).save(str(folded))
    result = onnxfold.compare(str(path), str(folded), n=3)
    assert result.ok, result.summary()
    assert "random [0, 50) (token ids, size of the table they index)" in result.summary()


def test_a_cone_whose_types_the_exporter_left_out_is_judged_as_floats(tmp_path):
    """Exp of a constant with no value_info at all: the check infers the types again, and a
    value of unknown type counts as a float (judged within ulps, never as bits)."""
    nodes = [helper.make_node("Exp", ["c"], ["e"]),
             helper.make_node("Cast", ["e"], ["i"], to=I64),
             helper.make_node("Add", ["x", "e"], ["out"])]
    path = tmp_path / "m.onnx"
    onnx.save(make_model(nodes, [vinfo("x", F32, [3])], [vinfo("out", F32, [3])],
                         [tensor("c", np.array([0.5, 1.5, 2.5], np.float32))]), path)
    model = reinferred(graph_of(str(path), "m"))
    cones = Cones(model, list(model.graph.inputs))
    values = cones.values
    assert values["e"].dtype is not None and not exact(cones, values["e"])
    assert not exact(cones, values["i"])  # an integer, computed from an Exp: not bits either
    values["e"].type = None  # a type even inference cannot tell: a float, to be safe
    assert not exact(cones, values["e"])


def test_a_fold_more_exact_than_onnxruntime_is_not_a_failure(tmp_path):
    """ReduceMean of a million float32 values: onnxruntime's float32 sum is ~80 ulps from the
    exact mean, numpy's pairwise fold well under one. The fold is within, saying it is the
    closer of the two."""
    x = (np.random.default_rng(0).random(1_000_000) * 1000 + 1e4).astype(np.float32)
    nodes = [helper.make_node("ReduceMean", ["c"], ["m"], keepdims=0),
             helper.make_node("Add", ["x", "m"], ["out"])]
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(make_model(nodes, [vinfo("x", F32, [1])], [vinfo("out", F32, [1])],
                         [tensor("c", x)]), path)
    onnxfold.optimize(str(path)).save(str(out))
    verdict = next(t for t in verify_folds(str(path), str(out)).tensors if t.name == "m")
    assert verdict.state == "within", verdict
    assert verdict.reason.startswith("closer to the float64 value of ReduceMean than "
                                     "onnxruntime's float32"), verdict.reason


def test_a_folded_factor_in_a_convolution_is_no_failure_where_its_sums_cancel(tmp_path):
    """``Conv(x, W) * s`` becomes ``Conv(x, W * s)``: each product rounds differently, and an
    output element near zero that is the difference of large terms carries their rounding, a
    few ulps of the output's largest magnitude beyond rtol/atol there (PP-OCRv5's detector
    failed the rewrite validation for it)."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["c", "s"], ["out"])]
    model = make_model(nodes, [vinfo("x", F32, ["n", 64, 24, 24])],
                       [vinfo("out", F32, ["n", 32, 24, 24])],
                       [tensor("W", (rng.standard_normal((32, 64, 3, 3)) * 8).astype(np.float32)),
                        tensor("s", rng.uniform(0.5, 2, (1, 32, 1, 1)).astype(np.float32))])
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(model, path)
    result = onnxfold.optimize(str(path), record_rewrites=True)
    assert result.report.pattern_hits.get("fuse_mul_into_conv") == 1
    result.save(str(out))
    check = onnxfold.compare(str(path), str(out), n=3, evidence=result.evidence)
    assert check.ok, check.summary()
    assert check.rewrites is not None and check.rewrites.count("within") == 1


def test_a_chain_moved_between_reshapes_keeps_no_claim_on_its_names(tmp_path):
    """GPT-2's MLP: ``Reshape(gelu(Reshape(h, [b, s, 128])), [-1, 128])``. The rewrite that
    moves the elementwise chain onto the flat values rewires its nodes: their outputs keep
    their names but hold [b*s, 128] now. A later rewrite's window read them by name as the
    original's [b, s, 128] values: the clean check of GPT-2's dynamo export failed
    (``drop_noop at node_view_13: the replacement computes float32[1, 16, 128] where the
    window it replaced computes float32[16, 128]``)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Reshape", ["x", "flat"], ["x2"]),
             helper.make_node("MatMul", ["x2", "W"], ["h"]),
             helper.make_node("Slice", ["s", "zero", "two"], ["bs"]),
             helper.make_node("Concat", ["bs", "width"], ["target"], axis=0),
             helper.make_node("Reshape", ["h", "target"], ["h3"]),
             helper.make_node("Mul", ["h3", "half"], ["m"]),
             helper.make_node("Tanh", ["h3"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["t1"]),
             helper.make_node("Mul", ["m", "t1"], ["g"]),
             helper.make_node("Reshape", ["g", "flat"], ["g2"]),
             helper.make_node("MatMul", ["g2", "W"], ["out"])]
    model = make_model(nodes, [vinfo("x", F32, ["b", "s", 8])], [vinfo("out", F32, ["n", 8])],
                       [tensor("flat", np.array([-1, 8], np.int64)),
                        tensor("W", rng.standard_normal((8, 8)).astype(np.float32)),
                        tensor("zero", np.array([0], np.int64)),
                        tensor("two", np.array([2], np.int64)),
                        tensor("width", np.array([8], np.int64)),
                        tensor("half", np.array(0.5, np.float32)),
                        tensor("one", np.array(1.0, np.float32))])
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(model, path)
    result = onnxfold.optimize(str(path), record_rewrites=True)
    assert result.report.pattern_hits.get("elementwise_between_reshapes"), \
        result.report.pattern_hits
    result.save(str(out))
    check = onnxfold.compare(str(path), str(out), n=3, evidence=result.evidence)
    assert check.ok, check.summary()
    assert check.rewrites is not None and check.rewrites.count("differs") == 0


def _standardized_convolutions(rng: np.random.Generator, bias: bool = False) -> onnx.ModelProto:
    """Two weight-standardized convolutions (BiT's StdConv2d as TorchScript writes it: each
    weight reshaped to its rows, a training-mode BatchNormalization, reshaped back), Conv 3->16
    7x7, Relu, Conv 16->32 3x3; dynamic batch."""
    nodes, inits, x = [], [], "x"
    for k, (cin, cout, size) in enumerate(((3, 16, 7), (16, 32, 3))):
        bound = 1 / np.sqrt(cin * size * size)
        inits += [tensor(f"w{k}", rng.uniform(-bound, bound, (cout, cin, size, size))
                         .astype(np.float32)),
                  tensor(f"rows{k}", np.array([1, cout, -1], np.int64)),
                  tensor(f"back{k}", np.array([cout, cin, size, size], np.int64)),
                  tensor(f"one{k}", np.ones(cout, np.float32)),
                  tensor(f"zero{k}", np.zeros(cout, np.float32))]
        nodes += [helper.make_node("Reshape", [f"w{k}", f"rows{k}"], [f"r{k}"]),
                  helper.make_node("BatchNormalization", [f"r{k}", f"one{k}", f"zero{k}",
                                                          f"zero{k}", f"one{k}"],
                                   [f"n{k}", f"mean{k}", f"var{k}"], epsilon=1e-8,
                                   momentum=1.0, training_mode=1),
                  helper.make_node("Reshape", [f"n{k}", f"back{k}"], [f"s{k}"])]
        reads = [x, f"s{k}"]
        if bias:
            inits.append(tensor(f"b{k}", rng.uniform(-bound, bound, cout).astype(np.float32)))
            reads.append(f"b{k}")
        nodes.append(helper.make_node("Conv", reads, ["out" if k else "c"], pads=[size // 2] * 4))
        if not k:
            nodes.append(helper.make_node("Relu", ["c"], ["h"]))
            x = "h"
    return make_model(nodes, [vinfo("x", F32, ["batch", 3, 32, 32])],
                      [vinfo("out", F32, ["batch", 32, 32, 32])], inits)


def test_standardized_weights_are_no_failure_where_the_convolutions_sums_cancel(tmp_path):
    """Issue 67: a standardized weight near zero carries a large relative error, which the
    convolution's sums cancel; its outputs near zero differ beyond rtol/atol (66 of 196,608
    failed), within the magnitude of their terms. And the weight's cone, a training-mode
    BatchNormalization whose onnxruntime kernel sums in an order that follows its input's
    alignment, was held to bits (543 of 2,352 elements 'differ'): it is judged within (the
    fold now feeds the kernel 64-byte aligned as the check does, and is bitwise with it: the
    outputs' magnitudes are tested on a more exact fold below)."""
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_standardized_convolutions(np.random.default_rng(0)), path)
    result = onnxfold.optimize(str(path), record_rewrites=True)
    result.save(str(out))
    check = onnxfold.compare(str(path), str(out), n=3, evidence=result.evidence)
    assert check.ok, check.summary()
    assert check.folds is not None and len(check.folds.tensors) == 2
    # bitwise where the fold fed the kernel as the check does (64-byte aligned), else within
    assert {t.state for t in check.folds.tensors} <= {"bitwise", "within"}, check.summary()


def _exactly_standardized(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (:func:`_standardized_convolutions`) with each weight standardized in float64
    and rounded once: a fold more exact than onnxruntime's float32 kernel, whose outputs near
    zero differ from the original's by the rounding of the terms their sums cancel."""
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    kept = [n for n in model.graph.node if n.op_type in ("Conv", "Relu")]
    weights = []
    for k in range(2):
        w = inits[f"w{k}"].astype(np.float64)
        rows = w.reshape(w.shape[0], -1)
        mean, var = rows.mean(axis=1, keepdims=True), rows.var(axis=1, keepdims=True)
        weights.append(tensor(f"s{k}", ((rows - mean) / np.sqrt(var + 1e-8))
                              .reshape(w.shape).astype(np.float32)))
    return make_model(kept, list(model.graph.input), list(model.graph.output), weights)


def test_outputs_whose_terms_cancel_are_judged_by_their_magnitudes_whole_and_in_windows(
        tmp_path):
    """Issue 67: the outputs near zero of a more exact standardization differ from the
    original's beyond rtol/atol (a given ``rtol``/``atol`` means that formula alone, and it
    fails them), within 64 units of roundoff of the magnitude of their summed terms: the check
    passes them, whole and stage by stage (the original and its twins run in stages)."""
    path, exact = tmp_path / "m.onnx", tmp_path / "exact.onnx"
    model = _standardized_convolutions(np.random.default_rng(0))
    onnx.save(model, path)
    onnx.save(_exactly_standardized(model), exact)
    alone = onnxfold.compare(str(path), str(exact), n=3, rtol=1e-4, atol=1e-5)
    assert not alone.ok and alone.rows[0].mismatches > 0, alone.summary()
    for window_bytes in (None, 4096):
        check = onnxfold.compare(str(path), str(exact), n=3, window_bytes=window_bytes)
        assert check.ok and check.rows[0].summed > 0, check.summary()
        assert bool(check.windows) == (window_bytes is not None), check.summary()


def test_a_wrong_standardized_convolution_still_fails(tmp_path):
    """The same, biased, folded, then two elements of a folded weight swapped, or a bias
    dropped: the outputs alone (no fold verification) fail."""
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_standardized_convolutions(np.random.default_rng(1), bias=True), path)
    onnxfold.optimize(str(path)).save(str(out))
    folded = onnx.load(str(out))
    weights = {t.name: t for t in folded.graph.initializer}
    for name, wrong in (("s1", lambda a: a.reshape(-1)[[1, 0]]), ("b1", np.zeros_like)):
        planted = onnx.load(str(out))
        target = next(t for t in planted.graph.initializer if t.name == name)
        array = onnx.numpy_helper.to_array(weights[name]).copy()
        if name == "s1":
            array.reshape(-1)[[0, 1]] = wrong(array)
        else:
            array = wrong(array)
        target.CopyFrom(onnx.numpy_helper.from_array(array, name))
        bad = tmp_path / f"bad_{name}.onnx"
        onnx.save(planted, bad)
        check = onnxfold.compare(str(path), str(bad), n=3, verify=False)
        assert not check.ok and check.rows[0].mismatches > 0, (name, check.summary())
