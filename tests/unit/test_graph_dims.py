"""The check's own reading of symbolic dims (``check/inputs/graph_dims``), and the input
planner standing apart from the fold: a check never calls the fold's symbolic walk or the
rules' shape steps (issue 82 item 5)."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

import onnxfold
from onnxfold.analysis.shapes import infer_shapes
from onnxfold.check.inputs.feeds import synthetic_feeds
from onnxfold.check.inputs.graph_dims import GraphDims, factors, linear, named, parse
from tests.support.models import make_model, tensor
from tests.support.stand_apart import calls_from_the_check

I64, F = TensorProto.INT64, TensorProto.FLOAT


def _flattened_mask_decoder(reshaped: bool = False) -> onnx.ModelProto:
    """A TorchScript-style mask read: ``attention_mask [batch, total]`` flattened to
    ``[batch*total, 1]`` and gathered at ``row * total + position`` for positions
    ``0 .. past + seq - 1`` (``past`` read off the cache, ``seq`` off the ids). It runs only
    where ``total = past + seq``; nothing declares that but the graph's arithmetic.
    ``reshaped``: the mask goes through ``Reshape(mask, [batch, -1])`` first, as GPT-2's
    TorchScript export has it (the fold's walk did not read the -1 as ``total``: the planner
    guessed the mask's length, 16 where 32 was needed)."""
    mask = "mask_rows" if reshaped else "attention_mask"
    nodes = [
        helper.make_node("Unsqueeze", ["batch_len", "axis0"], ["batch_1d"]),
        helper.make_node("Concat", ["batch_1d", "minus_one"], ["rows_shape"], axis=0),
        helper.make_node("Reshape", ["attention_mask", "rows_shape"], ["mask_rows"]),
    ] if reshaped else []
    nodes = [
        helper.make_node("Shape", ["past_key"], ["past_shape"]),
        helper.make_node("Gather", ["past_shape", "two"], ["past_len"], axis=0),
        helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
        helper.make_node("Gather", ["ids_shape", "one"], ["seq_len"], axis=0),
        helper.make_node("Gather", ["ids_shape", "zero"], ["batch_len"], axis=0),
        helper.make_node("Add", ["past_len", "seq_len"], ["total_len"]),
        helper.make_node("Range", ["zero", "total_len", "one"], ["positions"]),
        helper.make_node("Range", ["zero", "batch_len", "one"], ["rows"]),
        helper.make_node("Unsqueeze", ["rows", "axis1"], ["rows_col"]),
        *nodes,
        helper.make_node("Shape", [mask], ["mask_shape"]),
        helper.make_node("Gather", ["mask_shape", "axis1"], ["mask_len"], axis=0),
        helper.make_node("Mul", ["rows_col", "mask_len"], ["row_starts"]),
        helper.make_node("Unsqueeze", ["positions", "axis0"], ["positions_row"]),
        helper.make_node("Add", ["row_starts", "positions_row"], ["index"]),
        helper.make_node("Cast", [mask], ["mask_float"], to=F),
        helper.make_node("Flatten", ["mask_float"], ["flat"], axis=2),
        helper.make_node("Gather", ["flat", "index"], ["picked"], axis=0),
        helper.make_node("ReduceSum", ["past_key"], ["past_sum"], keepdims=0),
        helper.make_node("Add", ["picked", "past_sum"], ["y"]),
    ]
    scalars = [tensor(name, np.array(v, np.int64)) for name, v in
               (("zero", 0), ("one", 1), ("two", 2))]
    axes = [tensor("axis0", np.array([0], np.int64)), tensor("axis1", np.array([1], np.int64)),
            tensor("minus_one", np.array([-1], np.int64))]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("input_ids", I64, ["batch", "seq"]),
         helper.make_tensor_value_info("past_key", F, ["batch", 2, "past", 8]),
         helper.make_tensor_value_info("attention_mask", I64, ["batch", "total"])],
        [helper.make_tensor_value_info("y", F, [None, None, None])], scalars + axes)


def _walked(model: onnx.ModelProto) -> tuple[ir.Model, GraphDims]:
    graph = ir.from_proto(model)
    infer_shapes(graph)
    return graph, GraphDims(graph)


def _value(graph: ir.Model, name: str) -> ir.Value:
    return next(out for node in graph.graph for out in node.outputs if out.name == name)


def test_the_walk_writes_computed_lengths_in_the_inputs_dims():
    graph, known = _walked(_flattened_mask_decoder())
    assert linear(known.dim(_value(graph, "positions"), 0)) == {"past": 1, "seq": 1}
    assert known.dims(_value(graph, "index")) == [{("batch",): 1},
                                                   {("past",): 1, ("seq",): 1}]
    flat = known.dim(_value(graph, "flat"), 0)
    assert flat == {("batch", "total"): 1} and factors(flat) == [{("batch",): 1},
                                                                 {("total",): 1}]
    assert known.values[_value(graph, "mask_len")] == [{("total",): 1}]


@pytest.mark.parametrize("reshaped", [False, True])
def test_the_planner_derives_the_mask_length_the_gather_implies(reshaped):
    """The relation is read (not guessed): every binding runs, the mask as long as past and
    sequence together, and the summary says so."""
    model = _flattened_mask_decoder(reshaped)
    feeds, _ = synthetic_feeds(model)
    assert feeds["attention_mask"].shape[1] == feeds["past_key"].shape[2] + \
        feeds["input_ids"].shape[1]
    result = onnxfold.compare(model, model, n=3)
    assert result.ok, result.summary()
    assert all(b["total"] == b["past"] + b["seq"] for b in result.bindings)
    assert len(result.bindings) == 3 and "dims related by the graph" in result.summary()


def _shape_ops() -> onnx.ModelProto:
    """Reshape with 0 and -1, a Slice to the end, a Concat along a dynamic axis, Shape with
    start and end, Expand to a computed shape, ConstantOfShape, Transpose, MatMul, a
    reduction over axes given as an input, a Split in equal parts, a Pad."""
    nodes = [
        helper.make_node("Reshape", ["x", "keep_split"], ["r"]),  # [b, n*4] -> [b, n, 4]
        helper.make_node("Slice", ["x", "s1", "big", "axis1"], ["sl"]),  # [b, 4n - 1]
        helper.make_node("Concat", ["x", "z"], ["cat"], axis=1),  # [b, 4n + m]
        helper.make_node("Shape", ["cat"], ["tail"], start=-1),  # [4n + m]
        helper.make_node("Shape", ["x"], ["head"], end=1),  # [b]
        helper.make_node("Concat", ["head", "tail"], ["target"], axis=0),
        helper.make_node("ConstantOfShape", ["target"], ["zeros"]),  # [b, 4n + m]
        helper.make_node("Expand", ["col", "target"], ["wide"]),  # [b, 4n + m]
        helper.make_node("Transpose", ["wide"], ["t"], perm=[1, 0]),  # [4n + m, b]
        helper.make_node("MatMul", ["t", "x"], ["mm"]),  # [4n + m, 4n]
        helper.make_node("ReduceSum", ["cat", "axis1"], ["red"]),  # [b, 1]
        helper.make_node("Split", ["r"], ["h0", "h1"], axis=2, num_outputs=2),  # [b, n, 2]
        helper.make_node("Pad", ["x", "pads"], ["pad"]),  # [b + 1, 4n + 2]
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", F, ["b", "4*n"]),
         helper.make_tensor_value_info("z", F, ["b", "m"]),
         helper.make_tensor_value_info("col", F, ["b", 1]),
         helper.make_tensor_value_info("w", F, ["n"])],  # (n an input's dim: 4*n is 4 n)
        [helper.make_tensor_value_info(o, F, None)
         for o in ("r", "sl", "zeros", "mm", "red", "h0", "h1", "pad")],
        [tensor("keep_split", np.array([0, -1, 4], np.int64)),
         tensor("s1", np.array([1], np.int64)), tensor("big", np.array([2**62], np.int64)),
         tensor("axis1", np.array([1], np.int64)),
         tensor("pads", np.array([0, 1, 1, 1], np.int64))], opset=18)


def test_shape_ops_follow_the_dims():
    graph, known = _walked(_shape_ops())
    b, n4, m = {("b",): 1}, {("n",): 4}, {("m",): 1}
    assert known.dims(_value(graph, "r")) == [b, {("n",): 1}, {(): 4}]
    assert known.dims(_value(graph, "sl")) == [b, {("n",): 4, (): -1}]
    assert known.dims(_value(graph, "zeros")) == [b, {**n4, **m}]
    assert known.dims(_value(graph, "wide")) == [b, {**n4, **m}]
    assert known.dims(_value(graph, "mm")) == [{**n4, **m}, n4]
    assert known.dims(_value(graph, "red")) == [b, {(): 1}]
    assert known.dims(_value(graph, "h1")) == [b, {("n",): 1}, {(): 2}]
    assert known.dims(_value(graph, "pad")) == [{("b",): 1, (): 1}, {**n4, (): 2}]


def test_broadcasts_keep_each_axis_its_own():
    """A broadcasting op of equal shapes keeps each axis's dim in its place; a 1 or a
    shorter shape gives way to the other's dim."""
    model = make_model(
        [helper.make_node("Add", ["x", "x"], ["same"]),
         helper.make_node("Mul", ["col", "x"], ["widened"]),
         helper.make_node("Sub", ["x", "w4"], ["shorter"])],
        [helper.make_tensor_value_info("x", F, ["b", "4*n"]),
         helper.make_tensor_value_info("col", F, ["b", 1]),
         helper.make_tensor_value_info("w4", F, ["4*n"]),
         helper.make_tensor_value_info("w", F, ["n"])],
        [helper.make_tensor_value_info(o, F, None) for o in ("same", "widened", "shorter")])
    graph = ir.from_proto(model)  # (no inference: the walk's own dims alone)
    known = GraphDims(graph)
    for name in ("same", "widened", "shorter"):
        assert known.dims(_value(graph, name)) == [{("b",): 1}, {("n",): 4}], name


@pytest.mark.parametrize(("text", "form"), [
    ("s0 + s1", {"s0": 1, "s1": 1}), ("2*s0 - 1", {"s0": 2, "": -1}), ("seq", {"seq": 1}),
    ("Min(64, s53)", None), ("s0//2", None), ("s0 +", None), ("", None)])
def test_the_check_reads_dynamos_expression_names_itself(text, form):
    assert parse(text) == form
    assert named(text) == ({((k,) if k else ()): v for k, v in form.items()}
                           if form else {(text,): 1})


def test_an_op_the_walk_misreads_keeps_what_inference_says():
    """A Gather of a shape at an index past its end: the walk fails on that node alone and
    takes onnx's dims for it; the nodes after it are still walked."""
    model = make_model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "far"], ["bad"], axis=0),
         helper.make_node("Concat", ["x", "x"], ["y"], axis=1)],
        [helper.make_tensor_value_info("x", F, ["b", "n"])],
        [helper.make_tensor_value_info("bad", I64, None),
         helper.make_tensor_value_info("y", F, None)],
        [tensor("far", np.array([5], np.int64))])
    graph, known = _walked(model)
    assert _value(graph, "bad") not in known.values
    assert known.dims(_value(graph, "y")) == [{("b",): 1}, {("n",): 2}]


def test_the_check_never_calls_the_folds_shape_code():
    """``simplify(check_n=3)`` on the decoder: the fold walks its shapes (not from a check
    frame), the check plans its inputs with its own walk."""
    model = _flattened_mask_decoder()
    result: list = []
    found = calls_from_the_check(lambda: result.append(onnxfold.simplify(model, check_n=3)))
    assert result[0][1] and not found, found


def test_the_probe_sees_a_call_of_the_folds_walk_from_a_check_module():
    """The probe of the test above is not blind: the fold's walk called from code whose file
    is under ``onnxfold/check/`` is counted."""
    from onnxfold.analysis.symbolic import shape_values
    from onnxfold.declare.catalogue import load_catalogue
    from onnxfold.ir.constants import constant_array
    graph = ir.from_proto(_flattened_mask_decoder())
    code = compile("shape_values(graph.graph, constant_array, steps=steps)",
                   "/x/onnxfold/check/probe.py", "exec")
    scope = {"shape_values": shape_values, "constant_array": constant_array, "graph": graph,
             "steps": load_catalogue().shape_steps}
    assert calls_from_the_check(lambda: exec(code, scope))


def test_dims_multiplied_again_and_again_stay_bounded():
    """A hostile graph squares a sum of five dims forty times (its polynomial would have
    billions of terms) and a number forty times (a number of 2**40 digits): the walk stops
    following both at its bounds, in no time, and plans the inputs as without them."""
    names = [f"d{i}" for i in range(5)]
    nodes = [helper.make_node("Shape", [n], [f"{n}_s"]) for n in names]
    nodes += [helper.make_node("Add", [f"{a}_s" if i == 0 else f"sum{i}", f"{b}_s"],
                               [f"sum{i + 1}" if i < len(names) - 2 else "v0"])
              for i, (a, b) in enumerate(itertools.pairwise(names))]
    nodes.append(helper.make_node("Identity", ["three"], ["c0"]))
    for i in range(40):
        nodes.append(helper.make_node("Mul", [f"v{i}", f"v{i}"], [f"v{i + 1}"]))
        nodes.append(helper.make_node("Mul", [f"c{i}", f"c{i}"], [f"c{i + 1}"]))
    nodes.append(helper.make_node("Add", ["v40", "c40"], ["y"]))
    model = make_model(nodes, [helper.make_tensor_value_info(n, F, [n]) for n in names],
                       [helper.make_tensor_value_info("y", I64, [1])],
                       [tensor("three", np.array([3], np.int64))])
    graph, known = _walked(model)
    assert known.values[_value(graph, "v1")] == [
        {**{(a, b): 2 for a in names for b in names if a < b}, **{(a, a): 1 for a in names}}]
    assert known.values[_value(graph, "v2")] == [None]  # 15 x 15 products: past the bounds
    assert known.values[_value(graph, "c5")] == [{(): 3 ** 32}]
    assert known.values[_value(graph, "c6")] == [None]  # 3**64: past int64
    feeds, _ = synthetic_feeds(model)
    assert [feeds[n].shape for n in names] == [(1,)] * len(names)  # axis 0: the batch


def test_a_dim_named_with_a_huge_number_is_a_name():
    assert parse("9" * 5000) is None and parse(f"{'9' * 5000}*s0") is None
    assert named("9" * 5000) == {("9" * 5000,): 1}
