"""MatMuls that read one input and each their own constant weight become one MatMul and a Split
(as onnxsim's ``fuse_qkv``, for any number of them): an attention's Q, K and V projections,
or the K and V projections of every decoder layer from the encoder's output.

``MatMul(x, W1), ..., MatMul(x, Wn)`` -> ``Split(MatMul(x, Concat(W1, ..., Wn, axis=-1)))``;
where each product is read only by an ``Add`` of its own constant bias of one value per
column, the biases are concatenated too (``Split(Add(MatMul(x, W), B))``; with a 2-D ``x`` the
MatMul + Add fusion of ``rules/fusions.py`` then makes it one Gemm). The fold computes the
concatenated weight. A weight is merged when it is an initializer read by nothing else, or a
short chain of foldable nodes over such initializers (dynamo's ``Transpose`` of each Linear
weight: the merge then happens in the first rewrite round, not after a fold), so the model grows
by nothing (the originals leave with their MatMuls).

Each output element is the same sum over the inner dim K as before, so the products agree
within float rounding. onnxruntime's CPU MatMul gives the same bits when it has prepacked the
constant weight (its default): the packed layout blocks K alike whatever the column count (in
every shape the tests try). Without prepacking (``session.disable_prepacking``, how ``compare``
and ``--check`` run models) MLAS sizes its K block from the column count when there are fewer
columns than K, so a merged product may round a few ulps apart: within ``--check``'s tolerance
(``tests/unit/test_shared_input_matmuls.py`` checks both).

Merged where it leaves fewer nodes: three products or more, or two with their biases. A 2-D
``x`` whose products are not all biased is left alone: the biased ones fuse into Gemm nodes,
which the merge would prevent.

Never in a quantized (QDQ) model's node units (``rules/qdq_units.py``): a MatMul whose weight
or input is a ``DequantizeLinear`` output (also through Transpose/Reshape/Identity), or whose
product a ``QuantizeLinear`` reads, stays as it is. Merged, its weight would be a ``Concat`` of
dequantized weights, computed in float on every call, and onnxruntime would no longer run the
unit as an integer kernel (``QLinearMatMul``, ``MatMulIntegerToFloat``) nor an NPU take it: a
static-QDQ BERT ran 2.3x slower (issue 35). A dynamically quantized model
(``quantize_dynamic``: ``MatMulInteger`` of integer weights) has no such unit and no constant
float weight to merge.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from onnxfold.declare import kept
from onnxfold.declare.patterns import P, Reject, RewriteContext, Var, pattern
from onnxfold.ir.graph import is_default_op

from .qdq_units import breaks_qdq_units, qdq_unit_of
from .structure import split_node

MIN_PRODUCTS = 3  # MatMul + Split replace them: fewer nodes from three on
MIN_BIASED_PRODUCTS = 2  # MatMul + Add + Split replace 2n nodes
MAX_CHAIN = 4  # foldable nodes between a weight and its initializers


@dataclass(frozen=True)
class _Product:
    """One of the MatMuls: its node, its weight, the weight's column count, the nodes that
    compute the weight and, if merged with it, its bias Add and bias."""

    node: ir.Node
    weight: ir.Value
    columns: int
    chain: tuple[ir.Node, ...] = ()  # the foldable nodes computing the weight, in order
    bias_add: ir.Node | None = None
    bias: ir.Value | None = None

    @property
    def result(self) -> ir.Value:
        """What the rest of the graph reads: the biased product, or the product."""
        return (self.bias_add or self.node).outputs[0]


def _own_initializer(ctx: RewriteContext, value: ir.Value | None) -> ir.Value | None:
    """``value`` if it is a constant initializer with data that only one node reads (merging
    it into a concatenation then duplicates nothing)."""
    if value is not None and value.producer() is None and ctx.is_constant(value) \
            and ctx.single_use(value) and ctx.array(value) is not None:
        return value
    return None


def _own_chain(ctx: RewriteContext, value: ir.Value) -> tuple[ir.Node, ...] | None:
    """The foldable nodes (at most ``MAX_CHAIN``, in graph order, none kept by ``--keep``: the
    concatenation would not fold) that compute ``value`` from initializers only it reads, each
    of their results read once (folding the merge then frees every tensor it reads); None if
    there is no such chain."""
    chain: list[ir.Node] = []
    todo = [value]
    while todo:
        current = todo.pop()
        if current.producer() is None:
            if _own_initializer(ctx, current) is None:
                return None
            continue
        node = current.producer()
        if node is None or node.graph is not ctx.graph or len(chain) == MAX_CHAIN or \
                not ctx.is_constant(current) or not ctx.single_use(current) or \
                len(node.outputs) != 1 or node in chain or kept(node, ctx.keep):
            return None
        chain.append(node)
        todo.extend(v for v in node.inputs if v is not None)
    return tuple(reversed(chain))


def _weight_shape(ctx: RewriteContext, node: ir.Node) -> tuple[int, ...] | None:
    shape = ctx.shape(node.inputs[1]) if len(node.inputs) == 2 else None
    if shape is None or len(shape) < 2 or 0 in shape:
        return None
    return shape


def _with_bias(ctx: RewriteContext, product: _Product) -> _Product | None:
    """``product`` with the Add that alone reads it and adds a constant of one value per
    column (None: there is no such Add)."""
    out = product.node.outputs[0]
    if not ctx.single_use(out):
        return None
    add = next(iter(out.uses())).node
    if not is_default_op(add, "Add") or add.graph is not ctx.graph or kept(add, ctx.keep) \
            or len(add.inputs) != 2:
        return None
    other = add.inputs[1] if add.inputs[0] is out else add.inputs[0]
    bias = _own_initializer(ctx, other) if other is not out else None
    if bias is None or ctx.shape(bias) != (product.columns,) or bias.dtype != out.dtype:
        return None
    return _Product(product.node, product.weight, product.columns, product.chain, add, bias)


def _siblings(ctx: RewriteContext, x: ir.Value) -> list[_Product]:
    """The MatMuls of this graph reading ``x`` first and a weight of their own second
    (``_own_chain``), whose weights agree in every dim but the last (the first such weight
    sets them), none of them in a QDQ node unit (``rules/qdq_units.py``)."""
    found: list[_Product] = []
    leading: tuple[int, ...] | None = None
    for use in x.uses():
        node = use.node
        if use.idx != 0 or not is_default_op(node, "MatMul") or node.graph is not ctx.graph \
                or any(p.node is node for p in found) or kept(node, ctx.keep) \
                or qdq_unit_of(node) is not None:
            continue
        shape = _weight_shape(ctx, node)
        weight = node.inputs[1]
        chain = _own_chain(ctx, weight) if weight is not None and shape is not None else None
        if shape is None or weight is None or chain is None or weight.dtype != x.dtype:
            continue
        if leading is None:
            leading = shape[:-1]
        if shape[:-1] == leading:
            found.append(_Product(node, weight, shape[-1], chain))
    return found


def _products(ctx: RewriteContext, x: ir.Value, node: ir.Node
              ) -> list[_Product] | Reject | None:
    """The MatMuls to merge with ``node`` (with their biases when every one has one); None:
    ``node`` has no such sibling."""
    siblings = _siblings(ctx, x)
    if all(p.node is not node for p in siblings) or len(siblings) < MIN_BIASED_PRODUCTS:
        return None
    biased = [_with_bias(ctx, p) for p in siblings]
    if all(b is not None for b in biased):
        return [b for b in biased if b is not None]
    if any(b is not None for b in biased) and x.shape is not None and len(x.shape) == 2:
        return Reject("a 2-D input whose products are not all biased: they fuse into Gemm")
    if len(siblings) < MIN_PRODUCTS:
        return Reject("two unbiased MatMuls: a MatMul and a Split would be no fewer nodes")
    return siblings


def _mergeable(ctx: RewriteContext, x: ir.Value, node: ir.Node) -> bool | Reject:
    if ctx.is_constant(x):
        return False  # the products fold
    unit = breaks_qdq_units(node)
    if unit is not None:
        return unit
    found = _products(ctx, x, node)
    return found if isinstance(found, Reject) else found is not None


def _concat(ctx: RewriteContext, values: list[ir.Value], before: ir.Node, base: str
            ) -> ir.Value:
    """The concatenation of ``values`` (same rank, static shapes) along their last axis (the
    fold computes it)."""
    shapes = [ctx.shape(v) or () for v in values]
    leading = shapes[0][:-1]
    shape = ir.Shape([*leading, sum(s[-1] for s in shapes)])
    return ctx.add_node("Concat", values, before, attributes=[ir.AttrInt64("axis", len(leading))],
                        dtype=values[0].dtype, shape=shape, base=base)


def _with_last_dim(shape: ir.Shape | None, size: int) -> ir.Shape | None:
    return None if shape is None or len(shape) == 0 else ir.Shape([*shape[:-1], size])


def _split(ctx: RewriteContext, merged: ir.Value, products: list[_Product], before: ir.Node
           ) -> ir.Node:
    """A Split of ``merged``'s last axis into one part per product (its columns)."""
    split = split_node(ctx, merged, -1, [p.columns for p in products])
    for out, product in zip(split.outputs, products):
        result = product.result
        out.name = ctx.fresh_name(f"{result.name or 'product'}_part")
        if result.dtype is not None:
            out.dtype = result.dtype
        out.shape = result.shape
    ctx.graph.insert_before(before, split)
    return split


@pattern(P("MatMul", Var("x"), Var("w", const=True), name="node"),
         check=lambda ctx, x, w, node: _mergeable(ctx, x, node), name="merge_shared_input_matmuls")
def merge_shared_input_matmuls(ctx: RewriteContext, x: ir.Value, w: ir.Value,
                               node: ir.Node) -> None:
    """MatMul(x, Wi) [+ Bi], i = 1..n -> Split(MatMul(x, Concat(Wi)) [+ Concat(Bi)])."""
    products = _products(ctx, x, node)
    assert isinstance(products, list)
    members = {p.node for p in products}
    first = next(n for n in ctx.graph if n in members)  # the new nodes precede every reader
    for product in products:  # what computes a later product's weight moves up with it
        for link in product.chain:
            if link.graph is ctx.graph:
                ctx.graph.remove(link)
                ctx.graph.insert_before(first, link)
    out = products[0].node.outputs[0]
    columns = sum(p.columns for p in products)
    weights = _concat(ctx, [p.weight for p in products], first, "merged_weights")
    merged = ctx.add_node("MatMul", [x, weights], first, dtype=out.dtype,
                          shape=_with_last_dim(out.shape, columns), base="merged_products")
    biases = [p.bias for p in products if p.bias is not None]
    if biases:
        merged = ctx.add_node("Add", [merged, _concat(ctx, biases, first, "merged_biases")],
                              first, dtype=out.dtype, shape=merged.shape, base="merged_biased")
    split = _split(ctx, merged, products, first)
    for product, part in zip(products, split.outputs):
        ctx.touched.update(use.node for use in product.result.uses())
        ctx.replace_output(product.result, part)
        for gone in (product.bias_add, product.node):
            if gone is not None:
                ctx.graph.remove(gone, safe=True)
