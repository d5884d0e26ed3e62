"""rules/structure.py (#13): SplitToSequence -> Split, Reshape -> pointwise -> Reshape, neutral
elements, Concat inputs empty along the axis. Each folded model is run against the original in
onnxruntime at two values of every dynamic dim."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnxfold import optimize
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import fold_proto, run_ort


def _ops(proto):
    return sorted(n.op_type for n in proto.graph.node)


def _same(proto, out, feeds_for, sizes=(1, 3), signs=True):
    """Outputs equal; ``signs``: also the signs of zeros (bit for bit)."""
    for n in sizes:
        feeds = feeds_for(n)
        for a, b in zip(run_ort(proto, feeds), run_ort(out, feeds)):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)
            assert (np.signbit(a) == np.signbit(b)).all() if signs and a.dtype.kind == "f" \
                else True


def _x(shape, dtype=np.float32):
    def feeds(n):
        x = np.random.default_rng(n).standard_normal((n, *shape)).astype(dtype)
        x.reshape(-1)[::3] = -0.0 if x.dtype.kind == "f" else 0
        return {"x": x}
    return feeds


# --- SplitToSequence -> Split -----------------------------------------------------------------

def _split_model(split, axis=1, extra=()):
    nodes = [helper.make_node("SplitToSequence", ["x", "s"] if split is not None else ["x"],
                              ["seq"], axis=axis),
             helper.make_node("SequenceAt", ["seq", "i0"], ["a"]),
             helper.make_node("SequenceAt", ["seq", "im1"], ["b"]),
             helper.make_node("Neg", ["a"], ["y"]), helper.make_node("Abs", ["b"], ["z"]),
             *extra]
    inits = [tensor("i0", np.array(0, np.int64)), tensor("im1", np.array(-1, np.int64))]
    if split is not None:
        inits.append(tensor("s", np.asarray(split, np.int64)))
    outs = [vinfo("y", shape=["N", None]), vinfo("z", shape=["N", None])] + (
        [vinfo("n", TensorProto.INT64, [])] if extra else [])
    return make_model(nodes, [vinfo("x", shape=["N", 7])], outs, inits, opset=18)


@pytest.mark.parametrize("split", [3, [2, 5], [1, 0, 6], None])
def test_split_to_sequence_read_at_constant_positions_is_a_split(tmp_path, split):
    proto = _split_model(split)
    folded, _report, out = fold_proto(proto, tmp_path)
    assert "SplitToSequence" not in _ops(folded) and "SequenceAt" not in _ops(folded)
    assert _ops(folded).count("Split") == 1
    _same(proto, out, _x((7,)))


def test_a_chunk_that_is_two_graph_outputs_still_makes_a_split(tmp_path):
    """Two SequenceAt of the same position, both graph outputs: one Split chunk, and an
    Identity for the second output (it used to decline, leaving the sequence)."""
    nodes = [helper.make_node("SplitToSequence", ["x", "s"], ["seq"], axis=1),
             helper.make_node("SequenceAt", ["seq", "i0"], ["a"]),
             helper.make_node("SequenceAt", ["seq", "i0"], ["b"])]
    proto = make_model(nodes, [vinfo("x", shape=["N", 7])],
                       [vinfo("a", shape=["N", None]), vinfo("b", shape=["N", None])],
                       [tensor("i0", np.array(0, np.int64)),
                        tensor("s", np.asarray([2, 5], np.int64))], opset=18)
    folded, report, out = fold_proto(proto, tmp_path)
    assert _ops(folded) == ["Identity", "Split"]
    assert report.pattern_hits == {"split_to_sequence_as_split": 1}
    assert [o.name for o in folded.graph.output] == ["a", "b"]
    _same(proto, out, _x((7,)))


def test_the_check_validates_a_split_to_sequence_rewrite_through_its_sequence(tmp_path):
    """The window a SplitToSequence rewrite replaced reads the sequence: the check computes it
    from the original as a list and feeds it (GPT-2's dynamo export: 12 rewrites were said
    not validated, and the check's own runner then stopped with an internal error)."""
    import onnx

    import onnxfold

    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_split_model([2, 5]), path)
    result = optimize(str(path), record_rewrites=True)
    result.save(str(out))
    check = onnxfold.compare(str(path), str(out), n=2, evidence=result.evidence)
    assert check.ok and check.rewrites is not None, check.summary()
    assert check.rewrites.count("bitwise") == len(check.rewrites.rewrites) >= 1, \
        check.summary()


def test_split_to_sequence_stays_when_the_chunk_count_is_dynamic(tmp_path):
    proto = _split_model(3, axis=0)  # chunks of 3 along N
    folded, _, out = fold_proto(proto, tmp_path)
    assert "SplitToSequence" in _ops(folded)
    _same(proto, out, _x((7,)), sizes=(3, 6))


def test_split_to_sequence_stays_when_the_sequence_is_read_otherwise(tmp_path):
    # chunks of one size: onnxruntime mis-plans buffers of unequal chunks next to SequenceLength
    proto = _split_model(1, extra=[helper.make_node("SequenceLength", ["seq"], ["n"])])
    folded, _, out = fold_proto(proto, tmp_path)
    assert "SplitToSequence" in _ops(folded)
    _same(proto, out, _x((7,)))


# --- Reshape -> pointwise -> Reshape ----------------------------------------------------------

def _gelu_between_reshapes(operand=0.5, outer=(-1, 4)):
    # torch's view(b, s, 4) -> tanh-GELU-like ops -> view(-1, 4) around a Gemm's [N, 4]
    nodes = [helper.make_node("Reshape", ["x", "t1"], ["r"]),
             helper.make_node("Mul", ["r", "half"], ["m"]),
             helper.make_node("Pow", ["r", "three"], ["p"]),
             helper.make_node("Tanh", ["p"], ["t"]),
             helper.make_node("Add", ["t", "m"], ["u"]),
             helper.make_node("Reshape", ["u", "t2"], ["y"]),
             helper.make_node("Neg", ["y"], ["out"])]
    inits = [tensor("t1", np.array([-1, 2, 4], np.int64)),
             tensor("half", np.asarray(operand, np.float32)), tensor("three", np.float32(3)),
             tensor("t2", np.array(outer, np.int64))]
    return make_model(nodes, [vinfo("x", shape=["N", 4])], [vinfo("out", shape=[None, 4])], inits)


def test_pointwise_ops_between_reshapes_lose_both_reshapes(tmp_path):
    proto = _gelu_between_reshapes()
    folded, _report, out = fold_proto(proto, tmp_path)
    assert "Reshape" not in _ops(folded)
    _same(proto, out, _x((4,)), sizes=(2, 6))


@pytest.mark.parametrize("operand, outer", [
    (np.full((2, 1), 0.5, np.float32), (-1, 4)),  # not a scalar: it broadcasts
    (0.5, (0, 8)),  # the outer target copies a dim of the inner shape
])
def test_reshapes_stay_around_non_scalar_operands_and_copied_dims(tmp_path, operand, outer):
    proto = _gelu_between_reshapes(operand, outer)
    folded, _, out = fold_proto(proto, tmp_path)
    assert _ops(folded).count("Reshape") == 2
    _same(proto, out, _x((4,)), sizes=(2, 6))


def test_a_reshape_to_its_own_dims_with_one_minus_one_goes(tmp_path):
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["d"]),
             helper.make_node("Concat", ["m1", "d"], ["t"], axis=0),
             helper.make_node("Reshape", ["x", "t"], ["r"]),
             helper.make_node("Neg", ["r"], ["y"])]
    inits = [tensor("one", np.array([1], np.int64)), tensor("m1", np.array([-1], np.int64))]
    proto = make_model(nodes, [vinfo("x", shape=["N", "S"])], [vinfo("y", shape=["N", "S"])], inits)
    folded, _, out = fold_proto(proto, tmp_path)
    assert _ops(folded) == ["Neg"]
    for n, s in ((1, 5), (3, 2)):
        x = np.random.default_rng(n).standard_normal((n, s)).astype(np.float32)
        np.testing.assert_array_equal(run_ort(proto, {"x": x})[0], run_ort(out, {"x": x})[0])


# --- neutral elements -------------------------------------------------------------------------

def _binary(op, c, dtype=TensorProto.FLOAT, swap=False):
    ins = ["c", "x"] if swap else ["x", "c"]
    nodes = [helper.make_node(op, ins, ["a"]), helper.make_node("Neg", ["a"], ["y"])]
    return make_model(nodes, [vinfo("x", dtype, ["N", 3])], [vinfo("y", dtype, [None, 3])],
                      [tensor("c", c)])


@pytest.mark.parametrize("op, c, dtype, swap, gone", [
    ("Add", np.array(0, np.int64), TensorProto.INT64, False, True),
    ("Add", np.zeros(3, np.int64), TensorProto.INT64, True, True),
    ("Add", np.float32(-0.0), TensorProto.FLOAT, True, True),
    # -0.0 + 0.0 is +0.0, but a graph output compares numbers (test_zero_sign.py)
    ("Add", np.float32(0.0), TensorProto.FLOAT, False, True),
    ("Sub", np.float32(0.0), TensorProto.FLOAT, False, True),
    ("Sub", np.float32(-0.0), TensorProto.FLOAT, False, True),
    ("Sub", np.float32(0.0), TensorProto.FLOAT, True, False),  # 0 - x is -x
    ("Mul", np.ones((1, 3), np.float32), TensorProto.FLOAT, True, True),
    ("Mul", np.ones((1, 1, 3), np.float32), TensorProto.FLOAT, False, False),  # adds a dim
    ("Mul", np.ones((2, 3), np.float32), TensorProto.FLOAT, False, False),  # N must be 2
    ("Div", np.float32(1), TensorProto.FLOAT, False, True),
    ("Div", np.float32(1), TensorProto.FLOAT, True, False),  # 1 / x
    ("Mul", np.float32(2), TensorProto.FLOAT, False, False),
])
def test_neutral_elements_go_only_where_nothing_changes(tmp_path, op, c, dtype, swap, gone):
    proto = _binary(op, c, dtype, swap)
    folded, _, out = fold_proto(proto, tmp_path)
    assert (op not in _ops(folded)) == gone
    np_dtype = np.int64 if dtype == TensorProto.INT64 else np.float32
    _same(proto, out, _x((3,), np_dtype), sizes=(1, 4) if c.shape[:1] != (2,) else (2,),
          signs=not (dtype == TensorProto.FLOAT and (c == 0).all()))


def test_where_with_a_constant_condition_and_one_input_concat(tmp_path):
    nodes = [helper.make_node("Where", ["yes", "x", "w"], ["a"]),
             helper.make_node("Where", ["no", "w", "a"], ["b"]),
             helper.make_node("Where", ["yes", "x", "wide"], ["kept"]),  # broadcasts x up
             helper.make_node("Where", ["no", "x", "w"], ["kept2"]),  # w is [1, 3], not [N, 3]
             helper.make_node("Concat", ["b"], ["c"], axis=0),
             helper.make_node("Max", ["c"], ["m"]),
             helper.make_node("Neg", ["m"], ["y"])]
    inits = [tensor("yes", np.ones(3, bool)), tensor("no", np.zeros((1, 3), bool)),
             tensor("wide", np.ones((2, 1, 3), np.float32))]
    proto = make_model(nodes, [vinfo("x", shape=["N", 3]), vinfo("w", shape=[1, 3])],
                       [vinfo("y", shape=["N", 3]), vinfo("kept", shape=[2, "N", 3]),
                        vinfo("kept2", shape=["N", 3])], inits)
    folded, _, out = fold_proto(proto, tmp_path)
    assert _ops(folded) == ["Neg", "Where", "Where"]

    def feeds(n):
        rng = np.random.default_rng(n)
        return {"x": rng.standard_normal((n, 3)).astype(np.float32),
                "w": rng.standard_normal((1, 3)).astype(np.float32)}
    _same(proto, out, feeds)


@pytest.mark.parametrize("op, c, gone", [
    ("And", np.ones((1, 3), bool), True), ("Or", np.array(False), True),
    ("And", np.array([True, False, True]), False), ("Or", np.ones((2, 1, 1), bool), False)])
def test_and_true_or_false(tmp_path, op, c, gone):
    nodes = [helper.make_node(op, ["c", "x"], ["a"]), helper.make_node("Not", ["a"], ["y"])]
    proto = make_model(nodes, [vinfo("x", TensorProto.BOOL, ["N", 3])],
                       [vinfo("y", TensorProto.BOOL, [None, None, 3][-max(2, c.ndim):])],
                       [tensor("c", c)])
    folded, _, out = fold_proto(proto, tmp_path)
    assert (op not in _ops(folded)) == gone

    def feeds(n):
        return {"x": np.random.default_rng(n).integers(0, 2, (n, 3)).astype(bool)}
    _same(proto, out, feeds)


# --- Concat of empty inputs -------------------------------------------------------------------

def _rotary_tail(empty_from="x", shape=("N", "S", 8)):
    """Phi-3's partial rotary: Concat(Neg(x), x[..., 8:], axis=-1) of x 8 wide; the slice is
    empty for every N and S."""
    nodes = [helper.make_node("Slice", [empty_from, "eight", "end", "last"], ["tail"]),
             helper.make_node("Neg", ["x"], ["rotated"]),
             helper.make_node("Concat", ["rotated", "tail"], ["y"], axis=-1)]
    inits = [tensor("eight", np.array([8])), tensor("end", np.array([2**63 - 1])),
             tensor("last", np.array([-1]))]
    inputs = [vinfo("x", shape=list(shape))] + (
        [vinfo(empty_from, shape=["M", "S", 8])] if empty_from != "x" else [])
    return make_model(nodes, inputs, [vinfo("y", shape=list(shape))], inits)


def test_a_concat_input_empty_along_its_axis_goes(tmp_path):
    proto = _rotary_tail()
    folded, report, out = fold_proto(proto, tmp_path)
    assert _ops(folded) == ["Neg"]
    assert report.pattern_hits == {"concat_without_empty_inputs": 1, "drop_neutral_element": 1}
    _same(proto, out, lambda n: {"x": _x((n + 1, 8))(n)["x"]})


def test_an_empty_concat_input_of_other_dims_stays(tmp_path):
    # w's M is not provably x's N: the rule does not lean on onnxruntime's Concat skipping the
    # dims of an empty input (1.32 does; the ONNX spec makes it an error where they differ)
    proto = _rotary_tail(empty_from="w")
    folded, report, out = fold_proto(proto, tmp_path)
    assert _ops(folded) == ["Concat", "Neg", "Slice"]
    assert report.patterns_rejected == {"concat_without_empty_inputs: an empty input's other "
                                        "dims are not provably the others'": 1}
    _same(proto, out, lambda n: {"x": _x((n + 1, 8))(n)["x"], "w": _x((n + 1, 8))(n + 1)["x"]})


# --- Unsqueeze of Unsqueeze -------------------------------------------------------------------

@pytest.mark.parametrize("a1, a2", [
    ([1], [2]), ([1], [3]), ([0], [0]), ([-1], [-1]), ([0, 3], [1, -1]), ([2], [0, 2]),
    ([1, 0], [4])])
def test_unsqueeze_of_unsqueeze_is_one(tmp_path, a1, a2):
    # dynamo's arange(batch)[:, None, None, None]: Unsqueeze(Unsqueeze(Unsqueeze(r, 1), 2), 3)
    nodes = [helper.make_node("Unsqueeze", ["x", "a1"], ["u"]),
             helper.make_node("Unsqueeze", ["u", "a2"], ["v"]),
             helper.make_node("Neg", ["v"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["N", "S"])],
                       [vinfo("y", shape=[None] * (2 + len(a1) + len(a2)))],
                       [tensor("a1", np.array(a1, np.int64)), tensor("a2", np.array(a2, np.int64))])
    folded, _, out = fold_proto(proto, tmp_path)
    assert _ops(folded) == ["Neg", "Unsqueeze"]
    for n, s in ((1, 5), (3, 2)):
        x = np.random.default_rng(n).standard_normal((n, s)).astype(np.float32)
        a, b = run_ort(proto, {"x": x})[0], run_ort(out, {"x": x})[0]
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_split_to_sequence_scalar_split_with_keepdims_0():
    nodes = [helper.make_node("SplitToSequence", ["x", "s"], ["q"], axis=1, keepdims=0),
             helper.make_node("SequenceAt", ["q", "i"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=["N", 3])], [vinfo("y", shape=["N"])],
                       [tensor("s", np.array(1, np.int64)), tensor("i", np.array(0, np.int64))])
    x = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}
    expected = run_ort(model, x)[0]
    assert expected.shape == (2,)
    got = run_ort(optimize(model).to_proto(), x)[0]
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
