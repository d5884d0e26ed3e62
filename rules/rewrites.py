"""Pattern rules that make more of the graph foldable or cheaper to fold.

- Postponing expanding ops: ``f(Expand(c, s), k...)`` with constant ``c, k`` becomes
  ``Expand(f(c, k...), s)``, so the elementwise chain folds on the small tensor and the big one is
  never materialized. The same for ``Tile`` with scalar-like operands, and ``ConstantOfShape``
  becomes ``Expand`` of its scalar when elementwise ops follow.
- ``If`` with a constant condition is replaced by the branch it takes.
- Consecutive Transposes merge; a Reshape of a Reshape, Squeeze, Unsqueeze, Flatten or a
  Transpose of size-1 axes keeps the Reshape; a Squeeze or Unsqueeze of a Reshape to a
  constant shape is one Reshape; no-op Cast/Reshape/Expand/Pad disappear.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import onnx_ir as ir

from onnxfold.declare.patterns import P, Reject, RewriteContext, Var, pattern
from onnxfold.ir.graph import subgraphs, tensor_of

from .op_groups import BROADCASTING, POINTWISE_UNARY

ELEMENTWISE = POINTWISE_UNARY + BROADCASTING
EXPANDING = ("Expand", "Tile")
RESHAPING = ("Reshape", "Squeeze", "Unsqueeze", "Flatten")  # move no element


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def _expanding_input(node: ir.Node, ctx: RewriteContext) -> int | None:
    """Index of the one input produced by a constant Expand/Tile, all others constant."""
    found = None
    for i, v in enumerate(node.inputs):
        if v is None:
            continue
        producer = v.producer()
        if producer is not None and producer.op_type in EXPANDING and ctx.single_use(v):
            if found is not None:
                return None
            found = i
        elif not ctx.is_constant(v):
            return None
    return found


def _postponable(ctx: RewriteContext, node: ir.Node) -> bool | Reject:
    if len(node.outputs) != 1:
        return False
    i = _expanding_input(node, ctx)
    if i is None:
        return False
    expanded = node.inputs[i]
    assert expanded is not None  # _expanding_input picks an input made by Expand/Tile
    expand = expanded.producer()
    assert expand is not None
    small, spec = expand.inputs[0], expand.inputs[1]
    if not (ctx.is_constant(small) and ctx.is_constant(spec)):
        return False
    others = [v for j, v in enumerate(node.inputs) if j != i and v is not None]
    small_shape = ctx.shape(small)
    other_shapes = [ctx.shape(v) for v in others]
    spec_value = ctx.array(spec)
    if small_shape is None or spec_value is None or any(s is None for s in other_shapes):
        return Reject("shapes not statically known")
    known = cast("list[tuple[int, ...]]", other_shapes)  # no None: checked just above
    if expand.op_type == "Expand":
        inner = _broadcast(small_shape, *known)
        big = _broadcast(small_shape, tuple(int(d) for d in spec_value))
        before = _broadcast(big, *known) if big is not None else None
        after = _broadcast(inner, tuple(int(d) for d in spec_value)) \
            if inner is not None else None  # () is a valid (scalar) shape
        if before is None or before != after:
            return Reject("the broadcast result would change")
    elif any(int(np.prod(s)) != 1 or len(s) > len(small_shape) for s in known):
        return Reject("Tile with a non-scalar operand")  # only operands equal on every tile
    return True


@pattern(P(ELEMENTWISE, name="node"), check=_postponable, name="postpone_expand")
def postpone_expand(ctx: RewriteContext, node: ir.Node) -> None:
    """f(Expand(c, s), k) -> Expand(f(c, k), s), f(Tile(c, r), k) -> Tile(f(c, k), r)."""
    i = _expanding_input(node, ctx)
    assert i is not None
    expanded = node.inputs[i]
    assert expanded is not None  # _expanding_input picks an input made by Expand/Tile
    expand = expanded.producer()
    assert expand is not None
    small, spec = expand.inputs[0], expand.inputs[1]
    others = [v for j, v in enumerate(node.inputs) if j != i and v is not None]
    # every shape is known: _postponable checked them
    inner = _broadcast(*cast("list[tuple[int, ...]]", [ctx.shape(v) for v in [small, *others]]))
    out = node.outputs[0]
    # a known inner shape lets the next op of a chain be postponed in the same sweep
    small_result = ctx.add_node(
        node.op_type, [small if j == i else v for j, v in enumerate(node.inputs)], node,
        attributes=node.attributes.values(), domain=node.domain, dtype=out.dtype,
        shape=ir.Shape(inner) if inner is not None else None, base=out.name)
    ctx.replace_node(node, ctx.add_node(expand.op_type, [small_result, spec], node,
                                        dtype=out.dtype, shape=out.shape, base=out.name))
    if not expanded.uses():
        ctx.graph.remove(expand, safe=True)


def _feeds_a_foldable_elementwise(ctx: RewriteContext, node: ir.Node, shape: ir.Value) -> bool:
    out = node.outputs[0]
    if not ctx.single_use(out) or not ctx.is_constant(shape):
        return False
    user = next(iter(out.uses())).node  # the single use; uses() is declared a Collection
    # only worth it when the elementwise op can then fold on the scalar
    return user.op_type in ELEMENTWISE and all(
        v is out or v is None or ctx.is_constant(v) for v in user.inputs)


@pattern(P("ConstantOfShape", Var("shape"), name="node"), check=_feeds_a_foldable_elementwise,
         name="constant_of_shape_as_expand")
def constant_of_shape_as_expand(ctx: RewriteContext, node: ir.Node, shape: ir.Value) -> None:
    """ConstantOfShape(s) feeding elementwise ops -> Expand(scalar, s), to postpone it."""
    out = node.outputs[0]
    attr = node.attributes.get("value")
    scalar = tensor_of(attr).numpy().reshape(()) if attr is not None else np.float32(0)
    value = ctx.constant_value(np.asarray(scalar), "constant_of_shape_value")
    ctx.replace_node(node, ctx.add_node(
        "Expand", [value, shape], node, shape=out.shape, base=out.name,
        dtype=ir.DataType.from_numpy(np.asarray(scalar).dtype)))


def _detach(graph: ir.Graph) -> None:
    """Make a discarded graph stop using outer values, so that they can be removed."""
    for inner in graph:
        for sub in subgraphs(inner):
            _detach(sub)
        for i in range(len(inner.inputs)):
            inner.replace_input_with(i, None)
    graph.outputs.clear()


def _taken_branch(ctx: RewriteContext, node: ir.Node) -> str | None:
    cond = ctx.array(node.inputs[0])
    if cond is None or cond.size != 1:
        return None
    return "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"


def _condition_known(ctx: RewriteContext, node: ir.Node, cond: ir.Value) -> bool | Reject:
    array = ctx.array(cond)
    if array is None:
        return False  # not constant, or not folded yet: the fold pass then the next round
    if array.size != 1:
        return Reject("condition is not a single value")
    taken = _taken_branch(ctx, node)
    assert taken is not None  # the condition is a known single value
    if taken not in node.attributes or \
            len(node.attributes[taken].as_graph().outputs) != len(node.outputs):
        return Reject("branch output count differs")
    return True


@pattern(P("If", Var("cond"), name="node"), check=_condition_known, name="inline_constant_if")
def inline_constant_if(ctx: RewriteContext, node: ir.Node, cond: ir.Value) -> None:
    """If(c) with a constant condition becomes the nodes of the branch it takes."""
    taken = _taken_branch(ctx, node)
    assert taken is not None
    dropped = "else_branch" if taken == "then_branch" else "then_branch"
    graph = node.attributes[taken].as_graph()
    if dropped in node.attributes:
        _detach(node.attributes[dropped].as_graph())
    results = list(graph.outputs)
    graph.outputs.clear()  # a value that is an output of the branch cannot move to another graph
    for value in list(graph.initializers.values()):
        assert value.name is not None  # initializers are named
        graph.initializers.pop(value.name)
        value.name = ctx.fresh_name(value.name)
        ctx.graph.register_initializer(value)
    for inner in list(graph):
        graph.remove(inner)
        ctx.graph.insert_before(node, inner)
    for old, new in zip(node.outputs, results):
        if old in ctx.graph.outputs and (new in ctx.graph.outputs or not ctx.produced_here(new)):
            ident = ir.Node("", "Identity", [new], name=ctx.fresh_name("Identity"))
            ident.outputs[0].name = ctx.fresh_name(old.name or "branch")
            ctx.graph.insert_before(node, ident)
            new = ident.outputs[0]
        ctx.replace_output(old, new)
    ctx.graph.remove(node, safe=True)


def _composed_perm(first: ir.Node, second: ir.Node) -> list[int] | None:
    p1, p2 = first.attributes.get("perm"), second.attributes.get("perm")
    return None if p1 is None or p2 is None else [p1.as_ints()[i] for i in p2.as_ints()]


def _perms_known(ctx: RewriteContext, x: ir.Value, first: ir.Node, second: ir.Node
                 ) -> bool | Reject:
    perm = _composed_perm(first, second)
    if perm is None:
        return Reject("perm not given")
    if perm == sorted(perm) and second.outputs[0] in ctx.graph.outputs:
        return Reject("identity result is a graph output")
    return True


@pattern(P("Transpose", P("Transpose", Var("x"), name="first"), name="second"),
         check=_perms_known)
def merge_transposes(ctx: RewriteContext, x: ir.Value, first: ir.Node, second: ir.Node) -> None:
    """Transpose(Transpose(x, p1), p2) -> Transpose(x, p1[p2]) (or x itself)."""
    perm = _composed_perm(first, second)
    assert perm is not None  # _perms_known checked it
    out = second.outputs[0]
    if perm == sorted(perm):
        ctx.replace_node(second, x)
    else:
        ctx.replace_node(second, ctx.add_node(
            "Transpose", [x], second, attributes=[ir.AttrInt64s("perm", perm)],
            dtype=out.dtype, shape=out.shape, base=out.name))
    ctx.remove_if_unused(first)


def _squeezed_axes(ctx: RewriteContext, node: ir.Node) -> list[int] | None:
    """The axes a Squeeze or Unsqueeze names (input 1 from opset 13 on, else the attribute),
    as given; None where they are not constant (or not given: a Squeeze of every 1)."""
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        axes = ctx.array(node.inputs[1])
        if axes is None or axes.dtype.kind not in "iu" or axes.ndim > 1:
            return None
        return [int(a) for a in axes.reshape(-1)]
    given = node.attributes.get_ints("axes", None)
    return None if given is None else list(given)


def _moves_elements(ctx: RewriteContext, first: ir.Node, x: ir.Value) -> Reject | None:
    """Why ``first`` (Reshape, Squeeze, Unsqueeze, Flatten, Transpose) may not give ``x``'s
    elements in their order whenever it runs, or run wherever a Reshape of ``x`` to the same
    count does; None if it does: a Squeeze only of axes provably 1 (else it fails where the
    merged Reshape would not), a Transpose only of axes provably 1 past the others."""
    rank = len(x.shape) if x.shape is not None else None
    if first.op_type == "Transpose":
        perm = first.attributes.get_ints("perm", None)
        order = list(perm) if perm is not None else \
            list(range(rank))[::-1] if rank is not None else None
        if rank is None or order is None or sorted(order) != list(range(rank)):
            return Reject("a Transpose of an unknown rank")
        moved = [p for p in order if ctx.dim(x, p) != 1]
        return None if moved == sorted(moved) else \
            Reject("a Transpose of axes not provably 1")
    if first.op_type != "Squeeze":
        return None
    axes = _squeezed_axes(ctx, first)
    if axes is None:  # every 1 squeezed: no failure
        return None if len(first.inputs) < 2 or first.inputs[1] is None else \
            Reject("Squeeze axes not constant")
    if rank is None or not all(-rank <= a < rank and ctx.dim(x, a % rank) == 1 for a in axes):
        return Reject("a Squeeze of an axis not provably 1")
    return None


def _target_reading_x(ctx: RewriteContext, x: ir.Value, first: ir.Node, second: ir.Node,
                   target: ir.Value) -> np.ndarray | Reject:
    """The target of ``second`` reading ``x`` itself: a 0 (copy) entry where ``first``'s
    output has a static dim there is that dim, and stays a 0 only where that dim is provably
    ``x``'s own."""
    shape = ctx.array(target)
    if shape is None or shape.dtype.kind not in "iu" or shape.ndim != 1:
        return Reject("target shape not constant")
    moves = _moves_elements(ctx, first, x)
    if moves is not None:
        return moves
    if second.attributes.get_int("allowzero", 0) or not (shape == 0).any():
        return shape
    merged = shape.copy()
    for i in np.flatnonzero(shape == 0).tolist():
        copied = ctx.dim(first.outputs[0], i)
        if isinstance(copied, int) and copied > 0:
            merged[i] = copied
        elif copied is None or copied != ctx.dim(x, i):
            return Reject("target shape copies dimensions (0 entries)")
    return merged


def _mergeable(ctx: RewriteContext, x: ir.Value, first: ir.Node, second: ir.Node,
               target: ir.Value) -> bool | Reject:
    found = _target_reading_x(ctx, x, first, second, target)
    return found if isinstance(found, Reject) else True


@pattern(P("Reshape", P((*RESHAPING, "Transpose"), Var("x"), ..., name="first"),
           Var("target"), ..., name="second"), check=_mergeable)
def merge_reshapes(ctx: RewriteContext, x: ir.Value, first: ir.Node, second: ir.Node,
                   target: ir.Value) -> None:
    """Reshape(f(x), s) -> Reshape(x, s) for f a Reshape, Squeeze, Unsqueeze, Flatten or a
    Transpose of axes of size 1 (none moves an element): the torch exporters'
    ``Reshape(Squeeze(Shape(x)[0:1]), [-1])`` is then ``Shape(x)[0:1]`` (``drop_noop``); a
    GRU's ``Reshape(Transpose([S, 2, 1, H], [0, 2, 1, 3]), [0, 0, -1])`` is ``Reshape(x,
    [0, 1, -1])``."""
    merged = _target_reading_x(ctx, x, first, second, target)
    assert isinstance(merged, np.ndarray)
    second.replace_input_with(0, x)
    shape = ctx.array(target)
    if shape is not None and not np.array_equal(merged, shape):
        second.replace_input_with(1, ctx.constant_value(merged.astype(shape.dtype), "shape"))
    ctx.remove_if_unused(first)


def _reshaped_again(ctx: RewriteContext, first: ir.Node, second: ir.Node,
                    target: ir.Value) -> list[int] | Reject:
    """The constant target of one Reshape doing ``second`` (Squeeze or Unsqueeze) after
    ``first`` (a Reshape to ``target``)."""
    shape = ctx.array(target)
    if shape is None or shape.dtype.kind not in "iu" or shape.ndim != 1:
        return Reject("target shape not constant")
    before = [int(d) for d in shape]
    axes = _squeezed_axes(ctx, second)
    if second.op_type == "Unsqueeze":
        rank = len(before) + len(axes or ())
        at = sorted({a % rank for a in axes or () if -rank <= a < rank})
        if axes is None or len(at) != len(axes):
            return Reject("axes not constant, repeated or out of range")
        rest = iter(enumerate(before))
        places = [(None, 1) if i in at else next(rest) for i in range(rank)]
    else:
        if axes is None:
            return Reject("a Squeeze of every 1 (which a -1 may be)")
        rank = len(before)
        at = sorted({a % rank for a in axes if -rank <= a < rank})
        if len(at) != len(axes) or any(before[a] != 1 for a in at):
            return Reject("a squeezed axis not 1 in the target")
        places = [(i, d) for i, d in enumerate(before) if i not in at]
    allowzero = first.attributes.get_int("allowzero", 0)
    if not allowzero and any(d == 0 and i != j for j, (i, d) in enumerate(places)):
        return Reject("a 0 (copy) entry would copy another dim")
    return [d for _, d in places]


def _merged_target(ctx: RewriteContext, x: ir.Value, target: ir.Value, first: ir.Node,
                   second: ir.Node) -> bool | Reject:
    found = _reshaped_again(ctx, first, second, target)
    return found if isinstance(found, Reject) else True


@pattern(P(("Unsqueeze", "Squeeze"), P("Reshape", Var("x"), Var("target"), name="first",
                                       single_use=True), ..., name="second"),
         check=_merged_target)
def reshape_then_unsqueeze(ctx: RewriteContext, x: ir.Value, target: ir.Value,
                           first: ir.Node, second: ir.Node) -> None:
    """Unsqueeze(Reshape(x, [-1, 32]), [1]) -> Reshape(x, [-1, 1, 32]); Squeeze(Reshape(x,
    [-1, 1, 32]), [1]) -> Reshape(x, [-1, 32]): a Squeeze or Unsqueeze moves no element, so
    one Reshape to the final shape does both (a 0 entry only where it copies the same dim)."""
    found = _reshaped_again(ctx, first, second, target)
    assert isinstance(found, list)
    out = second.outputs[0]
    ctx.replace_node(second, ctx.add_node(
        "Reshape", [x, ctx.constant_value(np.asarray(found, np.int64), "shape")], second,
        attributes=[a for a in first.attributes.values() if a.name == "allowzero"],
        dtype=out.dtype, shape=out.shape, base=out.name))
    ctx.remove_if_unused(first)


def _is_noop(ctx: RewriteContext, node: ir.Node, src: ir.Value) -> bool:
    out = node.outputs[0]
    if ctx.is_constant(src):
        return False  # constants fold anyway
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
    if not noop:
        return False
    # a graph output must stay computed by a node of this graph, and not be returned twice
    return out not in ctx.graph.outputs or (
        ctx.produced_here(src) and src not in ctx.graph.outputs)


def _reshapes_to_its_own_shape(ctx: RewriteContext, node: ir.Node, src: ir.Value) -> bool:
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


@pattern(P(("Cast", "Reshape", "Expand", "Pad", "Transpose"), Var("src"), ..., name="node"),
         check=_is_noop)
def drop_noop(ctx: RewriteContext, node: ir.Node, src: ir.Value) -> None:
    """Cast to the same type, Reshape/Expand to the same static shape, Pad by zeros, Transpose
    by the identity permutation."""
    ctx.replace_output(node.outputs[0], src)
    ctx.graph.remove(node, safe=True)


def _narrow_constant(ctx: RewriteContext, transpose: ir.Node, widen: ir.Node, narrow: ir.Value
                     ) -> bool | Reject:
    if not ctx.is_constant(narrow) or ctx.shape(narrow) is None:
        return False
    if widen.op_type == "DequantizeLinear":
        if widen.attributes.get("block_size") is not None and \
                widen.attributes["block_size"].as_int() != 0:
            return Reject("blocked dequantization")
        if ctx.shape(widen.inputs[1]) is None:
            return Reject("scale shape not known")
    return True


@pattern(P("Transpose", P(("Cast", "DequantizeLinear"), Var("narrow"), ..., name="widen",
                          single_use=True), name="transpose"), check=_narrow_constant)
def transpose_before_widening(ctx: RewriteContext, transpose: ir.Node, widen: ir.Node,
                              narrow: ir.Value) -> None:
    """Transpose(Cast(c)) -> Cast(Transpose(c)); Transpose(DequantizeLinear(q, s, z)) ->
    DequantizeLinear(Transpose(q), s, z) with the axis moved: for constant ``c``/``q`` the
    transpose then folds in the narrow dtype, while the widening op may stay (size policy)."""
    shape = ctx.shape(narrow)
    assert shape is not None
    perm_attr = transpose.attributes.get("perm")
    perm = list(perm_attr.as_ints()) if perm_attr is not None else \
        list(range(len(shape)))[::-1]
    attributes = [a for a in widen.attributes.values() if a.name != "axis"]
    scale_shape = ctx.shape(widen.inputs[1]) if widen.op_type == "DequantizeLinear" else None
    if scale_shape is not None and int(np.prod(scale_shape)) > 1:
        axis = widen.attributes["axis"].as_int() if "axis" in widen.attributes else 1
        attributes.append(ir.AttrInt64("axis", perm.index(axis % len(shape))))
    moved = ctx.add_node("Transpose", [narrow], transpose,
                         attributes=[ir.AttrInt64s("perm", perm)], dtype=narrow.dtype,
                         shape=ir.Shape([shape[p] for p in perm]), base=narrow.name)
    out = transpose.outputs[0]
    ctx.replace_node(transpose, ctx.add_node(
        widen.op_type, [moved, *widen.inputs[1:]], transpose, attributes=attributes,
        domain=widen.domain, dtype=out.dtype, shape=out.shape, base=out.name))
    ctx.remove_if_unused(widen)


def _like_dtype_known(ctx: RewriteContext, node: ir.Node, x: ir.Value, like: ir.Value) -> bool:
    return like.dtype is not None and like.dtype != ir.DataType.STRING


@pattern(P("CastLike", Var("x", const=True), Var("like"), name="node"), check=_like_dtype_known)
def cast_like_of_a_constant(ctx: RewriteContext, node: ir.Node, x: ir.Value,
                            like: ir.Value) -> None:
    """CastLike(c, y) reads only y's dtype: with a constant c it is Cast(c, to=dtype(y)), which
    folds (an attention scale's CastLike otherwise blocks the Sqrt after it)."""
    assert like.dtype is not None
    out = node.outputs[0]
    attributes = [ir.AttrInt64("to", int(like.dtype))] + [
        a for a in node.attributes.values() if a.name in ("saturate", "round_mode")]
    ctx.replace_node(node, ctx.add_node("Cast", [x], node, attributes=attributes,
                                        dtype=like.dtype, shape=out.shape, base=out.name))
