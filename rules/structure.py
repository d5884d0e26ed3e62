"""Structural rewrites that remove nodes exporters leave around dynamic-shape code (#13).

- ``SplitToSequence`` read only by ``SequenceAt`` at constant positions is a ``Split``.
- ``Reshape -> elementwise ops with scalar constants -> Reshape`` (torch's ``view`` around an
  activation): the elementwise ops run on the first Reshape's input, so the first Reshape goes
  and the second one often reshapes to its input's own shape (then ``drop_noop`` removes it;
  neutral elements, ``x * 1`` and the like, are ``no_ops.py``'s).
- An input of a ``Concat`` that is empty along its axis for every value of the dynamic dims
  goes (its other dims provably those of an input that stays).
- ``Unsqueeze(Unsqueeze(x, a1), a2)`` is one ``Unsqueeze``.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from onnxfold.declare import (
    GraphView,
    Match,
    OpBuilder,
    Out,
    P,
    Reject,
    Replacement,
    Var,
    pattern,
)

from .fusable import is_mask_widening, reshapes_a_gemm
from .op_groups import POINTWISE

MAX_CHUNKS = 64  # a Split with more outputs than this is not worth writing out
MAX_REGION = 32  # elementwise nodes between two Reshapes


# --- SplitToSequence -> Split ---------------------------------------------------------------

def _position(ctx: GraphView, at: ir.Node, count: int) -> int | None:
    if len(at.inputs) < 2 or at.inputs[1] is None:
        return None
    pos = ctx.array(at.inputs[1])
    if pos is None or pos.size != 1 or pos.dtype.kind not in "iu":
        return None
    index = int(pos.reshape(-1)[0])
    index = index + count if index < 0 else index
    return index if 0 <= index < count else None


def _chunks(ctx: GraphView, node: ir.Node, shape: ir.Shape) -> tuple[int, list[int]] | Reject:
    """(axis, chunk sizes) of a SplitToSequence of an input of ``shape`` whose split is
    known."""
    rank = len(shape)
    axis = node.attributes.get_int("axis", 0)
    if not -rank <= axis < rank:
        return Reject("axis out of range")
    axis %= rank
    dim = shape[axis]
    static = dim if isinstance(dim, int) else None
    split = node.inputs[1] if len(node.inputs) > 1 else None
    if split is None:
        if node.attributes.get_int("keepdims", 1) == 0:
            return Reject("keepdims=0 squeezes the chunks")
        if static is None:
            return Reject("split axis dim not static")
        return axis, [1] * static
    if node.attributes.get_int("keepdims", 1) == 0:
        return Reject("keepdims=0 with a split: onnxruntime squeezes a scalar split's chunks")
    sizes = ctx.array(split)
    if sizes is None or sizes.dtype.kind not in "iu" or sizes.ndim > 1:
        return Reject("split sizes not constant")
    if sizes.ndim == 0:
        size = int(sizes)
        if static is None or size <= 0 or static == 0:
            return Reject("chunk count depends on a dynamic dim")
        chunks = [size] * (static // size) + ([static % size] if static % size else [])
        return axis, chunks
    chunks = [int(s) for s in sizes]
    if any(s < 0 for s in chunks) or (static is not None and sum(chunks) != static):
        return Reject("split sizes do not add up to the dim")
    return axis, chunks


def _readers(ctx: GraphView, seq: ir.Value, count: int) -> list[tuple[ir.Node, int]] | None:
    found = []
    # what to build: a SequenceAt of the split for each reader of the sequence
    for at, read_at in ctx.readers(seq):
        if at.op_type != "SequenceAt" or at.domain not in ("", "ai.onnx") or read_at != 0:
            return None
        index = _position(ctx, at, count)
        if index is None:
            return None
        found.append((at, index))
    return found


def _splittable(ctx: GraphView, node: ir.Node, x: ir.Value) -> bool | Match | Reject:
    # what to build: a sequence nothing reads is split into nothing
    if not ctx.readers(node.outputs[0]):
        return False
    shape = x.shape
    if shape is None:
        return Reject("input rank not known")
    plan = _chunks(ctx, node, shape)
    if isinstance(plan, Reject):
        return plan
    axis, chunks = plan
    if not chunks or len(chunks) > MAX_CHUNKS:
        return Reject(f"{len(chunks)} chunks")
    readers = _readers(ctx, node.outputs[0], len(chunks))
    if readers is None:
        return Reject("the sequence is read by more than SequenceAt at constant positions")
    return Match(axis=axis, chunks=chunks, readers=readers, dims=list(shape))


def split_node(op: OpBuilder, x: ir.Value, axis: int, sizes: list[int], outputs: list[Out]
               ) -> tuple[ir.Value, ...]:
    """The parts of a new Split of ``x`` along ``axis`` into parts of ``sizes`` (one
    ``outputs`` entry each): the sizes are an input from opset 13 on, the ``split`` attribute
    before."""
    if op.opset >= 13:
        return op.outputs("Split", x, op.constant(np.asarray(sizes, np.int64), "split_sizes"),
                          axis=axis, _outputs=outputs)
    return op.outputs("Split", x, axis=axis, split=sizes, _outputs=outputs)


@pattern(P("SplitToSequence", Var("x"), ..., name="node"), check=_splittable,
         name="split_to_sequence_as_split")
def split_to_sequence_as_split(op: OpBuilder, x: ir.Value, axis: int, chunks: list[int],
                               readers: list[tuple[ir.Node, int]], dims: list[int | ir.SymbolicDim]
                               ) -> Replacement:
    """SplitToSequence(x, s) read by SequenceAt(i) at constant i -> Split(x, sizes)[i]."""
    parts = split_node(op, x, axis, chunks, [
        Out(f"{x.name or 'split'}_chunk", x.dtype,
            ir.Shape([size if i == axis else d for i, d in enumerate(dims)]))
        for size in chunks])
    return Replacement(values={at.outputs[0]: parts[index] for at, index in readers})


# --- Reshape -> elementwise -> Reshape ------------------------------------------------------



def _region(ctx: GraphView, y: ir.Value, rank: int
            ) -> tuple[list[ir.Node], ir.Node] | Reject | None:
    """The pointwise nodes computing ``y`` from one Reshape's output and scalar constants, and
    that Reshape; None if there is none. (The driver refuses the rewrite where a value in
    between, which takes the shape of the Reshape's input, is read outside them.)"""
    nodes: dict[ir.Node, None] = {}
    inner: ir.Node | None = None
    todo = [y]
    while todo:
        value = todo.pop()
        node = value.producer()
        if node is None:
            return None
        if node.op_type == "Reshape" and node.domain in ("", "ai.onnx"):
            if inner is not None and inner is not node:
                return Reject("more than one Reshape feeds the elementwise ops")
            inner = node
            continue
        if node in nodes:
            continue
        if node.op_type not in POINTWISE or node.domain not in ("", "ai.onnx") or \
                len(node.outputs) != 1 or len(nodes) >= MAX_REGION:
            return None
        nodes[node] = None
        refused = _operands(ctx, node, rank, todo)
        if refused is not None:
            return refused
    if inner is None or not nodes:
        return None
    return list(nodes), inner


def _operands(ctx: GraphView, node: ir.Node, rank: int, todo: list[ir.Value]
              ) -> Reject | None:
    """Queue ``node``'s computed inputs on ``todo``; refuse a constant one that is not a
    scalar of at most ``rank`` dims."""
    for v in node.inputs:
        if v is None:
            continue
        if ctx.is_constant(v):
            shape = ctx.shape(v)
            if shape is None or math.prod(shape) != 1 or len(shape) > rank:
                return Reject("a constant operand is not a scalar of at most the rank")
        else:
            todo.append(v)
    return None


def _unwrappable(ctx: GraphView, outer: ir.Node, y: ir.Value, target: ir.Value
                 ) -> bool | Match | Reject:
    producer = y.producer()
    shape = ctx.array(target)
    if producer is None or producer.op_type not in POINTWISE or shape is None:
        return False
    src = _source(ctx, y)
    if src is None or isinstance(src, Reject):
        return src if isinstance(src, Reject) else False
    if (shape == 0).any() and not outer.attributes.get_int("allowzero", 0):
        return Reject("the outer target copies dims (0 entries)")
    return src


def _source(ctx: GraphView, y: ir.Value) -> Match | Reject | None:
    """The region before ``y`` (``region``), its inner Reshape (``inner``), and that
    Reshape's input (``x``) and its shape (``dims``)."""
    # the constants must broadcast into the inner Reshape's input: rank first
    first = _region(ctx, y, rank=1 << 30)
    if first is None or isinstance(first, Reject):
        return first
    _, inner = first
    x = inner.inputs[0]
    dims = x.shape if x is not None else None
    if x is None or dims is None:
        return Reject("rank of the Reshape's input not known")
    if reshapes_a_gemm(inner):
        return Reject("the Reshape of a Gemm's product: onnxruntime's GPT-2 optimizer expects "
                      "it (rules/fusable.py)")
    found = _region(ctx, y, rank=len(dims))
    if found is None or isinstance(found, Reject):
        return found
    return Match(region=found[0], inner=found[1], x=x, dims=dims)


@pattern(P("Reshape", Var("y"), Var("target"), name="outer"), check=_unwrappable,
         name="elementwise_between_reshapes")
def elementwise_between_reshapes(op: OpBuilder, region: list[ir.Node], inner: ir.Node,
                                 x: ir.Value, dims: ir.Shape) -> Replacement:
    """Reshape(f(Reshape(x, s1), c...), s2) -> Reshape(f(x, c...), s2) for pointwise ``f`` and
    scalar constants ``c``: a pointwise op commutes with any reshape, and a target without 0
    (copy) entries reads only the element count. The first Reshape goes."""
    reshaped = inner.outputs[0]
    return Replacement(
        inputs={node: [x if v is reshaped else v for v in node.inputs] for node in region},
        shapes={out: dims.copy() for node in region for out in node.outputs})  # x's shape


# --- Concat of empty inputs ------------------------------------------------------------------

def _empty_inputs(ctx: GraphView, node: ir.Node) -> list[int] | Reject:
    """The positions of the Concat inputs that are statically empty along its axis and whose
    other dims are provably those of an input that stays (so that, without them, the Concat
    still fails wherever it failed)."""
    ins = [v for v in node.inputs if v is not None]
    out = node.outputs[0]
    rank = len(out.shape) if out.shape is not None else None
    if rank is None or len(ins) != len(node.inputs) or \
            any(v.shape is None or len(v.shape) != rank for v in ins):
        return Reject("ranks not known")
    axis = node.attributes.get_int("axis", 0)
    if not -rank <= axis < rank:
        return Reject("axis out of range")
    axis %= rank
    empty = [i for i, v in enumerate(ins) if ctx.dim(v, axis) == 0]
    kept = [v for i, v in enumerate(ins) if i not in empty]
    if not empty or not kept:
        return []
    if any(ctx.dim(ins[i], a) != ctx.dim(kept[0], a) for i in empty
           for a in range(rank) if a != axis):
        return Reject("an empty input's other dims are not provably the others'")
    return empty


def _has_empty_inputs(ctx: GraphView, node: ir.Node) -> bool | Match | Reject:
    if len(node.outputs) != 1:
        return False
    found = _empty_inputs(ctx, node)
    if isinstance(found, Reject):
        return found
    return Match(empty=found) if found else False


@pattern(P("Concat", name="node"), check=_has_empty_inputs)
def concat_without_empty_inputs(op: OpBuilder, node: ir.Node, empty: list[int]) -> ir.Value:
    """Concat(x, Slice(t, 8, end) of an axis 8 long, axis) -> Concat(x): an input empty
    along the axis adds nothing (Phi-3's rotary half of an empty slice); a Concat of one
    input then goes (``drop_neutral_element``)."""
    kept = [v for i, v in enumerate(node.inputs) if i not in empty]
    return op.Concat(*kept, _attributes=node.attributes)


# --- Unsqueeze of Unsqueeze -----------------------------------------------------------------

def _merged_axes(ctx: GraphView, x: ir.Value, a1: ir.Value, a2: ir.Value
                 ) -> list[int] | None:
    first, second = ctx.array(a1), ctx.array(a2)
    if x.shape is None or first is None or second is None or first.ndim > 1 or \
            second.ndim > 1 or first.dtype.kind not in "iu" or second.dtype.kind not in "iu":
        return None
    middle = len(x.shape) + first.size  # rank after the first Unsqueeze
    rank = middle + second.size
    inner = sorted({int(a) % middle for a in first.reshape(-1) if -middle <= a < middle})
    outer = sorted({int(a) % rank for a in second.reshape(-1) if -rank <= a < rank})
    if len(inner) != first.size or len(outer) != second.size:
        return None  # out of range or repeated: leave the error to onnxruntime
    kept = [i for i in range(rank) if i not in outer]  # where the middle's dims end up
    return sorted(outer + [kept[a] for a in inner])


def _mergeable_unsqueezes(ctx: GraphView, x: ir.Value, a1: ir.Value, a2: ir.Value
                          ) -> bool | Match | Reject:
    axes = _merged_axes(ctx, x, a1, a2)
    if axes is not None and is_mask_widening(ctx, x, axes):
        return Reject("an attention mask widened by two Unsqueezes: onnxruntime's attention "
                      "fusers match the pair (rules/fusable.py)")
    return Match(axes=axes) if axes is not None else False


@pattern(P("Unsqueeze", P("Unsqueeze", Var("x"), Var("a1"), name="first"), Var("a2"),
           name="second"), check=_mergeable_unsqueezes)
def merge_unsqueezes(op: OpBuilder, x: ir.Value, second: ir.Node, axes: list[int]
                     ) -> Replacement:
    """Unsqueeze(Unsqueeze(x, a1), a2) -> Unsqueeze(x, a) with ``a`` the final positions of
    both insertions."""
    return Replacement(inputs={second: [x, op.constant(np.asarray(axes, np.int64), "axes")]})
