"""Size policy: the expansion bound, growth refusal, fp16 casts, per-tensor and total limits."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.fold.budget import expansion
from onnxfold.pipeline.options import FoldOptions
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import fold_proto, run_ort

MIB = 1 << 20



def ops(proto):
    return [n.op_type for n in proto.graph.node]


def init_bytes(proto):
    return sum(numpy_helper.to_array(t).nbytes for t in proto.graph.initializer)


def assert_same(proto, out, feeds, **tol):
    for a, b in zip(run_ort(proto, feeds), run_ort(out, feeds)):
        if tol:
            np.testing.assert_allclose(a, b, **tol)
        else:
            np.testing.assert_array_equal(a, b)


# -- expansion bound ---------------------------------------------------------------------------

def _tile_model(reps=(256, 256), base=(4, 4)):
    c = np.arange(np.prod(base), dtype=np.float32).reshape(base)
    out_shape = [b * r for b, r in zip(base, reps)]
    nodes = [helper.make_node("Tile", ["c", "reps"], ["big"]),
             helper.make_node("Add", ["x", "big"], ["y"])]
    return make_model(nodes, [vinfo("x", shape=out_shape)], [vinfo("y", shape=out_shape)],
                      [tensor("c", c), tensor("reps", np.array(reps, np.int64))]), out_shape


def test_tile_blow_up_is_refused(tmp_path):
    proto, shape = _tile_model()  # 64 B -> 4 MiB
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Tile", "Add"]
    assert report.declined == {"growth": 1}
    assert init_bytes(folded) <= init_bytes(proto)
    folded, report, _ = fold_proto(proto, tmp_path, FoldOptions(growth_factor=None, strict=True))
    assert ops(folded) == ["Tile", "Add"] and report.declined == {"size": 1}
    x = np.ones(shape, np.float32)
    assert_same(proto, out, {"x": x})


def test_expansion_factor_and_min_bytes(tmp_path):
    proto, shape = _tile_model(reps=(4, 4), base=(2, 2))  # 16 B (+16 B reps) -> 256 B: 8x
    folded, _, _ = fold_proto(proto, tmp_path)  # under the 1 MiB minimum: folds
    assert ops(folded) == ["Add"]
    strict_min = FoldOptions(expansion_min_bytes=0, strict=True)
    folded, report, _ = fold_proto(proto, tmp_path, strict_min)
    assert ops(folded) == ["Tile", "Add"] and report.declined == {"size": 1}
    assert "256 B > 4x inputs 32 B" in report.declined_nodes[0]["reason"]
    folded, report, out = fold_proto(
        proto, tmp_path, FoldOptions(expansion_min_bytes=0, expansion_factor=8.0, strict=True))
    assert ops(folded) == ["Add"] and report.declined == {}
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    assert_same(proto, out, {"x": x})


class _Counted:
    """Input bytes that count how often they were asked for."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes, self.asked = nbytes, 0

    def __call__(self) -> int:
        self.asked += 1
        return self.nbytes


@pytest.mark.parametrize(("out_bytes", "factor", "min_bytes", "refused", "asked"), [
    (256, 4.0, 0, True, 1), (256, 8.0, 0, False, 1), (256, 4.0, 256, False, 0),
    (256, float("inf"), 0, False, 0), (1000, 4.0, 256, True, 1)])
def test_the_expansion_bound_asks_for_input_bytes_only_where_they_decide(
        out_bytes, factor, min_bytes, refused, asked):
    in_bytes = _Counted(32)
    reason = expansion(out_bytes, in_bytes, factor, min_bytes, None)
    assert (reason is not None, in_bytes.asked) == (refused, asked)
    if refused:
        assert str(reason).endswith(f"output {out_bytes} B > {factor:g}x inputs 32 B")


def test_range_blow_up_is_refused(tmp_path):
    n = 1 << 19  # 2 MiB of float32 from three scalars
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Add", ["x", "r"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[n])], [vinfo("y", shape=[n])],
                       [tensor("start", np.float32(0)), tensor("limit", np.float32(n)),
                        tensor("delta", np.float32(1))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Range", "Add"]
    assert set(report.declined) <= {"size", "growth"} and sum(report.declined.values()) == 1
    assert init_bytes(folded) <= init_bytes(proto)
    folded, _, _ = fold_proto(proto, tmp_path, FoldOptions(
        expansion_min_bytes=4 * MIB, growth_factor=None, strict=True), name="big.onnx")
    assert ops(folded) == ["Add"]
    assert_same(proto, out, {"x": np.ones(n, np.float32)})


def test_broadcasting_add_of_small_constants_is_refused(tmp_path):
    n = 1024  # [n,1] + [1,n] = 8 KiB of inputs -> 4 MiB
    a = np.arange(n, dtype=np.float32).reshape(n, 1)
    b = np.arange(n, dtype=np.float32).reshape(1, n) * 0.5
    nodes = [helper.make_node("Add", ["a", "b"], ["big"]),
             helper.make_node("Mul", ["x", "big"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[n, n])], [vinfo("y", shape=[n, n])],
                       [tensor("a", a), tensor("b", b)])
    for options in (None, FoldOptions(growth_factor=None, strict=True)):
        folded, report, out = fold_proto(proto, tmp_path, options)
        assert ops(folded) == ["Add", "Mul"]
        assert set(report.declined) <= {"size", "growth"} and sum(report.declined.values()) == 1
        assert init_bytes(folded) == init_bytes(proto)
    assert report.declined == {"size": 1}
    x = np.full((n, n), 2.0, np.float32)
    assert_same(proto, out, {"x": x})


# -- growth --------------------------------------------------------------------------------------

def _tied_embedding(vocab, dim, seed=0):
    """GPT-2's tied embedding: wte feeds both Gather (input) and Transpose -> MatMul (logits)."""
    wte = np.random.default_rng(seed).standard_normal((vocab, dim)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["wte", "ids"], ["h"]),
             helper.make_node("Tanh", ["h"], ["h2"]),
             helper.make_node("Transpose", ["wte"], ["wteT"], perm=[1, 0], name="tied_T"),
             helper.make_node("MatMul", ["h2", "wteT"], ["logits"])]
    proto = make_model(nodes, [vinfo("ids", TensorProto.INT64, [3])],
                       [vinfo("logits", shape=[3, vocab])], [tensor("wte", wte)])
    return proto, wte


def test_tied_embedding_transpose_is_not_duplicated_by_default(tmp_path):
    proto, wte = _tied_embedding(1024, 288)  # 1.125 MiB
    assert wte.nbytes > MIB
    feeds = {"ids": np.array([0, 5, 1023], np.int64)}
    folded, report, out = fold_proto(proto, tmp_path)
    assert "Transpose" in ops(folded)
    assert report.declined == {"growth": 1}
    (item,) = report.declined_nodes
    assert item["node"] == "tied_T" and "its source stays in use" in item["reason"]
    assert report.initializer_bytes_after <= report.initializer_bytes_before
    assert init_bytes(folded) <= init_bytes(proto)
    assert_same(proto, out, feeds, rtol=1e-5, atol=1e-5)

    folded, report, out = fold_proto(proto, tmp_path, FoldOptions(growth_factor=None,
                                                                  strict=True))
    assert "Transpose" not in ops(folded) and report.declined == {}
    assert init_bytes(folded) == 2 * wte.nbytes  # wte and its transpose
    assert report.initializer_bytes_after > report.initializer_bytes_before
    assert_same(proto, out, feeds, rtol=1e-5, atol=1e-5)


def test_tied_embedding_under_growth_min_is_not_duplicated(tmp_path):
    proto, wte = _tied_embedding(64, 16)  # 4 KiB: sharing decides, whatever the size
    folded, report, out = fold_proto(proto, tmp_path)
    assert "Transpose" in ops(folded) and report.declined == {"growth": 1}
    assert init_bytes(folded) == wte.nbytes
    folded, report, out = fold_proto(proto, tmp_path, FoldOptions(growth_factor=None,
                                                                  strict=True))
    assert "Transpose" not in ops(folded) and report.declined == {}
    assert init_bytes(folded) == 2 * wte.nbytes
    assert_same(proto, out, {"ids": np.array([0, 1, 63], np.int64)}, rtol=1e-5, atol=1e-6)


def test_growth_min_bytes_is_an_option(tmp_path):
    proto, _ = _fp16_casts([(32, 32)])  # 2 KiB of fp16 -> 4 KiB of fp32
    folded, report, _ = fold_proto(proto, tmp_path)
    assert "Cast" not in ops(folded)
    folded, report, _ = fold_proto(proto, tmp_path, FoldOptions(growth_min_bytes=1024,
                                                                strict=True))
    assert "Cast" in ops(folded) and report.declined == {"growth": 1}


def _fp16_casts(shapes, seed=0):
    """One fp16 weight -> Cast(float) -> MatMul per shape; returns the model and its weights."""
    rng = np.random.default_rng(seed)
    nodes, inits, outputs, inputs = [], [], [], []
    for i, (k, n) in enumerate(shapes):
        w = (rng.standard_normal((k, n)) * 0.1).astype(np.float16)
        inits.append(tensor(f"w{i}", w))
        inputs.append(vinfo(f"x{i}", shape=[1, k]))
        outputs.append(vinfo(f"y{i}", shape=[1, n]))
        nodes += [helper.make_node("Cast", [f"w{i}"], [f"wf{i}"], to=TensorProto.FLOAT,
                                   name=f"cast{i}"),
                  helper.make_node("MatMul", [f"x{i}", f"wf{i}"], [f"y{i}"])]
    proto = make_model(nodes, inputs, outputs, inits)
    feeds = {f"x{i}": rng.standard_normal((1, k)).astype(np.float32)
             for i, (k, _) in enumerate(shapes)}
    return proto, feeds


def test_fp16_weight_cast_is_kept_by_default(tmp_path):
    proto, feeds = _fp16_casts([(512, 1024)])  # 1 MiB of fp16 -> 2 MiB of fp32
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Cast", "MatMul"]
    assert report.declined == {"growth": 1}
    assert init_bytes(folded) == init_bytes(proto) == MIB
    assert folded.graph.initializer[0].data_type == TensorProto.FLOAT16
    assert_same(proto, out, feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", [FoldOptions(fold_fp16_casts=True, strict=True),
                                     FoldOptions(growth_factor=None, strict=True)],
                         ids=["fold_fp16_casts", "no_growth_limit"])
def test_fp16_weight_cast_folds_when_asked(tmp_path, options):
    proto, feeds = _fp16_casts([(512, 1024)])
    folded, report, out = fold_proto(proto, tmp_path, options)
    assert ops(folded) == ["MatMul"] and report.declined == {}
    (init,) = folded.graph.initializer
    assert init.data_type == TensorProto.FLOAT and init_bytes(folded) == 2 * MIB
    assert_same(proto, out, feeds, rtol=1e-5, atol=1e-5)


def test_small_fp16_cast_always_folds(tmp_path):
    proto, feeds = _fp16_casts([(16, 16)])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["MatMul"] and report.declined == {}
    assert folded.graph.initializer[0].data_type == TensorProto.FLOAT
    assert_same(proto, out, feeds, rtol=1e-5, atol=1e-6)


def test_max_growth_bytes_zero_refuses_all_growth(tmp_path):
    proto, feeds = _fp16_casts([(512, 1024), (384, 1024)])  # +1 MiB and +0.75 MiB
    folded, report, out = fold_proto(proto, tmp_path, FoldOptions(
        growth_factor=None, max_growth_bytes=0, strict=True))
    assert ops(folded) == ["Cast", "MatMul", "Cast", "MatMul"]
    assert report.declined == {"model growth": 2}
    assert "limit 0 B" in report.declined_nodes[0]["reason"]
    assert init_bytes(folded) == init_bytes(proto)
    assert_same(proto, out, feeds, rtol=1e-5, atol=1e-5)
    folded, report, _ = fold_proto(proto, tmp_path, FoldOptions(
        growth_factor=None, max_growth_bytes=2 * MIB, strict=True))
    assert ops(folded) == ["MatMul", "MatMul"] and report.declined == {}


def test_max_growth_bytes_limits_total_growth_across_rounds(tmp_path):
    # +1 MiB and +0.75 MiB: a 1.25 MiB budget fits only the smaller one
    proto, feeds = _fp16_casts([(512, 1024), (384, 1024)])
    options = FoldOptions(growth_factor=None, max_growth_bytes=MIB + MIB // 4, strict=True)
    folded, report, out = fold_proto(proto, tmp_path, options)
    assert_same(proto, out, feeds, rtol=1e-5, atol=1e-5)
    assert init_bytes(folded) - init_bytes(proto) <= MIB + MIB // 4
    assert report.declined == {"model growth": 1}
    assert report.declined_nodes[0]["node"] == "cast0"  # the largest growth goes first


def test_max_tensor_bytes_refuses_large_outputs(tmp_path):
    a = np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32)  # 16 KiB
    b = np.arange(8, dtype=np.float32)  # 32 B
    nodes = [helper.make_node("Transpose", ["a"], ["at"], perm=[1, 0], name="big_T"),
             helper.make_node("Neg", ["b"], ["nb"], name="small_neg"),
             helper.make_node("MatMul", ["x", "at"], ["y"]),
             helper.make_node("Add", ["z", "nb"], ["w"])]
    proto = make_model(nodes, [vinfo("x", shape=[1, 64]), vinfo("z", shape=[8])],
                       [vinfo("y", shape=[1, 64]), vinfo("w", shape=[8])],
                       [tensor("a", a), tensor("b", b)])
    folded, report, out = fold_proto(proto, tmp_path, FoldOptions(max_tensor_bytes=1024,
                                                                  strict=True))
    assert ops(folded) == ["Transpose", "MatMul", "Add"]
    assert report.declined == {"size": 1}
    (item,) = report.declined_nodes
    assert item["node"] == "big_T" and "per-tensor limit of 1024 B" in item["reason"]
    feeds = {"x": np.ones((1, 64), np.float32), "z": np.ones(8, np.float32)}
    assert_same(proto, out, feeds, rtol=1e-5, atol=1e-5)
    folded, _, _ = fold_proto(proto, tmp_path, FoldOptions(max_tensor_bytes=a.nbytes,
                                                           strict=True))
    assert ops(folded) == ["MatMul", "Add"]


# -- QDQ -----------------------------------------------------------------------------------------

def _qdq_model(k=64, n=32):
    rng = np.random.default_rng(5)
    wq = rng.integers(-128, 127, (k, n)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["wq", "scale", "zp"], ["w"], name="dq_w"),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[1, k])], [vinfo("y", shape=[1, n])],
                       [tensor("wq", wq), tensor("scale", np.float32(0.02)),
                        tensor("zp", np.int8(3))])
    return proto, {"x": rng.standard_normal((1, k)).astype(np.float32)}


def test_dequantize_of_int8_weight_is_kept_by_default(tmp_path):
    proto, feeds = _qdq_model()
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["DequantizeLinear", "MatMul"]
    assert report.declined == {"qdq policy": 1}
    assert report.declined_nodes[0]["node"] == "dq_w"
    assert report.initializer_bytes_after <= report.initializer_bytes_before
    assert init_bytes(folded) == init_bytes(proto)
    assert numpy_helper.to_array(next(t for t in folded.graph.initializer
                                      if t.name == "wq")).dtype == np.int8
    assert_same(proto, out, feeds)
    folded, report, out = fold_proto(proto, tmp_path, FoldOptions(fold_qdq=True, strict=True))
    assert ops(folded) == ["MatMul"] and report.declined == {}
    (w,) = folded.graph.initializer
    assert w.data_type == TensorProto.FLOAT
    # onnxruntime's QDQ fusion makes the original DequantizeLinear -> MatMul approximate:
    # compare with it unoptimized
    np.testing.assert_allclose(run_ort_unoptimized(proto, feeds)[0], run_ort(out, feeds)[0],
                               rtol=1e-5, atol=1e-5)


def run_ort_unoptimized(proto, feeds):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(proto.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


# -- growth refusals cascading up a chain ------------------------------------------------------

def _copies_of_a_shared_weight(length):
    """``x_1 = Neg(w)``, ``x_(k+1) = Neg(x_k)``, and both ``x_n`` and ``w`` read by a dynamic
    Add: every ``x_k`` kept would be a copy of ``w``, which stays in use."""
    w = np.linspace(-1, 1, 64).astype(np.float32)  # 256 B: a weight, not a shape
    nodes = [helper.make_node("Neg", ["w"], ["x1"])]
    nodes += [helper.make_node("Neg", [f"x{k}"], [f"x{k + 1}"]) for k in range(1, length)]
    nodes += [helper.make_node("Add", [f"x{length}", "inp"], ["y"]),
              helper.make_node("Add", ["w", "inp"], ["z"])]
    return make_model(nodes, [vinfo("inp", shape=[64])],
                      [vinfo("y", shape=[64]), vinfo("z", shape=[64])], [tensor("w", w)])


def test_a_refusal_cascading_up_a_chain_takes_one_sweep(tmp_path, monkeypatch):
    """Refusing x_n leaves x_(n-1) kept, a copy of w in turn, and so on up the chain: each
    node's results were judged again after every refusal (n**2 / 2 judgements: 2,000 Negs took
    6 s); one sweep from the last node to the first now sees each refusal at once."""
    from onnxfold.fold import policy

    length = 300
    judged = []
    of = policy._Judge.of

    def counted(self, node, alive):
        judged.append(node)
        return of(self, node, alive)

    monkeypatch.setattr(policy._Judge, "of", counted)
    proto = _copies_of_a_shared_weight(length)
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Neg"] * length + ["Add", "Add"]  # no copy of w written
    assert report.declined == {"growth": length}
    assert len(judged) <= 4 * length, f"{len(judged)} judgements for {length} nodes"
    assert_same(proto, out, {"inp": np.arange(64, dtype=np.float32)})
