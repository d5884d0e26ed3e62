"""Every no-op removal: a node whose output is, bit for bit and for every value of the
dynamic dims, one of its inputs goes, and its readers read that input. One rule per op: no
two rules remove the same op as a no-op.

- ``drop_noop`` (Cast, Reshape, Expand, Pad, Transpose, Slice, Tile): Cast to the same type,
  Reshape/Expand to the same static shape, Pad by zeros, Transpose by the identity
  permutation; where shapes are dynamic, a Reshape (any ``allowzero``), Expand, full-range
  Slice, Transpose of size-1 axes or Tile by 1s whose output is, dim for dim, its input
  (``onnxfold.analysis.symbolic``: ``mask[:, :, :seq]`` of a mask ``seq`` long, torch's
  ``mask.expand(N, -1, 128, 128)`` of a mask already ``[N, 1, 128, 128]``).
- ``drop_neutral_element`` (Add, Sub, Mul, Div, And, Or, Where, Concat, Sum, Max, Min, Mean):
  ``x + 0`` (floats: ``x + -0.0``, or ``x + 0.0`` where nothing downstream tells ``-0.0`` from
  ``+0.0``: ``rules/zero_sign.py``), ``x - 0``, ``x * 1``, ``x / 1``, ``x and True``,
  ``x or False``, ``Where`` with a constant condition (choosing a float X: only where nothing
  tells the zeros apart, as onnxruntime makes X's zeros ``+0.0``), one-input
  ``Concat``/``Sum``/``Max``/``Min``/``Mean``, each only where the result has exactly ``x``'s
  dtype and shape; never a normalization's affine tail that onnxruntime fuses it with
  (``normalizations.py``). ``--explain`` names each neutral element kept, and why.
- ``drop_inference_dropout`` (Dropout): a Dropout in inference mode whose mask nothing reads,
  whatever its data (its folders, for constant data, are in ``dropout.py``).

A node whose results are all constant is left to the fold (the driver skips it). Where the
output is a graph output, the input may take its place only if a node of the same graph
computes it and it is not already an output (a subgraph must not return an outer value or its
own input, nor one value twice): the driver judges that, for every rule
(``onnxfold/rewrite/judge.py``), and refuses such a removal. Identity nodes go after folding,
in the cleanup pass ``remove_identity`` (``onnxfold/pipeline/cleanups.py``): as a pattern
here, tried in every round before the fold, it removes them earlier than the cleanup does,
which changes outputs (fresh names numbered otherwise, Identities of loop bodies removed that
the cleanup keeps).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxfold.declare import GraphView, Match, OpBuilder, P, Reject, Var, pattern

from .normalizations import affine_tail
from .zero_sign import zero_sign_observer

STATIC = ("Cast", "Reshape", "Expand", "Pad", "Transpose")  # no-ops by static facts
SYMBOLIC = ("Reshape", "Slice", "Transpose", "Tile")  # and by symbolic dims (Expand's own)

# --- drop_noop: static shapes, types and attributes ----------------------------------------

def _is_noop(ctx: GraphView, node: ir.Node, src: ir.Value) -> bool:
    out = node.outputs[0]
    if node.op_type == "Cast":
        noop = src.dtype is not None and node.attributes.get("to") is not None and \
            int(src.dtype) == node.attributes["to"].as_int()
    elif node.op_type == "Transpose":
        perm = node.attributes.get("perm")
        rank = len(src.shape) if src.shape is not None else None
        noop = list(perm.as_ints()) == list(range(len(perm.as_ints()))) if perm is not None \
            else rank is not None and rank <= 1
    elif node.op_type == "Pad":
        pads = ctx.array(node.inputs[1]) if len(node.inputs) > 1 else None
        if pads is None and "pads" in node.attributes:
            pads = np.asarray(node.attributes["pads"].as_ints())
        noop = pads is not None and not pads.any()
    else:
        shape_in, shape_out = ctx.shape(src), ctx.shape(out)
        noop = (shape_in is not None and shape_in == shape_out) or (
            node.op_type == "Reshape" and (shape_in is None or shape_out is None)
            and _reshapes_to_its_own_shape(ctx, node, src))  # both static: compared above
    return noop


def _reshapes_to_its_own_shape(ctx: GraphView, node: ir.Node, src: ir.Value) -> bool:
    """Reshape(x, t) where t is, element by element, x's own dims (``Shape(x)`` rebuilt), one
    of them maybe -1."""
    if len(node.inputs) < 2 or node.inputs[1] is None or src.shape is None:
        return False
    target = ctx.shape_value(node.inputs[1])
    if target is None or target.scalar or len(target.elements) != len(src.shape):
        return False
    # one -1 among x's own dims can only be x's dim there (or the Reshape fails: an empty x)
    inferred = [i for i, e in enumerate(target.elements) if e == -1]
    return len(inferred) <= 1 and all(
        e == ctx.dim(src, i) or (e == 0 and not node.attributes.get_int("allowzero", 0))
        or i in inferred for i, e in enumerate(target.elements))


# --- drop_noop: symbolic dims --------------------------------------------------------------

def _expands_to_its_own_dims(ctx: GraphView, x: ir.Value, shape: ir.Value) -> bool:
    """Expand(x, s) where every element of s is 1 or x's own dim at that axis (right-aligned):
    the broadcast gives x's shape, so x itself."""
    known = ctx.shape_value(shape)
    if known is None or known.scalar or x.shape is None or len(known.elements) > len(x.shape):
        return False
    offset = len(x.shape) - len(known.elements)
    return all(e == 1 or e == ctx.dim(x, offset + i) for i, e in enumerate(known.elements))


def _moves_data(node: ir.Node, ctx: GraphView, dims: tuple) -> bool:
    """Whether ``node`` may reorder elements even where its output has its input's shape: a
    Slice with a step that is not a positive constant (a reversal keeps the shape), a
    Transpose that changes the order of axes not provably 1 (``[N, N]`` transposed)."""
    if node.op_type == "Slice":
        steps = ctx.array(node.inputs[4]) if len(node.inputs) > 4 and \
            node.inputs[4] is not None else np.ones(1, np.int64)
        return steps is None or not (steps > 0).all()
    if node.op_type == "Transpose":
        perm = node.attributes.get_ints("perm", None) or list(range(len(dims)))[::-1]
        moved = [p for p in perm if dims[p] != 1]
        return moved != sorted(moved)
    return False


def _provably_its_input(ctx: GraphView, node: ir.Node, x: ir.Value) -> bool:
    """Whether ``node``'s output is ``x`` itself: the dims its op gives are ``x``'s, symbol for
    symbol (``onnxfold.analysis.symbolic``, not names), and the op moves no element."""
    if len(node.outputs) != 1 or x.shape is None:
        return False
    before = ctx.input_dims(x)
    after = ctx.derived_dims(node)
    if before is None or after is None or None in before or tuple(after) != tuple(before):
        return False
    return not _moves_data(node, ctx, before)

def _is_its_input(ctx: GraphView, node: ir.Node, src: ir.Value) -> bool:
    """Whether ``node`` returns ``src`` unchanged: by its static shapes, type or attributes
    first, else (Reshape, Expand, Slice, Transpose, Tile) by its symbolic dims."""
    op = node.op_type
    if op in STATIC and _is_noop(ctx, node, src):
        return True
    if op == "Expand":
        shape = node.inputs[1] if len(node.inputs) == 2 else None
        return shape is not None and _expands_to_its_own_dims(ctx, src, shape)
    return op in SYMBOLIC and _provably_its_input(ctx, node, src)


@pattern(P(tuple(dict.fromkeys((*STATIC, *SYMBOLIC))), Var("src"), ..., name="node"),
         check=_is_its_input)
def drop_noop(op: OpBuilder, src: ir.Value) -> ir.Value:
    """A node whose output is its input: it goes."""
    return src


# --- drop_neutral_element ------------------------------------------------------------------

def broadcasts_into(ctx: GraphView, v: ir.Value, x: ir.Value) -> bool:
    """Whether broadcasting ``v`` with ``x`` gives exactly ``x``'s shape, whatever the
    dynamic dims: every dim of ``v`` (right-aligned) is 1 or provably ``x``'s dim."""
    if x.shape is None:
        return False
    shape = ctx.shape(v) if ctx.is_constant(v) else None
    rank = len(shape) if shape is not None else len(v.shape) if v.shape is not None else None
    if rank is None or rank > len(x.shape):
        return False
    offset = len(x.shape) - rank
    for i in range(rank):
        d = shape[i] if shape is not None else ctx.dim(v, i)
        if d == 1:
            continue
        mine = ctx.dim(x, offset + i)
        if d is None or mine is None or d != mine:
            return False
    return True


def _is(array: np.ndarray, op: str, side: int) -> bool:
    """Whether every element of ``array`` leaves the other operand of ``op`` unchanged
    (``side``: the constant's input position), bit for bit."""
    if array.size == 0 or array.dtype.kind not in "biuf":
        return False
    if op in ("And", "Or"):
        return array.dtype == np.bool_ and bool(array.all() if op == "And" else not array.any())
    if op in ("Mul", "Div") and (op == "Mul" or side == 1):
        return bool((array == 1).all())
    if op == "Add" or (op == "Sub" and side == 1):
        if array.dtype.kind != "f":
            return bool((array == 0).all())
        # x + -0.0 and x - +0.0 are x for every x; x + +0.0 turns -0.0 into +0.0
        negative = np.signbit(array)
        return bool((array == 0).all() and (negative if op == "Add" else ~negative).all())
    return False


def _returned_unchanged(ctx: GraphView, node: ir.Node) -> ir.Value | str | None:
    """The input ``node`` returns unchanged, if it is one; why it stays, where it would be but
    for its shape or the sign of a zero."""
    ins = list(node.inputs)
    op = node.op_type
    if op in ("Concat", "Sum", "Max", "Min", "Mean") and len(ins) == 1:
        return ins[0]
    if op == "Where" and len(ins) == 3:
        return _chosen(ctx, node, *ins)
    if op not in ("Add", "Sub", "Mul", "Div", "And", "Or") or len(ins) != 2:
        return None
    left, right = ins
    if left is None or right is None:
        return None
    kept = None
    for side, c, x in ((0, left, right), (1, right, left)):
        array = ctx.array(c)
        if array is None or x.dtype is None or x.dtype != c.dtype:
            continue
        zero = _adds_a_zero(array, op, side) and not _is(array, op, side)
        if not zero and not _is(array, op, side):
            continue
        observer = zero_sign_observer(ctx, node.outputs[0]) if zero else None
        if not broadcasts_into(ctx, c, x):
            kept = "its constant may broadcast the other input to a larger shape"
        elif observer is not None:
            kept = f"it adds a zero, and {observer} tells -0.0 from +0.0"
        else:
            return x
    return kept


def _chosen(ctx: GraphView, node: ir.Node, condition: ir.Value | None, a: ir.Value | None,
            b: ir.Value | None) -> ir.Value | str | None:
    """The input a Where of a constant condition, true or false throughout, returns unchanged
    (with the dtype and shape of the result), if it does."""
    if condition is None or a is None or b is None:
        return None
    cond = ctx.array(condition)
    if cond is None or cond.dtype != np.bool_ or cond.size == 0 or \
            not (cond.all() or not cond.any()):
        return None
    x, other = (a, b) if cond.all() else (b, a)
    if x.dtype is None or x.dtype != other.dtype or not broadcasts_into(ctx, condition, x) \
            or not broadcasts_into(ctx, other, x):
        return None
    # onnxruntime's Where turns a -0.0 it selects from X into +0.0 (Y's pass unchanged)
    observer = zero_sign_observer(ctx, node.outputs[0]) if x is a and \
        x.dtype.is_floating_point() else None
    return x if observer is None else f"it makes -0.0 +0.0, and {observer} tells them apart"


def _adds_a_zero(array: np.ndarray, op: str, side: int) -> bool:
    """Whether ``op`` adds float zeros (of either sign): the other operand comes out
    unchanged except that ``-0.0`` may become ``+0.0`` (``rules/zero_sign.py``)."""
    return (op == "Add" or (op == "Sub" and side == 1)) and array.dtype.kind == "f" and \
        array.size > 0 and bool((array == 0).all())


def _neutral(ctx: GraphView, node: ir.Node) -> bool | Match | Reject:
    if len(node.outputs) != 1:
        return False
    x = _returned_unchanged(ctx, node)
    tail = affine_tail(ctx, node) if isinstance(x, ir.Value) else None
    if tail is not None and tail[0].fused:
        x = f"it is the affine tail of a {tail[0].op} written out, which onnxruntime fuses " \
            "only with it"
    if isinstance(x, str):  # a neutral element kept: --explain names it
        return Reject(f"{node.op_type} {node.name or node.outputs[0].name} stays: {x}")
    return Match(x=x) if x is not None else False


@pattern(P(("Add", "Sub", "Mul", "Div", "And", "Or", "Where", "Concat", "Sum", "Max", "Min",
            "Mean"), name="node"), check=_neutral, name="drop_neutral_element")
def drop_neutral_element(op: OpBuilder, x: ir.Value) -> ir.Value:
    """x + 0, x - 0, x * 1, x / 1, x and True, x or False, Where(True, x, y), Concat(x)... -> x
    (same dtype and shape, for every value of the dynamic dims)."""
    return x


# --- drop_inference_dropout ---------------------------------------------------------------

def _in_inference(ctx: GraphView, node: ir.Node) -> bool:
    """A Dropout of opset 7 on whose training mode is absent or a constant false (the driver
    refuses to remove one whose mask is read)."""
    opset = node.version or ctx.opset()
    if opset < 7:
        return False
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        flag = ctx.array(node.inputs[2])
        if flag is None or flag.size != 1 or bool(flag.reshape(-1)[0]):
            return False
    return True


@pattern(P("Dropout", Var("x"), ..., name="node"), check=_in_inference)
def drop_inference_dropout(op: OpBuilder, x: ir.Value) -> ir.Value:
    """Dropout in inference mode is the identity."""
    return x
