"""Pattern rules that make more of the graph foldable or cheaper to fold.

- Postponing expanding ops: ``f(Expand(c, s), k...)`` with constant ``c, k`` becomes
  ``Expand(f(c, k...), s)``, so the elementwise chain folds on the small tensor and the big one is
  never materialized (the seed design's section 3.5). The same for ``Tile`` with scalar-like
  operands, and ``ConstantOfShape`` becomes ``Expand`` of its scalar when elementwise ops follow.
- ``If`` with a constant condition is replaced by the branch it takes.
- Consecutive Transposes merge; Reshape of Reshape keeps the last; no-op Cast/Reshape/Expand/Pad
  disappear.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxfold.analysis import subgraphs
from onnxfold.patterns import RewriteContext, pattern

UNARY = ("Abs", "Neg", "Sqrt", "Exp", "Log", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos",
         "Tan", "Tanh", "Sigmoid", "Relu", "Reciprocal", "Erf", "Not", "Cast", "IsNaN", "Softsign",
         "LeakyRelu", "Elu", "Selu", "HardSigmoid", "Softplus", "Gelu", "HardSwish", "Mish")
BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Equal", "Less", "Greater",
          "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where", "BitShift",
          "BitwiseAnd", "BitwiseOr", "BitwiseXor", "PRelu", "Sum", "Mean")
ELEMENTWISE = UNARY + BINARY
EXPANDING = ("Expand", "Tile")


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


@pattern(ELEMENTWISE, name="postpone_expand")
def postpone_expand(node: ir.Node, ctx: RewriteContext):
    """f(Expand(c, s), k) -> Expand(f(c, k), s), f(Tile(c, r), k) -> Tile(f(c, k), r)."""
    if node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return None
    i = _expanding_input(node, ctx)
    if i is None:
        return None
    expanded = node.inputs[i]
    expand = expanded.producer()
    small, spec = expand.inputs[0], expand.inputs[1]
    if not (ctx.is_constant(small) and ctx.is_constant(spec)):
        return None
    others = [v for j, v in enumerate(node.inputs) if j != i and v is not None]
    small_shape = ctx.shape(small)
    other_shapes = [ctx.shape(v) for v in others]
    spec_value = ctx.array(spec)
    if small_shape is None or spec_value is None or any(s is None for s in other_shapes):
        return "shapes not statically known"
    inner = _broadcast(small_shape, *other_shapes)
    if expand.op_type == "Expand":
        big = _broadcast(small_shape, tuple(int(d) for d in spec_value))
        before = _broadcast(big, *other_shapes) if big is not None else None
        after = _broadcast(inner, tuple(int(d) for d in spec_value)) \
            if inner is not None else None  # () is a valid (scalar) shape
        if before is None or before != after:
            return "the broadcast result would change"
    else:  # Tile: only operands that are the same for every tile element
        if any(int(np.prod(s)) != 1 or len(s) > len(small_shape) for s in other_shapes):
            return "Tile with a non-scalar operand"
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
    return True


@pattern("ConstantOfShape", name="constant_of_shape_as_expand")
def constant_of_shape_as_expand(node: ir.Node, ctx: RewriteContext):
    """ConstantOfShape(s) feeding elementwise ops -> Expand(scalar, s), to postpone it."""
    out = node.outputs[0]
    if not ctx.single_use(out) or not ctx.is_constant(node.inputs[0]):
        return None
    user = out.uses()[0].node
    if user.op_type not in ELEMENTWISE or not all(
            v is out or v is None or ctx.is_constant(v) for v in user.inputs):
        return None  # only worth it when the elementwise op can then fold on the scalar
    attr = node.attributes.get("value")
    scalar = attr.as_tensor().numpy().reshape(()) if attr is not None else np.float32(0)
    value = ctx.constant_value(np.asarray(scalar), "constant_of_shape_value")
    ctx.replace_node(node, ctx.add_node(
        "Expand", [value, node.inputs[0]], node, shape=out.shape, base=out.name,
        dtype=ir.DataType.from_numpy(np.asarray(scalar).dtype)))
    return True


def _detach(graph: ir.Graph) -> None:
    """Make a discarded graph stop using outer values, so that they can be removed."""
    for inner in graph:
        for sub in subgraphs(inner):
            _detach(sub)
        for i in range(len(inner.inputs)):
            inner.replace_input_with(i, None)
    graph.outputs.clear()


@pattern("If", name="inline_constant_if")
def inline_constant_if(node: ir.Node, ctx: RewriteContext):
    """If(c) with a constant condition becomes the nodes of the branch it takes."""
    cond = ctx.array(node.inputs[0])
    if cond is None:
        return None  # not constant, or not folded yet: the fold pass then the next round
    if cond.size != 1:
        return "condition is not a single value"
    taken, dropped = ("then_branch", "else_branch") if bool(cond.reshape(-1)[0]) \
        else ("else_branch", "then_branch")
    graph = node.attributes[taken].as_graph()
    if len(graph.outputs) != len(node.outputs):
        return "branch output count differs"
    if dropped in node.attributes:
        _detach(node.attributes[dropped].as_graph())
    results = list(graph.outputs)
    graph.outputs.clear()  # a value that is an output of the branch cannot move to another graph
    for value in list(graph.initializers.values()):
        graph.initializers.pop(value.name)
        value.name = ctx.fresh_name(value.name)
        ctx.graph.register_initializer(value)
    for inner in list(graph):
        graph.remove(inner)
        ctx.graph.insert_before(node, inner)
    for old, new in zip(node.outputs, results):
        if new in ctx.graph.outputs or (new.producer() is None and old in ctx.graph.outputs):
            ident = ir.Node("", "Identity", [new], name=ctx.fresh_name("Identity"))
            ident.outputs[0].name = ctx.fresh_name(old.name or "branch")
            ctx.graph.insert_before(node, ident)
            new = ident.outputs[0]
        ctx.replace_output(old, new)
    ctx.graph.remove(node, safe=True)
    return True


@pattern("Transpose", name="merge_transposes")
def merge_transposes(node: ir.Node, ctx: RewriteContext):
    """Transpose(Transpose(x, p1), p2) -> Transpose(x, p1[p2]) (or x itself)."""
    source = node.inputs[0]
    first = ctx.producer(source, "Transpose")
    if first is None:
        return None
    p1, p2 = first.attributes.get("perm"), node.attributes.get("perm")
    if p1 is None or p2 is None:
        return "perm not given"
    perm = [p1.as_ints()[i] for i in p2.as_ints()]
    out = node.outputs[0]
    if perm == sorted(perm):
        if out in ctx.graph.outputs:
            return "identity result is a graph output"
        ctx.replace_node(node, first.inputs[0])
    else:
        ctx.replace_node(node, ctx.add_node(
            "Transpose", [first.inputs[0]], node, attributes=[ir.AttrInt64s("perm", perm)],
            dtype=out.dtype, shape=out.shape, base=out.name))
    ctx.remove_if_unused(first)
    return True


@pattern("Reshape", name="merge_reshapes")
def merge_reshapes(node: ir.Node, ctx: RewriteContext):
    """Reshape(Reshape(x, s1), s2) -> Reshape(x, s2) when s2 has no 0 (copy) entries."""
    source = node.inputs[0]
    first = ctx.producer(source, "Reshape")
    if first is None:
        return None
    target = ctx.array(node.inputs[1])
    if target is None:
        return "target shape not constant"
    if (target == 0).any():
        return "target shape copies dimensions (0 entries)"
    node.replace_input_with(0, first.inputs[0])
    ctx.remove_if_unused(first)
    return True


def _drop(node: ir.Node, ctx: RewriteContext) -> bool:
    """Replace ``node``'s only output by its first input."""
    out, src = node.outputs[0], node.inputs[0]
    if out in ctx.graph.outputs and (src in ctx.graph.inputs or src in ctx.graph.outputs
                                     or src.producer() is None):
        return False
    ctx.replace_output(out, src)
    ctx.graph.remove(node, safe=True)
    return True


@pattern(("Cast", "Reshape", "Expand", "Pad"), name="drop_noop")
def drop_noop(node: ir.Node, ctx: RewriteContext):
    """Cast to the same type, Reshape/Expand to the same static shape, Pad by zeros."""
    src, out = node.inputs[0], node.outputs[0]
    if node.domain not in ("", "ai.onnx") or src is None or ctx.is_constant(src):
        return None  # constants fold anyway
    if node.op_type == "Cast":
        noop = src.dtype is not None and node.attributes.get("to") is not None and \
            int(src.dtype) == node.attributes["to"].as_int()
    elif node.op_type == "Pad":
        pads = ctx.array(node.inputs[1]) if len(node.inputs) > 1 else None
        if pads is None and "pads" in node.attributes:
            pads = np.asarray(node.attributes["pads"].as_ints())
        noop = pads is not None and not pads.any()
    else:
        shape_in, shape_out = ctx.shape(src), ctx.shape(out)
        noop = shape_in is not None and shape_in == shape_out
    return _drop(node, ctx) if noop else None


@pattern("Transpose", name="transpose_before_widening")
def transpose_before_widening(node: ir.Node, ctx: RewriteContext):
    """Transpose(Cast(c)) -> Cast(Transpose(c)); Transpose(DequantizeLinear(q, s, z)) ->
    DequantizeLinear(Transpose(q), s, z) with the axis moved: for constant ``c``/``q`` the
    transpose then folds in the narrow dtype, while the widening op may stay (size policy)."""
    source = node.inputs[0]
    inner = ctx.producer(source, "Cast", "DequantizeLinear")
    if inner is None or not ctx.single_use(source):
        return None
    narrow = inner.inputs[0]
    shape = ctx.shape(narrow)
    if not ctx.is_constant(narrow) or shape is None:
        return None
    perm_attr = node.attributes.get("perm")
    perm = list(perm_attr.as_ints()) if perm_attr is not None else \
        list(range(len(shape)))[::-1]
    attributes = [a for a in inner.attributes.values() if a.name != "axis"]
    if inner.op_type == "DequantizeLinear":
        if inner.attributes.get("block_size") is not None and \
                inner.attributes["block_size"].as_int() != 0:
            return "blocked dequantization"
        scale_shape = ctx.shape(inner.inputs[1])
        if scale_shape is None:
            return "scale shape not known"
        if int(np.prod(scale_shape)) > 1:
            axis = inner.attributes["axis"].as_int() if "axis" in inner.attributes else 1
            attributes.append(ir.AttrInt64("axis", perm.index(axis % len(shape))))
    moved = ctx.add_node("Transpose", [narrow], node, attributes=[ir.AttrInt64s("perm", perm)],
                         dtype=narrow.dtype, shape=ir.Shape([shape[p] for p in perm]),
                         base=narrow.name)
    out = node.outputs[0]
    ctx.replace_node(node, ctx.add_node(
        inner.op_type, [moved, *inner.inputs[1:]], node, attributes=attributes,
        domain=inner.domain, dtype=out.dtype, shape=out.shape, base=out.name))
    ctx.remove_if_unused(inner)
    return True
