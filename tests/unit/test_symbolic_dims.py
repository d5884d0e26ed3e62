"""Dims proved from each op's shape semantics (``onnxfold.analysis.symbolic``): a dim that shape
inference
named ``unk__2`` or that carries an input name used by several inputs is traced to the graph
inputs' dims, so what it makes static folds and what stays names the input dims that block it.
Every folded model is run in onnxruntime at two values of each dynamic dim."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper

from onnxfold.analysis.dim_algebra import Sym
from onnxfold.analysis.step_inputs import REFINED_KEY, dim_symbol, shared_dim_names
from onnxfold.analysis.symbolic import shape_values
from onnxfold.declare.catalogue import load_catalogue
from tests.support.models import constant_node, make_model, stale_named_sum_reshaped, vinfo
from tests.support.running import fold_proto, run_ort


def _ops(proto):
    return [n.op_type for n in proto.graph.node]


def _same(proto, out, feeds_list):
    for feeds in feeds_list:
        for a, b in zip(run_ort(proto, feeds), run_ort(out, feeds)):
            assert a.shape == b.shape
            np.testing.assert_array_equal(a, b)


def _rand(*shape):
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


def test_a_broadcast_with_1_is_the_other_dim():
    model = ir.from_proto(stale_named_sum_reshaped())
    from onnxfold.ir.constants import source_array

    known = shape_values(model.graph, source_array, shared_dim_names(model),
                         steps=load_catalogue().shape_steps)
    r = next(n for n in model.graph if n.op_type == "Relu").outputs[0]
    assert dim_symbol(r, 0) == Sym(("dim", "N"))
    assert r.meta[REFINED_KEY] == (Sym(("dim", "N")), None)
    s = next(n for n in model.graph if n.op_type == "Shape").outputs[0]
    assert known[s].elements == (Sym(("dim", "N")),)


def test_stale_name_no_longer_blocks_the_scaffolding(tmp_path):
    proto = stale_named_sum_reshaped()
    folded, report, out = fold_proto(proto, tmp_path)
    assert _ops(folded) == ["Add", "Relu", "Reshape"]
    assert report.dynamic_shapes == []
    _same(proto, out, [{"x": _rand(1, 4)}, {"x": _rand(3, 4)}])


def _two_inputs_one_name():
    """a, b: [N, 4] (one name on two inputs: onnxruntime does not check they agree), their sum
    reshaped by its own batch dim."""
    nodes = [helper.make_node("Add", ["a", "b"], ["c"]),
             helper.make_node("Shape", ["c"], ["s"]),
             constant_node("i0", np.array(0)),
             helper.make_node("Gather", ["s", "i0"], ["n"]),
             constant_node("ax", np.array([0])),
             helper.make_node("Unsqueeze", ["n", "ax"], ["nu"]),
             constant_node("rest", np.array([2, 2])),
             helper.make_node("Concat", ["nu", "rest"], ["target"], axis=0),
             helper.make_node("Reshape", ["c", "target"], ["y"])]
    return make_model(nodes, [vinfo("a", shape=["N", 4]), vinfo("b", shape=["N", 4])],
                      [vinfo("y", shape=["N", 2, 2])])


def test_a_name_shared_by_inputs_is_named_by_both(tmp_path, save):
    from onnxfold.app.inspection import inspect_model

    proto = _two_inputs_one_name()
    folded, _report, out = fold_proto(proto, tmp_path)
    # the batch is broadcast(N of a, N of b): still a copy of c's own dim 0
    assert _ops(folded) == ["Add", "Reshape"]
    # a's and b's batches may differ (one of them 1): the folded model broadcasts the same way
    _same(proto, out, [{"a": _rand(3, 4), "b": _rand(1, 4)},
                       {"a": _rand(1, 4), "b": _rand(2, 4)},
                       {"a": _rand(5, 4), "b": _rand(5, 4)}])
    info = inspect_model(save(proto))
    blocked = {item["node"]: item["blocked_by"] for item in info["dynamic_shape_nodes"]}
    assert blocked and all(by == "`N` of input a (axis 0); `N` of input b (axis 0)"
                           for by in blocked.values())


def _positions():
    # positions = arange(x.size(0))[:, None] expanded to [N, 4] the way torch exports
    # expand(-1, 4): Where(Equal(Concat(N, 4), -1), 1, Concat(N, 4)); a Reshape by a -1 after it
    nodes = [helper.make_node("Shape", ["x"], ["s"]), constant_node("i0", np.array(0)),
             helper.make_node("Gather", ["s", "i0"], ["n"]),
             constant_node("zero", np.array(0)), constant_node("one", np.array(1)),
             helper.make_node("Range", ["zero", "n", "one"], ["pos"]),
             constant_node("ax1", np.array([1])),
             helper.make_node("Unsqueeze", ["pos", "ax1"], ["col"]),
             helper.make_node("Shape", ["col"], ["cs"]),
             constant_node("ax0", np.array([0])),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["nu"]),
             constant_node("m1", np.array([-1])),
             helper.make_node("Concat", ["nu", "m1"], ["want"], axis=0),
             helper.make_node("Equal", ["want", "m1"], ["is_m1"]),
             constant_node("ones", np.array([1, 1])),
             helper.make_node("Where", ["is_m1", "ones", "want"], ["size"]),
             helper.make_node("Expand", ["col", "size"], ["ex"]),
             helper.make_node("Cast", ["ex"], ["exf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "exf"], ["sum"]),
             constant_node("flat", np.array([0, -1])),
             helper.make_node("Reshape", ["sum", "flat"], ["r"]),
             helper.make_node("Shape", ["r"], ["rs"]),
             helper.make_node("Equal", ["rs", "cs"], ["same"]),  # [N, 4] vs [N, 1]
             helper.make_node("Cast", ["same"], ["samef"], to=TensorProto.FLOAT),
             helper.make_node("Gather", ["samef", "i0"], ["first_same"]),
             helper.make_node("Mul", ["r", "first_same"], ["y"])]
    return make_model(nodes, [vinfo("x", shape=["N", 4])], [vinfo("y", shape=["N", 4])])


def test_range_of_a_dim_and_torch_expand_minus_one(tmp_path):
    proto = _positions()
    folded, report, out = fold_proto(proto, tmp_path)
    # Range(0, N, 1) has N elements: the Expand of [N, 1] to (N, 1) goes, and so do its Where,
    # Equal and Concat; Shape(r) is [N, 4] and Shape(col) [N, 1]: their Equal is [True, False]
    # and the Reshape [0, -1] keeps r's shape
    assert _ops(folded) == ["Shape", "Gather", "Range", "Unsqueeze", "Cast", "Add"]
    assert [d["node"] for d in report.dynamic_shapes] == ["Shape->s", "Gather->n"]
    assert all(d["blocked_by"] == "`N` of input x" for d in report.dynamic_shapes)
    _same(proto, out, [{"x": _rand(1, 4)}, {"x": _rand(4, 4)}])


def test_reshape_minus_one_and_split_keep_the_batch(tmp_path):
    # x: [N, 6] -> Reshape [0, 2, -1] is [N, 2, 3] -> Split(axis 2, [1, 2]) -> the second part's
    # Shape()[0] is N: the final Reshape's target is [0, 4]
    nodes = [constant_node("t", np.array([0, 2, -1])),
             helper.make_node("Reshape", ["x", "t"], ["r"]),
             constant_node("sizes", np.array([1, 2])),
             helper.make_node("Split", ["r", "sizes"], ["p", "q"], axis=2),
             helper.make_node("Shape", ["q"], ["qs"], end=1),
             constant_node("four", np.array([4])),
             helper.make_node("Concat", ["qs", "four"], ["target"], axis=0),
             helper.make_node("Reshape", ["q", "target"], ["y"]),
             helper.make_node("Shape", ["p"], ["ps"]),
             constant_node("i2", np.array(2)),
             helper.make_node("Gather", ["ps", "i2"], ["pw"]),
             helper.make_node("Cast", ["pw"], ["pwf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["y", "pwf"], ["z"])]
    proto = make_model(nodes, [vinfo("x", shape=["N", 6])], [vinfo("z", shape=["N", 4])])
    proto.graph.value_info.extend([vinfo("r", shape=["unk__1", 2, "unk__2"]),
                                   vinfo("q", shape=["unk__1", 2, "unk__3"])])
    folded, report, out = fold_proto(proto, tmp_path)
    assert "Shape" not in _ops(folded) and "Concat" not in _ops(folded)
    assert report.dynamic_shapes == []
    _same(proto, out, [{"x": _rand(1, 6)}, {"x": _rand(3, 6)}])


def test_a_target_element_that_may_be_0_is_not_taken_for_the_dim():
    # Reshape(x: [M, 4], Concat(Shape(z)[0:1], [-1])) with z: [N]: where N is 0 the 0 copies M,
    # so the result's dim 0 is "N, or M where N is 0", never plainly N
    nodes = [helper.make_node("Shape", ["z"], ["s"]),
             constant_node("m1", np.array([-1])),
             helper.make_node("Concat", ["s", "m1"], ["t"], axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["M", 4]), vinfo("z", shape=["N"])],
                       [vinfo("y", shape=[None, None])])
    model = ir.from_proto(onnx.shape_inference.infer_shapes(proto))
    from onnxfold.ir.constants import source_array

    shape_values(model.graph, source_array, shared_dim_names(model),
                 steps=load_catalogue().shape_steps)
    y = model.graph.outputs[0]
    first = dim_symbol(y, 0)
    assert isinstance(first, Sym) and first != Sym(("dim", "N"))
    assert first.expr[0] == "Reshape0"
    # and onnxruntime agrees: N = 0 copies M
    x = np.zeros((3, 4), np.float32)
    assert run_ort(proto, {"x": x, "z": np.zeros(0, np.float32)})[0].shape == (3, 4)


def _trigram_embedding():
    """MobileBERT's trigram embedding, as TorchScript writes it: x [N, S, 4] beside
    ``pad(x[:, 1:])`` and ``pad(x[:, :-1])`` on the feature axis, plus a position table cut to
    the sequence (e); another value of x reshaped by e's dims, read back with Shape."""
    big = np.iinfo(np.int64).max
    nodes = [constant_node("one", np.array([1])), constant_node("zero", np.array([0])),
             constant_node("big", np.array([big])), constant_node("m1", np.array([-1])),
             helper.make_node("Slice", ["x", "one", "big", "one"], ["tail"]),
             constant_node("after", np.array([0, 0, 0, 0, 1, 0])),
             helper.make_node("Pad", ["tail", "after"], ["p"]),
             helper.make_node("Slice", ["x", "zero", "m1", "one"], ["head"]),
             constant_node("before", np.array([0, 1, 0, 0, 0, 0])),
             helper.make_node("Pad", ["head", "before"], ["q"]),
             helper.make_node("Concat", ["p", "x", "q"], ["c"], axis=2),
             helper.make_node("Shape", ["x"], ["xs"]), constant_node("i1", np.array(1)),
             helper.make_node("Gather", ["xs", "i1"], ["s"]),
             helper.make_node("Unsqueeze", ["s", "zero"], ["su"]),
             helper.make_node("Slice", ["table", "zero", "su", "one"], ["pos"]),
             helper.make_node("Add", ["c", "pos"], ["e"]),
             helper.make_node("Shape", ["e"], ["es"], end=2),
             constant_node("split", np.array([3, 4])),
             helper.make_node("Concat", ["es", "split"], ["target"], axis=0),
             helper.make_node("Concat", ["x", "x", "x"], ["xxx"], axis=2),
             helper.make_node("Reshape", ["xxx", "target"], ["r"]),
             helper.make_node("Relu", ["e"], ["y"])]
    table = helper.make_tensor("table", TensorProto.FLOAT, [1, 16, 12],
                               np.arange(192, dtype=np.float32))
    proto = make_model(nodes, [vinfo("x", shape=["N", "S", 4])],
                       [vinfo("y", shape=["N", "S", 12]), vinfo("r", shape=["N", "S", 3, 4])],
                       [table])
    # as TorchScript's pads, computed, leave them: dims of their own names
    proto.graph.value_info.extend([vinfo("p", shape=["N", "unk__1", 4]),
                                   vinfo("q", shape=["N", "unk__2", 4]),
                                   vinfo("c", shape=["N", "unk__1", 12]),
                                   vinfo("e", shape=["N", "unk__3", 12])])
    return proto


def test_a_padded_slice_and_a_cut_position_table_keep_the_sequence(tmp_path):
    # Concat's other axes agree: the sequence is x's, not the Pad's own dim; Add(c, pos) with
    # pos [1, min(S, 16), 12] is S wherever it runs: the Reshape target folds to [0, 0, 3, 4]
    # (the Shape left is the one cutting the table)
    proto = _trigram_embedding()
    folded, _, out = fold_proto(proto, tmp_path)
    assert _ops(folded).count("Shape") == 1
    target = next(n for n in folded.graph.node if n.op_type == "Reshape").input[1]
    assert onnx.numpy_helper.to_array(next(
        t for t in folded.graph.initializer if t.name == target)).tolist() == [0, 0, 3, 4]
    _same(proto, out, [{"x": _rand(2, 5, 4)}, {"x": _rand(1, 1, 4)}, {"x": _rand(3, 16, 4)}])


def _walked(proto):
    """The model of ``proto`` and its shape values, as the rewrite driver's walk gives them
    (after onnx's shape inference, as in a run)."""
    from onnxfold.ir.constants import source_array

    model = ir.from_proto(onnx.shape_inference.infer_shapes(proto))
    known = shape_values(model.graph, source_array, shared_dim_names(model),
                         steps=load_catalogue().shape_steps)
    return model, known


def _produced(model, op_type):
    return next(n for n in model.graph if n.op_type == op_type).outputs[0]


def test_a_step_reads_small_ints_the_walk_proved_before_they_fold():
    """A Slice's axes computed from a constant (a Cast of it, not folded yet) are read from
    the walk's shape value: its dims are refined in the first walk. Read only from constants'
    data, they stayed unrefined until the first fold, and every reader downstream was tried
    again by the next rewrite call (a dynamo Llama's rotary slices)."""
    nodes = [constant_node("axes32", np.array([1], np.int32)),
             helper.make_node("Cast", ["axes32"], ["axes"], to=TensorProto.INT64),
             constant_node("starts", np.array([0])), constant_node("ends", np.array([3])),
             helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"])]
    model, known = _walked(make_model(nodes, [vinfo("x", shape=["N", 6])],
                                      [vinfo("y", shape=[None, None])]))
    assert known[_produced(model, "Cast")].elements == (1,)
    assert _produced(model, "Slice").meta[REFINED_KEY] == (Sym(("dim", "N")), 3)


def test_a_float_constant_of_whole_numbers_cast_to_an_integer_is_a_shape_value():
    """arange's start and step: ``Cast(0.0)`` and ``Cast(1.0)`` to int64 are 0 and 1, and the
    Range over a dim is that dim long; a float that is not a whole number is no shape value
    (a cast would truncate it)."""
    def arange(start, delta):
        nodes = [helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
                 helper.make_node("Squeeze", ["s"], ["n"]),
                 constant_node("f0", np.array(start, np.float32)),
                 constant_node("f1", np.array(delta, np.float32)),
                 helper.make_node("Cast", ["f0"], ["i0"], to=TensorProto.INT64),
                 helper.make_node("Cast", ["f1"], ["i1"], to=TensorProto.INT64),
                 helper.make_node("Range", ["i0", "n", "i1"], ["r"])]
        return _walked(make_model(nodes, [vinfo("x", shape=["N", 6])],
                                  [vinfo("r", TensorProto.INT64, shape=[None])]))

    model, known = arange(0.0, 1.0)
    assert [known[v].elements for v in (model.graph.node(4).outputs[0],
                                         model.graph.node(5).outputs[0])] == [(0,), (1,)]
    assert _produced(model, "Range").meta[REFINED_KEY] == (Sym(("dim", "N")),)
    model, known = arange(0.5, 1.0)
    assert known.get(model.graph.node(4).outputs[0]) is None
    assert REFINED_KEY not in _produced(model, "Range").meta
