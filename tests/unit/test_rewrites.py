"""Pattern rules (rules/rewrites.py) and cleanups (rules/cleanups.py), checked in onnxruntime."""

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.declare.catalogue import load_catalogue
from onnxfold.declare.pattern_rules import PatternRule
from onnxfold.pipeline.options import FoldOptions
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import assert_same_bits, fold_proto, run_ort

N = 1024  # [N, N] float32 is 4 MiB: over the expansion and growth bounds, so it never folds


def ops(proto):
    return [n.op_type for n in proto.graph.node]


def inits(proto):
    return {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


def assert_same(proto, out, feeds):
    for a, b in zip(run_ort(proto, feeds), run_ort(out, feeds)):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def node(proto, op):
    (found,) = [n for n in proto.graph.node if n.op_type == op]
    return found


# -- postpone_expand -----------------------------------------------------------------------------

def _expand_chain():
    c = np.arange(N, dtype=np.float32)
    nodes = [helper.make_node("Expand", ["c", "shape"], ["e"]),
             helper.make_node("Mul", ["e", "s"], ["m"]),
             helper.make_node("Add", ["m", "bias"], ["a"]),
             helper.make_node("Add", ["x", "a"], ["y"])]
    return make_model(nodes, [vinfo("x", shape=[N, N])], [vinfo("y", shape=[N, N])],
                      [tensor("c", c), tensor("shape", np.array([N, N], np.int64)),
                       tensor("s", np.float32(3)), tensor("bias", np.linspace(0, 1, N,
                                                                              dtype=np.float32))])


def test_postpone_expand_folds_the_chain_on_the_small_tensor(tmp_path):
    proto = _expand_chain()
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Expand", "Add"]
    assert report.pattern_hits == {"postpone_expand": 2}
    assert report.patterns_rejected == {}
    small = inits(folded)[node(folded, "Expand").input[0]]
    c = np.arange(N, dtype=np.float32)
    np.testing.assert_array_equal(small, c * np.float32(3) + np.linspace(0, 1, N,
                                                                         dtype=np.float32))
    assert report.initializer_bytes_after < report.initializer_bytes_before
    x = np.random.default_rng(0).standard_normal((N, N)).astype(np.float32)
    assert_same(proto, out, {"x": x})


def test_postpone_expand_can_be_disabled(tmp_path):
    proto = _expand_chain()
    folded, report, out = fold_proto(proto, tmp_path,
                                     FoldOptions(disabled_rules={"postpone_expand"}, strict=True))
    assert ops(folded) == ["Expand", "Mul", "Add", "Add"]
    assert report.pattern_hits == {}
    assert node(folded, "Expand").input[0] == "c"
    assert_same(proto, out, {"x": np.ones((N, N), np.float32)})


def test_postpone_expand_with_a_higher_rank_operand(tmp_path):
    n = 600  # Expand(c[1,n], [n,n]) + k[3,1,n]: the result is [3,n,n] either way
    c = np.arange(n, dtype=np.float32).reshape(1, n)
    k = np.arange(3 * n, dtype=np.float32).reshape(3, 1, n)
    nodes = [helper.make_node("Expand", ["c", "shape"], ["e"]),
             helper.make_node("Add", ["e", "k"], ["a"]),
             helper.make_node("Mul", ["x", "a"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[n, n])], [vinfo("y", shape=[3, n, n])],
                       [tensor("c", c), tensor("k", k),
                        tensor("shape", np.array([n, n], np.int64))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert report.pattern_hits == {"postpone_expand": 1}
    assert ops(folded) == ["Expand", "Mul"]
    assert inits(folded)[node(folded, "Expand").input[0]].shape == (3, 1, n)
    x = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    assert run_ort(out, {"x": x})[0].shape == (3, n, n)
    assert_same(proto, out, {"x": x})


def test_postpone_expand_leaves_a_dynamic_operand_alone(tmp_path):
    c = np.arange(N, dtype=np.float32).reshape(1, N)
    nodes = [helper.make_node("Expand", ["c", "shape"], ["e"]),
             helper.make_node("Mul", ["e", "x"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[N, 1])], [vinfo("y", shape=[N, N])],
                       [tensor("c", c), tensor("shape", np.array([N, N], np.int64))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Expand", "Mul", "Relu"]
    assert list(node(folded, "Expand").input) == ["c", "shape"]
    assert list(node(folded, "Mul").input) == ["e", "x"]
    assert report.pattern_hits == {}
    x = np.linspace(-1, 1, N, dtype=np.float32).reshape(N, 1)
    assert_same(proto, out, {"x": x})


def test_postpone_tile_with_a_scalar_operand(tmp_path):
    c = np.arange(N, dtype=np.float32).reshape(1, N)
    nodes = [helper.make_node("Tile", ["c", "reps"], ["t"]),
             helper.make_node("Mul", ["t", "s"], ["m"]),
             helper.make_node("Add", ["x", "m"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[N, N])], [vinfo("y", shape=[N, N])],
                       [tensor("c", c), tensor("reps", np.array([N, 1], np.int64)),
                        tensor("s", np.float32(-2))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Tile", "Add"]
    assert report.pattern_hits == {"postpone_expand": 1}
    np.testing.assert_array_equal(inits(folded)[node(folded, "Tile").input[0]], c * -2)
    x = np.random.default_rng(2).standard_normal((N, N)).astype(np.float32)
    assert_same(proto, out, {"x": x})


def test_postpone_tile_refuses_operands_that_change_the_result(tmp_path):
    # Tile(c[2,2], [512,512]) + bias[1024]: bias differs per tile element (c + bias is not even
    # valid); Tile(c[1024], [1024]) * k[1,1]: k adds a dimension the repeats do not cover
    c2 = np.arange(4, dtype=np.float32).reshape(2, 2)
    c1 = np.arange(N, dtype=np.float32)
    nodes = [helper.make_node("Tile", ["c2", "reps2"], ["t2"]),
             helper.make_node("Add", ["t2", "bias"], ["a2"]),
             helper.make_node("Add", ["x", "a2"], ["y"]),
             helper.make_node("Tile", ["c1", "reps1"], ["t1"]),
             helper.make_node("Mul", ["t1", "k"], ["m1"]),
             helper.make_node("Add", ["z", "m1"], ["w"])]
    proto = make_model(nodes, [vinfo("x", shape=[N, N]), vinfo("z", shape=[1, N * N])],
                       [vinfo("y", shape=[N, N]), vinfo("w", shape=[1, N * N])],
                       [tensor("c2", c2), tensor("reps2", np.array([N // 2, N // 2], np.int64)),
                        tensor("bias", np.arange(N, dtype=np.float32) * 0.25),
                        tensor("c1", c1), tensor("reps1", np.array([N], np.int64)),
                        tensor("k", np.full((1, 1), 0.5, np.float32))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ops(proto)
    assert report.pattern_hits == {}
    assert report.patterns_rejected == {"postpone_expand: Tile with a non-scalar operand": 2}
    assert [list(n.input) for n in folded.graph.node] == [list(n.input) for n in proto.graph.node]
    rng = np.random.default_rng(3)
    assert_same(proto, out, {"x": rng.standard_normal((N, N)).astype(np.float32),
                             "z": rng.standard_normal((1, N * N)).astype(np.float32)})


# -- constant_of_shape_as_expand ------------------------------------------------------------------

def test_constant_of_shape_becomes_an_expand_of_a_folded_scalar(tmp_path):
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["cs"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.0])),
             helper.make_node("Mul", ["cs", "three"], ["m"]),
             helper.make_node("Add", ["x", "m"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[N, N])], [vinfo("y", shape=[N, N])],
                       [tensor("shape", np.array([N, N], np.int64)),
                        tensor("three", np.float32(3))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Expand", "Add"]
    assert report.pattern_hits == {"constant_of_shape_as_expand": 1, "postpone_expand": 1}
    scalar = inits(folded)[node(folded, "Expand").input[0]]
    assert scalar.shape == () and scalar.dtype == np.float32 and scalar == 6.0
    assert sum(a.nbytes for a in inits(folded).values()) <= 32
    x = np.random.default_rng(4).standard_normal((N, N)).astype(np.float32)
    assert_same(proto, out, {"x": x})
    folded, _, _ = fold_proto(proto, tmp_path, FoldOptions(
        disabled_rules={"constant_of_shape_as_expand"}, strict=True))
    assert ops(folded) == ["ConstantOfShape", "Mul", "Add"]


# -- merges and no-ops on dynamic values ----------------------------------------------------------

def test_merge_transposes_on_a_dynamic_value(tmp_path):
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 0, 2]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]),
             helper.make_node("Relu", ["t2"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3, 4])], [vinfo("y", shape=[3, 4, 2])])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Transpose", "Relu"]
    assert list(node(folded, "Transpose").attribute[0].ints) == [1, 2, 0]
    assert report.pattern_hits == {"merge_transposes": 1}
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 10
    assert_same(proto, out, {"x": x})
    np.testing.assert_array_equal(run_ort(out, {"x": x})[0],
                                  np.maximum(x.transpose(1, 2, 0), 0))


def test_cancelling_transposes_disappear(tmp_path):
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 2, 0]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[2, 0, 1]),
             helper.make_node("Relu", ["t2"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3, 4])], [vinfo("y", shape=[2, 3, 4])])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Relu"] and list(folded.graph.node[0].input) == ["x"]
    assert report.pattern_hits == {"merge_transposes": 1}
    assert_same(proto, out, {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 10})
    folded, _, _ = fold_proto(proto, tmp_path, FoldOptions(disabled_rules={"merge_transposes"},
                                                           strict=True))
    assert ops(folded) == ["Transpose", "Transpose", "Relu"]


def test_merge_transposes_keeps_a_first_transpose_that_is_used_elsewhere(tmp_path):
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 0]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0]),
             helper.make_node("Relu", ["t2"], ["y"]),
             helper.make_node("Neg", ["t1"], ["z"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3])],
                       [vinfo("y", shape=[2, 3]), vinfo("z", shape=[3, 2])])
    folded, _, out = fold_proto(proto, tmp_path)
    assert sorted(ops(folded)) == ["Neg", "Relu", "Transpose"]
    assert list(node(folded, "Relu").input) == ["x"]
    assert_same(proto, out, {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 3})


@pytest.mark.parametrize("source", ["input", "computed"])
def test_an_identity_pair_of_transposes_at_a_graph_output_leaves_at_most_one_node(tmp_path,
                                                                                   source):
    """Transpose(Transpose(x, p), p^-1) as the graph's output: gone where x may be the output
    (a node of the graph computes it), one Identity where it may not (x is an input); it
    used to stay, two nodes, declined for the output."""
    first = [helper.make_node("Relu", ["x"], ["r"])] if source == "computed" else []
    src = "r" if first else "x"
    nodes = [*first, helper.make_node("Transpose", [src], ["t1"], perm=[1, 2, 0]),
             helper.make_node("Transpose", ["t1"], ["y"], perm=[2, 0, 1])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3, 4])], [vinfo("y", shape=[2, 3, 4])])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == (["Relu"] if first else ["Identity"])
    assert report.pattern_hits == {"merge_transposes": 1}
    assert [o.name for o in folded.graph.output] == ["y"]
    assert_same(proto, out, {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 10})


@pytest.mark.parametrize("op", ["Slice", "Tile"])
def test_a_static_no_op_slice_or_tile_goes_like_its_dynamic_twin(tmp_path, op):
    """A full-range Slice and a Tile by ones of a static [2, 3] x are their input, as they
    are for an [n, 3] x: both go (the static one used to stay, left to a static rule that
    does not take Slice or Tile)."""
    for shape in ([2, 3], ["n", 3]):
        ins = ["x", "start", "end", "axis"] if op == "Slice" else ["x", "reps"]
        nodes = [helper.make_node(op, ins, ["c"]), helper.make_node("Relu", ["c"], ["y"])]
        proto = make_model(nodes, [vinfo("x", shape=shape)], [vinfo("y", shape=shape)],
                           [tensor("start", np.array([0], np.int64)),
                            tensor("end", np.array([2**62], np.int64)),
                            tensor("axis", np.array([0], np.int64)),
                            tensor("reps", np.array([1, 1], np.int64))])
        folded, report, out = fold_proto(proto, tmp_path)
        assert ops(folded) == ["Relu"] and report.pattern_hits == {"drop_noop": 1}, shape
        assert_same(proto, out, {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 3})


def test_merge_reshapes_on_a_dynamic_value(tmp_path):
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["r1"]),
             helper.make_node("Reshape", ["r1", "s2"], ["r2"]),
             helper.make_node("Relu", ["r2"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3, 4])], [vinfo("y", shape=[4, 6])],
                       [tensor("s1", np.array([6, 4], np.int64)),
                        tensor("s2", np.array([4, -1], np.int64))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Reshape", "Relu"]
    assert list(node(folded, "Reshape").input) == ["x", "s2"]
    assert report.pattern_hits == {"merge_reshapes": 1}
    assert_same(proto, out, {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 10})


def test_merge_reshapes_writes_a_copied_static_dim(tmp_path):
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["r1"]),
             helper.make_node("Reshape", ["r1", "s2"], ["r2"]),
             helper.make_node("Relu", ["r2"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3, 4])], [vinfo("y", shape=[6, 4])],
                       [tensor("s1", np.array([6, 2, 2], np.int64)),
                        tensor("s2", np.array([0, -1], np.int64))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Reshape", "Relu"]
    assert list(inits(folded)[node(folded, "Reshape").input[1]]) == [6, -1]
    assert report.pattern_hits == {"merge_reshapes": 1}
    assert_same(proto, out, {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4)})


def test_merge_reshapes_keeps_a_target_that_copies_dimensions(tmp_path):
    # the 0 copies 3 * N, not x's N
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["r1"]),
             helper.make_node("Reshape", ["r1", "s2"], ["r2"]),
             helper.make_node("Relu", ["r2"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["N", 3, 4])], [vinfo("y", shape=[None, 4])],
                       [tensor("s1", np.array([-1, 2, 2], np.int64)),
                        tensor("s2", np.array([0, -1], np.int64))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Reshape", "Reshape", "Relu"]
    assert report.patterns_rejected == {
        "merge_reshapes: target shape copies dimensions (0 entries)": 1}
    for n in (1, 2):
        assert_same(proto, out, {"x": np.arange(n * 12, dtype=np.float32).reshape(n, 3, 4)})


def test_drop_noop_cast_reshape_expand_pad(tmp_path):
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=TensorProto.FLOAT),
             helper.make_node("Reshape", ["c", "same"], ["r"]),
             helper.make_node("Expand", ["r", "same"], ["e"]),
             helper.make_node("Pad", ["e", "zeros"], ["p"]),
             helper.make_node("Relu", ["p"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3])], [vinfo("y", shape=[2, 3])],
                       [tensor("same", np.array([2, 3], np.int64)),
                        tensor("zeros", np.zeros(4, np.int64))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Relu"] and list(folded.graph.node[0].input) == ["x"]
    assert report.pattern_hits == {"drop_noop": 4}
    assert_same(proto, out, {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 3})
    folded, _, _ = fold_proto(proto, tmp_path, FoldOptions(disabled_rules={"drop_noop"},
                                                           strict=True))
    assert ops(folded) == ops(proto)


def test_drop_noop_keeps_real_casts_and_reshapes(tmp_path):
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=TensorProto.INT32),
             helper.make_node("Reshape", ["c", "other"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3])], [vinfo("y", TensorProto.INT32, [3, 2])],
                       [tensor("other", np.array([3, 2], np.int64))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Cast", "Reshape"] and report.pattern_hits == {}
    assert_same(proto, out, {"x": np.arange(6, dtype=np.float32).reshape(2, 3) * 1.5})


def test_drop_noop_by_symbolic_dims_too(tmp_path):
    """One rule removes a no-op whether static shapes or symbolic dims show it: a full-range
    Slice and an Expand to x's own dims of a dynamic x go as ``drop_noop``, and disabling
    ``drop_noop`` keeps both."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Expand", ["x", "s"], ["e"]),
             helper.make_node("Slice", ["e", "start", "end", "axis"], ["c"]),
             helper.make_node("Relu", ["c"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["n", 3])], [vinfo("y", shape=["n", 3])],
                       [tensor("start", np.array([0], np.int64)),
                        tensor("end", np.array([2**62], np.int64)),
                        tensor("axis", np.array([0], np.int64))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Relu"] and report.pattern_hits == {"drop_noop": 2}
    for n in (0, 1, 4):
        assert_same(proto, out, {"x": np.arange(n * 3, dtype=np.float32).reshape(n, 3) - 3})
    folded, _, _ = fold_proto(proto, tmp_path, FoldOptions(disabled_rules={"drop_noop"},
                                                           strict=True))
    assert ops(folded) == ops(proto)


def test_no_two_no_op_rules_remove_the_same_op():
    """Every no-op removal is one rule of ``rules/no_ops.py``, and no op is the root of two."""
    catalogue = load_catalogue()
    no_ops = [r for r in catalogue.of(PatternRule) if Path(r.source.split(":")[0]).stem == "no_ops"]
    assert {r.name for r in no_ops} == {"drop_noop", "drop_neutral_element",
                                        "drop_inference_dropout"}
    roots = [op for r in no_ops for op in r.op_types]
    assert len(roots) == len(set(roots)) and {"Expand", "Slice", "Mul", "Dropout"} <= set(roots)


# -- cleanups -----------------------------------------------------------------------------------

def test_remove_identity(tmp_path):
    nodes = [helper.make_node("Identity", ["x"], ["i"]),
             helper.make_node("Relu", ["i"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[3])], [vinfo("y", shape=[3])])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Relu"] and report.cleanup_hits == {"remove_identity": 1}
    assert_same(proto, out, {"x": np.array([-1, 0, 1], np.float32)})
    folded, report, _ = fold_proto(proto, tmp_path, FoldOptions(
        disabled_rules={"remove_identity"}, strict=True))
    assert ops(folded) == ["Identity", "Relu"] and "remove_identity" not in report.cleanup_hits


def _twin_initializers(b_is_input):
    w = np.linspace(-1, 1, 16, dtype=np.float32)
    nodes = [helper.make_node("Add", ["x", "a"], ["s"]),
             helper.make_node("Mul", ["s", "b"], ["y"])]
    inputs = [vinfo("x", shape=[16])] + ([vinfo("b", shape=[16])] if b_is_input else [])
    return make_model(nodes, inputs, [vinfo("y", shape=[16])],
                      [tensor("a", w), tensor("b", w.copy())]), w


def test_dedupe_initializers(tmp_path):
    proto, w = _twin_initializers(b_is_input=False)
    folded, report, out = fold_proto(proto, tmp_path)
    assert report.cleanup_hits == {"dedupe_initializers": 1}
    (only,) = folded.graph.initializer
    assert [list(n.input) for n in folded.graph.node] == [["x", only.name], ["s", only.name]]
    x = np.arange(16, dtype=np.float32)
    assert_same(proto, out, {"x": x})
    np.testing.assert_array_equal(run_ort(out, {"x": x})[0], (x + w) * w)


def test_dedupe_never_touches_an_initializer_that_is_a_graph_input(tmp_path):
    proto, w = _twin_initializers(b_is_input=True)
    folded, report, out = fold_proto(proto, tmp_path)
    assert "dedupe_initializers" not in report.cleanup_hits
    assert sorted(inits(folded)) == ["a", "b"]
    assert [i.name for i in folded.graph.input] == ["x", "b"]
    x = np.arange(16, dtype=np.float32)
    override = {"x": x, "b": np.full(16, 2, np.float32)}
    assert_same(proto, out, {"x": x})
    assert_same(proto, out, override)
    np.testing.assert_array_equal(run_ort(out, override)[0], (x + w) * 2)


def test_transpose_moves_before_a_refused_cast_and_folds_in_fp16(tmp_path):
    w = np.random.default_rng(5).standard_normal((1024, 512)).astype(np.float16)  # 1 MiB
    nodes = [helper.make_node("Cast", ["w"], ["w32"], to=TensorProto.FLOAT),
             helper.make_node("Transpose", ["w32"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 512])], [vinfo("y", shape=[2, 1024])],
                       [tensor("w", w)])
    folded, report, out = fold_proto(proto, tmp_path, FoldOptions(growth_min_bytes=0))
    assert [n.op_type for n in folded.graph.node] == ["Cast", "MatMul"]  # no runtime Transpose
    (init,) = folded.graph.initializer
    assert init.data_type == TensorProto.FLOAT16 and list(init.dims) == [512, 1024]
    assert report.pattern_hits == {"transpose_before_widening": 1}
    x = np.random.default_rng(6).standard_normal((2, 512)).astype(np.float32)
    np.testing.assert_array_equal(run_ort(proto, {"x": x})[0], run_ort(out, {"x": x})[0])


def test_transpose_moves_before_per_channel_dequantize_with_its_axis(tmp_path):
    rng = np.random.default_rng(7)
    q = rng.integers(-128, 128, (96, 64)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["w"], axis=0),
             helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[3, 64])], [vinfo("y", shape=[3, 96])],
                       [tensor("q", q), tensor("s", rng.random(96).astype(np.float32) / 50),
                        tensor("z", rng.integers(-3, 3, 96).astype(np.int8))])
    folded, _, out = fold_proto(proto, tmp_path)
    ops = [n.op_type for n in folded.graph.node]
    assert ops == ["DequantizeLinear", "MatMul"]  # stays quantized, transposed once, offline
    dq = folded.graph.node[0]
    assert helper.get_attribute_value(dq.attribute[0]) == 1  # channel axis followed the perm
    x = rng.standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_allclose(run_ort(proto, {"x": x})[0], run_ort(out, {"x": x})[0],
                               rtol=1e-6, atol=1e-6)


def test_merging_transposes_of_an_untyped_value_saves(tmp_path):
    # custom op -> Transpose -> Transpose -> custom op: the merged Transpose's output has no
    # known dtype, and must stay untyped rather than become an unsaveable TensorType(None)
    import onnx

    import onnxfold

    nodes = [helper.make_node("Foo", ["x"], ["a"], domain="my.ops"),
             helper.make_node("Transpose", ["a"], ["t1"], perm=[1, 0, 2]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]),
             helper.make_node("Bar", ["t2"], ["y"], domain="my.ops")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", 1, None)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("my.ops", 1)])
    src = str(tmp_path / "in.onnx")
    onnx.save(proto, src)
    result = onnxfold.optimize(src, FoldOptions(strict=True), check=False)
    assert result.report.pattern_hits == {"merge_transposes": 1}
    onnxfold.save_model(result.model, str(tmp_path / "out.onnx"))
    assert [n.op_type for n in onnx.load(str(tmp_path / "out.onnx")).graph.node] == \
        ["Foo", "Transpose", "Bar"]


@pytest.mark.parametrize("ir_version", [3, 8])
def test_constant_nodes_become_initializers(tmp_path, ir_version):
    nodes = [helper.make_node("Constant", [], ["k"], value=tensor("k_v", np.float32([1, 2, 3]))),
             helper.make_node("Constant", [], ["j"], value=tensor("j_v", np.int64([4, 5, 6]))),
             helper.make_node("Mul", ["x", "k"], ["m"]),
             helper.make_node("Cast", ["j"], ["jf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["m", "jf"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[3])], [vinfo("y", shape=[3])],
                       ir_version=ir_version, opset=9 if ir_version == 3 else 17)
    folded, report, out = fold_proto(proto, tmp_path)
    if ir_version >= 4:
        assert [n.op_type for n in folded.graph.node] == ["Mul", "Add"]
        assert report.cleanup_hits.get("constants_to_initializers") == 1
    else:  # IR 3: an initializer must be an input, so the Constant stays (same interface)
        assert [n.op_type for n in folded.graph.node] == ["Constant", "Mul", "Add"]
        assert [i.name for i in folded.graph.input] == ["x"] + [
            t.name for t in folded.graph.initializer]
    x = np.float32([1, -1, 2])
    np.testing.assert_array_equal(run_ort(proto, {"x": x})[0], run_ort(out, {"x": x})[0])


def test_identity_transpose_and_cast_like_of_a_constant(tmp_path):
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 1]),
             helper.make_node("CastLike", ["scale", "x"], ["s"]),
             helper.make_node("Sqrt", ["s"], ["r"]),
             helper.make_node("Mul", ["t", "r"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["N", 3])], [vinfo("y", shape=["N", 3])],
                       [tensor("scale", np.float64(16.0))])
    folded, _report, out = fold_proto(proto, tmp_path)
    assert [n.op_type for n in folded.graph.node] == ["Mul"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run_ort(proto, {"x": x})[0], run_ort(out, {"x": x})[0])


def test_duplicate_nodes_merge_but_random_ones_do_not(tmp_path):
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n1"]),
             helper.make_node("Gather", ["s", "zero"], ["n2"]),
             helper.make_node("Cast", ["n1"], ["f1"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["n2"], ["f2"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["f1", "f2"], ["sum"]),
             helper.make_node("RandomNormalLike", ["x"], ["r1"]),
             helper.make_node("RandomNormalLike", ["x"], ["r2"]),
             helper.make_node("Sub", ["r1", "r2"], ["d"]),
             helper.make_node("Add", ["x", "sum"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["N"])],
                       [vinfo("y", shape=["N"]), vinfo("d", shape=["N"])],
                       [tensor("zero", np.int64(0))])
    folded, _report, out = fold_proto(proto, tmp_path)
    ops = [n.op_type for n in folded.graph.node]
    assert ops.count("Gather") == 1 and ops.count("Cast") == 1
    assert ops.count("RandomNormalLike") == 2  # two draws stay two draws
    x = np.float32([1, 2, 3])
    np.testing.assert_array_equal(run_ort(proto, {"x": x})[0], run_ort(out, {"x": x})[0])


def test_merge_duplicates_keeps_zero_and_negative_zero_apart(tmp_path):
    # float attributes compare 0.0 == -0.0: If-body Constants merge, x/0 - x/-0 becomes nan
    then = helper.make_graph([
        helper.make_node("Constant", [], ["a"], value_float=0.0),
        helper.make_node("Constant", [], ["b"], value_float=-0.0),
        helper.make_node("Div", ["x", "a"], ["t1"]), helper.make_node("Div", ["x", "b"], ["t2"]),
        helper.make_node("Sub", ["t1", "t2"], ["t"])], "then", [], [vinfo("t", shape=[3])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [vinfo("e", shape=[3])])
    model = make_model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                       [vinfo("x", shape=[3]), vinfo("c", TensorProto.BOOL, [])],
                       [vinfo("y", shape=[3])])
    folded, _, _ = fold_proto(model, tmp_path)
    assert_same_bits(model, folded, {"x": np.array([1, -2, 3], np.float32), "c": np.array(True)})


def test_merge_duplicates_keeps_training_mode_dropouts_apart(tmp_path):
    # Dropout with training_mode draws a mask: two of them are not one
    nodes = [helper.make_node("Dropout", ["x", "r", "tm"], ["d1"]),
             helper.make_node("Dropout", ["x", "r", "tm"], ["d2"]),
             helper.make_node("Sub", ["d1", "d2"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[1000]), vinfo("tm", TensorProto.BOOL, [])],
                       [vinfo("y", shape=[1000])], [tensor("r", np.array(0.5, np.float32))])
    folded, _, _ = fold_proto(model, tmp_path)
    feeds = {"x": np.ones(1000, np.float32), "tm": np.array(True)}
    assert np.count_nonzero(run_ort(model, feeds)[0]) > 0
    assert np.count_nonzero(run_ort(folded, feeds)[0]) > 0  # merged, d1 - d2 is all zeros


def test_cast_like_of_a_constant_to_string(tmp_path):
    # a string has no bit width: the strict fold must not ask onnx for one (TypeError)
    nodes = [helper.make_node("CastLike", ["c", "l"], ["cc"]),
             helper.make_node("Identity", ["cc"], ["y"])]
    model = make_model(nodes, [vinfo("l", TensorProto.STRING, [1])],
                       [vinfo("y", TensorProto.STRING, [3])],
                       [tensor("c", np.array([1.5, -2.5, 7.0], np.float32))], opset=19,
                       ir_version=9)
    folded, _, _ = fold_proto(model, tmp_path)
    assert_same_bits(model, folded, {"l": np.array(["a"], dtype=object)})


# -- merge_reshapes of Squeeze/Unsqueeze/Flatten, reshape_then_unsqueeze --------------------------

def _batch_feeds(shape, sizes=(1, 3)):
    return [{"x": np.random.default_rng(n).standard_normal((n, *shape)).astype(np.float32)}
            for n in sizes]


def test_a_squeezed_dim_reshaped_back_to_one_element_is_the_dim(tmp_path):
    # the dynamo exporter's batch: Reshape(Squeeze(Shape(x)[0:1]), [-1]) is Shape(x)[0:1]
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
             helper.make_node("Squeeze", ["s"], ["b"]),
             helper.make_node("Reshape", ["b", "m1"], ["b1"]),
             helper.make_node("Concat", ["b1", "ones"], ["tgt"], axis=0),
             helper.make_node("Expand", ["token", "tgt"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["N", 3, "H", "W"])],
                       [vinfo("y", shape=["N", 1, 4])],
                       [tensor("m1", np.array([-1])), tensor("ones", np.array([1, 1])),
                        tensor("token", np.arange(4, dtype=np.float32).reshape(1, 1, 4))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Shape", "Concat", "Expand"]
    assert report.pattern_hits == {"merge_reshapes": 1, "drop_noop": 1}
    for n, h in ((1, 5), (3, 2)):
        assert_same_bits(proto, out, {"x": np.ones((n, 3, h, 7), np.float32)})


@pytest.mark.parametrize("first", [
    helper.make_node("Unsqueeze", ["x", "a1"], ["r1"]),
    helper.make_node("Flatten", ["x"], ["r1"], axis=2),
    helper.make_node("Squeeze", ["x", "a1"], ["r1"])])
def test_merge_reshapes_after_an_op_that_moves_no_element(tmp_path, first):
    nodes = [first, helper.make_node("Reshape", ["r1", "s2"], ["r2"]),
             helper.make_node("Relu", ["r2"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["N", 1, 4])], [vinfo("y", shape=[None, 2])],
                       [tensor("a1", np.array([1])), tensor("s2", np.array([-1, 2]))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Reshape", "Relu"] and report.pattern_hits == {"merge_reshapes": 1}
    for feeds in _batch_feeds((1, 4)):
        assert_same_bits(proto, out, feeds)


def test_merge_reshapes_keeps_a_squeeze_that_may_fail(tmp_path):
    # Squeeze(x[N, 4], [0]) fails unless N is 1; Reshape(x, [-1, 2]) would not
    nodes = [helper.make_node("Squeeze", ["x", "a0"], ["r1"]),
             helper.make_node("Reshape", ["r1", "t"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["N", 4])], [vinfo("y", shape=[2, 2])],
                       [tensor("a0", np.array([0])), tensor("t", np.array([-1, 2]))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Squeeze", "Reshape"]
    assert report.patterns_rejected == {
        "merge_reshapes: a Squeeze of an axis not provably 1": 1}
    assert_same_bits(proto, out, _batch_feeds((4,), sizes=(1,))[0])


@pytest.mark.parametrize(("target", "op", "axes", "merged"), [
    ([-1, 32], "Unsqueeze", [1], [-1, 1, 32]),  # a MoE router's tokens, one per expert slot
    ([-1, 32], "Unsqueeze", [-1], [-1, 32, 1]),
    ([0, -1], "Unsqueeze", [2, 3], [0, -1, 1, 1]),  # the 0 still copies axis 0
    ([-1, 1, 32], "Squeeze", [1], [-1, 32]),
    ([0, 1, -1], "Squeeze", [-2], [0, -1])])
def test_reshape_then_unsqueeze_is_one_reshape(tmp_path, target, op, axes, merged):
    nodes = [helper.make_node("Reshape", ["x", "t"], ["r"]),
             helper.make_node(op, ["r", "axes"], ["u"]), helper.make_node("Neg", ["u"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["N", "S", 32])],
                       [vinfo("y", shape=[None] * len(merged))],
                       [tensor("t", np.array(target)), tensor("axes", np.array(axes))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Reshape", "Neg"]
    assert list(inits(folded)[node(folded, "Reshape").input[1]]) == merged
    assert report.pattern_hits == {"reshape_then_unsqueeze": 1}
    for n, s in ((1, 5), (3, 2)):
        x = np.random.default_rng(n).standard_normal((n, s, 32)).astype(np.float32)
        assert_same_bits(proto, out, {"x": x})


@pytest.mark.parametrize(("target", "op", "axes", "why"), [
    ([0, -1], "Unsqueeze", [0], "a 0 (copy) entry would copy another dim"),
    ([-1, 32], "Squeeze", [0], "a squeezed axis not 1 in the target")])  # -1 is N
def test_reshape_then_unsqueeze_declines(tmp_path, target, op, axes, why):
    nodes = [helper.make_node("Reshape", ["x", "t"], ["r"]),
             helper.make_node(op, ["r", "axes"], ["u"]), helper.make_node("Neg", ["u"], ["y"])]
    rank = len(target) + (len(axes) if op == "Unsqueeze" else -len(axes))
    proto = make_model(nodes, [vinfo("x", shape=["N", 1, 32])], [vinfo("y", shape=[None] * rank)],
                       [tensor("t", np.array(target)), tensor("axes", np.array(axes))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Reshape", op, "Neg"]
    assert report.patterns_rejected == {f"reshape_then_unsqueeze: {why}": 1}
    assert_same_bits(proto, out, {"x": np.ones((1, 1, 32), np.float32)})


@pytest.mark.parametrize(("perm", "target", "merged"), [
    ([0, 2, 1, 3], [0, 0, -1], [0, 1, -1]),  # a bidirectional LSTM's [S, 2, 1, H] -> [S, 1, 2H]
    ([2, 0, 1, 3], [-1, 16], [-1, 16]),  # the 1 moved to the front
    ([0, 1, 3, 2], [0, 0, -1], [0, 2, -1])])  # the 1 moved to the end, a static 2 copied
def test_a_transpose_of_size_one_axes_merges_into_the_reshape(tmp_path, perm, target, merged):
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=perm),
             helper.make_node("Reshape", ["t", "s"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["S", 2, 1, 8])],
                       [vinfo("y", shape=[None] * len(target))],
                       [tensor("s", np.array(target, np.int64))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Reshape", "Neg"]
    assert list(inits(folded)[node(folded, "Reshape").input[1]]) == merged
    assert report.pattern_hits == {"merge_reshapes": 1}
    for s in (1, 3):
        x = np.random.default_rng(s).standard_normal((s, 2, 1, 8)).astype(np.float32)
        assert_same_bits(proto, out, {"x": x})


@pytest.mark.parametrize("shape", [["S", 2, "M", 8], ["S", 2, 3, 8]])
def test_a_transpose_of_other_axes_stays_before_the_reshape(tmp_path, shape):
    # M may be 3 at run time: the transpose then moves elements
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["t", "s"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=shape)], [vinfo("y", shape=[None, None])],
                       [tensor("s", np.array([-1, 16], np.int64))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Transpose", "Reshape", "Neg"]
    assert report.patterns_rejected == {"merge_reshapes: a Transpose of axes not provably 1": 1}
    for m in (1, 3):
        dims = [2, 2, m if shape[2] == "M" else 3, 8]
        x = np.random.default_rng(m).standard_normal(dims).astype(np.float32)
        assert_same_bits(proto, out, {"x": x})
