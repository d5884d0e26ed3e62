"""A rewrite resumed after other passes changed the model (``driver.Resumable``: the fold
rewired readers to new constants, pruning removed a reader, inference made a shape known)
tries the nodes those changes concern, and finds what a fresh rewrite of the whole model
finds."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

from onnxfold.declare.catalogue import load_catalogue
from onnxfold.fold.materialize import replacement
from onnxfold.rewrite.driver import Resumable, Rewritten, rewrite


def _model(nodes: list[onnx.NodeProto], weights: list[onnx.TensorProto],
           x_shape: list[int], out: str = "y") -> ir.Model:
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                         [h.make_tensor_value_info(out, TensorProto.FLOAT, None)], weights)
    return ir.from_proto(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))


def _node(model: ir.Model, name: str) -> ir.Node:
    return next(node for node in model.graph if node.name == name)


def _resumed_and_fresh(build: Callable[[], ir.Model], change: Callable[[ir.Model], None]
                       ) -> tuple[Rewritten, ir.Model, Rewritten, ir.Model]:
    """Rewrite ``build()``, ``change`` it, rewrite it again resumed; and the same model
    rewritten, changed and rewritten fresh."""
    catalogue = load_catalogue()
    resumed, resume = build(), Resumable()
    rewrite(resumed, catalogue, resume=resume)
    change(resumed)
    again = rewrite(resumed, catalogue, resume=resume)
    fresh = build()
    rewrite(fresh, catalogue)
    change(fresh)
    return again, resumed, rewrite(fresh, catalogue), fresh


def _ops(model: ir.Model) -> list[str]:
    return [node.op_type for node in model.graph]


def _unsqueezes(second_axes_from_add: bool = False, extra_reader: bool = False
                ) -> Callable[[], ir.Model]:
    """``y = Unsqueeze(Unsqueeze(x, [0]) named "first", a2)`` (merge_unsqueezes' pattern,
    which needs "first" read once and the data of both axes), with ``a2`` the output of an
    Add of two constants (not folded yet: no data) or a constant, and "first" read by a Relu
    too (``extra_reader``)."""
    def build() -> ir.Model:
        nodes = [h.make_node("Unsqueeze", ["x", "a1"], ["u1"], name="first"),
                 h.make_node("Unsqueeze", ["u1", "a2"], ["y"], name="second")]
        weights = [nh.from_array(np.array([0], np.int64), "a1")]
        if second_axes_from_add:
            nodes.insert(0, h.make_node("Add", ["c1", "c2"], ["a2"], name="add"))
            weights += [nh.from_array(np.array([0], np.int64), "c1"),
                        nh.from_array(np.array([0], np.int64), "c2")]
        else:
            weights.append(nh.from_array(np.array([0], np.int64), "a2"))
        if extra_reader:
            nodes.append(h.make_node("Relu", ["u1"], ["dead"], name="reader"))
        return _model(nodes, weights, [2, 3])
    return build


def test_a_reader_removed_since_lets_a_single_use_pattern_match():
    def prune(model: ir.Model) -> None:
        model.graph.remove(_node(model, "reader"), safe=True)

    again, resumed, fresh_again, fresh = _resumed_and_fresh(
        _unsqueezes(extra_reader=True), prune)
    assert again.hits == fresh_again.hits and again.hits["merge_unsqueezes"] == 1
    assert _ops(resumed) == _ops(fresh) == ["Unsqueeze"]


def test_a_reader_rewired_to_a_new_constant_is_tried_again():
    def fold_the_add(model: ir.Model) -> None:
        add = _node(model, "add")
        new = replacement(add.outputs[0], np.array([0], np.int64), ("add",))
        model.graph.register_initializer(new)
        model.graph.remove(add, safe=True)

    again, resumed, fresh_again, fresh = _resumed_and_fresh(
        _unsqueezes(second_axes_from_add=True), fold_the_add)
    assert again.hits == fresh_again.hits and again.hits["merge_unsqueezes"] == 1
    assert _ops(resumed) == _ops(fresh) == ["Unsqueeze"]


def _relu_reshaped() -> ir.Model:
    """``y = Reshape(Relu(x), [2, 3])`` with ``x`` of unknown shape: the Reshape is a no-op
    only once the Relu's output is known to be ``[2, 3]``."""
    nodes = [h.make_node("Relu", ["x"], ["r"], name="relu"),
             h.make_node("Reshape", ["r", "shape"], ["y"], name="reshape")]
    return _model(nodes, [nh.from_array(np.array([2, 3], np.int64), "shape")], ["n", "m"])


def test_the_readers_of_a_shape_made_known_since_are_tried_again():
    def infer(model: ir.Model) -> None:
        value = _node(model, "relu").outputs[0]
        value.dtype, value.shape = ir.DataType.FLOAT, ir.Shape([2, 3])

    again, resumed, fresh_again, fresh = _resumed_and_fresh(_relu_reshaped, infer)
    assert again.hits == fresh_again.hits and sum(again.hits.values()) == 1
    assert _ops(resumed) == _ops(fresh) == ["Relu"]


def test_without_a_change_a_resumed_rewrite_tries_nothing():
    catalogue, resume = load_catalogue(), Resumable()
    model = _unsqueezes(extra_reader=True)()
    rewrite(model, catalogue, resume=resume)
    again = rewrite(model, catalogue, resume=resume)
    assert again.tried == 0 and not again.hits and again.converged
    assert rewrite(model, catalogue).tried > 0  # a fresh one tries every node


def _folded_weight_freed(model: ir.Model, resume: Resumable) -> bool:
    """Fold the Transpose of weight ``w`` as the fold does (a new initializer, the node and
    the weight gone); whether ``w`` is then freed, and the next call tries the rewired MatMul."""
    weight = weakref.ref(model.graph.initializers["w"])
    transpose = _node(model, "transpose")
    shape = tuple(reversed(model.graph.initializers["w"].shape or ()))
    model.graph.register_initializer(
        replacement(transpose.outputs[0], np.ones(shape, np.float32), ("transpose",)))
    model.graph.remove(transpose, safe=True)
    model.graph.initializers.pop("w")
    del transpose
    gc.collect()
    freed = weight() is None
    assert rewrite(model, load_catalogue(), resume=resume).tried > 0  # the MatMul, rewired
    return freed


def test_what_a_resumed_rewrite_keeps_does_not_keep_a_folded_weight_alive():
    """Between calls the resume holds the model weakly: a weight the fold replaced is freed
    (a strong reference would keep every replaced weight of a large model until the end)."""
    nodes = [h.make_node("Transpose", ["w"], ["wt"], name="transpose", perm=[1, 0]),
             h.make_node("MatMul", ["x", "wt"], ["y"], name="matmul")]
    model = _model(nodes, [nh.from_array(np.ones((3, 2), np.float32), "w")], [2, 3])
    resume = Resumable()
    rewrite(model, load_catalogue(), resume=resume)
    assert _folded_weight_freed(model, resume)


def test_shape_values_kept_between_calls_keep_no_folded_weight_alive():
    """The resume keeps the last sweep's shape values (small) across the fold; they once
    read constants through their sweep's view, which holds every constant of the graph: a
    weight the fold replaced stayed alive through them, whatever the collector did. Here a
    rule asks for the shape values (the Shape of x builds the Reshape's target)."""
    nodes = [h.make_node("Transpose", ["w"], ["wt"], name="transpose", perm=[1, 0]),
             h.make_node("MatMul", ["x", "wt"], ["m"], name="matmul"),
             h.make_node("Shape", ["x"], ["s"], name="shape"),
             h.make_node("Reshape", ["m", "s"], ["y"], name="reshape")]
    model = _model(nodes, [nh.from_array(np.ones((3, 3), np.float32), "w")], ["N", 3])
    resume = Resumable()
    rewrite(model, load_catalogue(), resume=resume)
    assert resume._work is not None and any(  # (what this test is about)
        seen.shape_values is not None for seen in resume._work.seen.values())
    assert _folded_weight_freed(model, resume)
