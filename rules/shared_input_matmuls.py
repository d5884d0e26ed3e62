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

Projections split into attention heads (an attention's Q, K and V, a decoder's cross-attention
K and V) stay apart: onnxruntime's transformer optimizer fuses them into its ``Attention`` op
only as three MatMuls (``rules/fusable.py``).

Merged where it leaves fewer nodes: three products or more, or two with their biases. A 2-D
``x`` whose products are not all biased is left alone: the biased ones fuse into Gemm nodes,
which the merge would prevent.

Never in a quantized (QDQ) model's node units (``onnxfold/ir/qdq_units.py``; tagged
``keeps_qdq_units``, and siblings in a unit are left out of the merge): a MatMul whose weight
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

from onnxfold.declare import (
    KEEPS_QDQ_UNITS,
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
from onnxfold.ir.graph import is_default_op
from onnxfold.ir.qdq_units import qdq_unit_of

from .fusable import splits_into_heads
from .structure import split_node

MIN_PRODUCTS = 3  # MatMul + Split replace them: fewer nodes from three on
MIN_BIASED_PRODUCTS = 2  # MatMul + Add + Split replace 2n nodes
MAX_CHAIN = 4  # foldable nodes between a weight and its initializers


@dataclass(frozen=True)
class _Product:
    """One of the MatMuls: its node, its weight, the weight's column count and other dims, the
    nodes that compute the weight and, if merged with it, its bias Add and bias."""

    node: ir.Node
    weight: ir.Value
    columns: int
    leading: tuple[int, ...]
    chain: tuple[ir.Node, ...] = ()  # the foldable nodes computing the weight, in order
    bias_add: ir.Node | None = None
    bias: ir.Value | None = None

    @property
    def result(self) -> ir.Value:
        """What the rest of the graph reads: the biased product, or the product."""
        return (self.bias_add or self.node).outputs[0]


def _own_initializer(ctx: GraphView, value: ir.Value | None) -> ir.Value | None:
    """``value`` if it is a constant initializer with data that only one node reads (merging
    it into a concatenation then duplicates nothing)."""
    # what to build: a weight is no node of the match; merging a shared one copies it
    if value is not None and value.producer() is None and ctx.is_constant(value) \
            and ctx.single_use(value) and ctx.has_array(value):
        return value
    return None


def _own_chain(ctx: GraphView, value: ir.Value) -> tuple[ir.Node, ...] | None:
    """The foldable nodes (at most ``MAX_CHAIN``, in graph order; the driver refuses a merge
    that would move one ``--keep`` keeps) that compute ``value`` from initializers only it
    reads, each of their results read once (folding the merge then frees every tensor it
    reads); None if there is no such chain."""
    chain: list[ir.Node] = []
    todo = [value]
    while todo:
        current = todo.pop()
        if current.producer() is None:
            if _own_initializer(ctx, current) is None:
                return None
            continue
        node = current.producer()
        # what to build: the chain that moves with its product, computing only its weight
        if node is None or not ctx.here(node) or len(chain) == MAX_CHAIN or \
                not ctx.is_constant(current) or not ctx.single_use(current) or \
                len(node.outputs) != 1 or node in chain:
            return None
        chain.append(node)
        todo.extend(v for v in node.inputs if v is not None)
    return tuple(reversed(chain))


def _weight_shape(ctx: GraphView, node: ir.Node) -> tuple[int, ...] | None:
    shape = ctx.shape(node.inputs[1]) if len(node.inputs) == 2 else None
    if shape is None or len(shape) < 2 or 0 in shape:
        return None
    return shape


def _with_bias(ctx: GraphView, product: _Product) -> _Product | None:
    """``product`` with the Add that alone reads it and adds a constant of one value per
    column (None: there is no such Add)."""
    out = product.node.outputs[0]
    # what to build: a biased product where its one reader, in this graph, adds the bias
    add = ctx.reader(out)
    # what to build: that reader, an Add of this graph
    if add is None or not is_default_op(add, "Add") or not ctx.here(add) or len(add.inputs) != 2:
        return None
    other = add.inputs[1] if add.inputs[0] is out else add.inputs[0]
    bias = _own_initializer(ctx, other) if other is not out else None
    if bias is None or ctx.shape(bias) != (product.columns,) or bias.dtype != out.dtype:
        return None
    return _Product(product.node, product.weight, product.columns, product.leading,
                    product.chain, add, bias)


def _siblings(ctx: GraphView, x: ir.Value) -> list[_Product]:
    """The MatMuls of this graph reading ``x`` first and a weight of their own second
    (``_own_chain``), whose weights agree in every dim but the last (the first such weight
    sets them), none of them in a QDQ node unit (``onnxfold/ir/qdq_units.py``)."""
    found: list[_Product] = []
    taken: set[ir.Node] = set()  # (a set: x may have thousands of readers)
    leading: tuple[int, ...] | None = None
    # what to build: the products reading x (the siblings to merge)
    for node, index in ctx.readers(x):
        # what to build: the siblings of this graph merge (one of a subgraph stays apart)
        if index != 0 or not is_default_op(node, "MatMul") or not ctx.here(node) \
                or node in taken or qdq_unit_of(node) is not None:
            continue
        shape = _weight_shape(ctx, node)
        weight = node.inputs[1]
        chain = _own_chain(ctx, weight) if weight is not None and shape is not None else None
        if shape is None or weight is None or chain is None or weight.dtype != x.dtype:
            continue
        if leading is None:
            leading = shape[:-1]
        if shape[:-1] == leading:
            found.append(_Product(node, weight, shape[-1], leading, chain))
            taken.add(node)
    return found


def _products(ctx: GraphView, x: ir.Value, node: ir.Node
              ) -> list[_Product] | Reject | None:
    """The MatMuls to merge with ``node`` (with their biases when every one has one); None:
    ``node`` has no such sibling."""
    siblings = _siblings(ctx, x)
    if all(p.node is not node for p in siblings) or len(siblings) < MIN_BIASED_PRODUCTS:
        return None
    biased = [_with_bias(ctx, p) for p in siblings]
    if any(splits_into_heads(ctx, (b or p).result) for p, b in zip(siblings, biased)):
        return Reject("projections into attention heads: onnxruntime's attention fusers "
                      "match them apart (rules/fusable.py)")
    if all(b is not None for b in biased):
        return [b for b in biased if b is not None]
    if any(b is not None for b in biased) and x.shape is not None and len(x.shape) == 2:
        return Reject("a 2-D input whose products are not all biased: they fuse into Gemm")
    if len(siblings) < MIN_PRODUCTS:
        return Reject("two unbiased MatMuls: a MatMul and a Split would be no fewer nodes")
    return siblings


def _mergeable(ctx: GraphView, x: ir.Value, node: ir.Node) -> bool | Match | Reject:
    # what to build: a merge needs two products of x at least
    if sum(index == 0 and reader.op_type == "MatMul" for reader, index in ctx.readers(x)) \
            < MIN_BIASED_PRODUCTS:
        return False  # no siblings (most MatMuls: counted first, it is cheap)
    found = _products(ctx, x, node)
    if found is None or isinstance(found, Reject):
        return found if isinstance(found, Reject) else False
    matmuls = [p.node for p in found]
    # the new nodes go before the first of them (they precede every reader)
    return Match(products=found, matmuls=matmuls, first=ctx.in_order(matmuls)[0])


def _concat(op: OpBuilder, values: list[ir.Value], leading: tuple[int, ...], columns: int,
            base: str) -> ir.Value:
    """The concatenation of ``values`` (of shapes ``leading`` and then a last dim, adding up
    to ``columns``) along their last axis (the fold computes it)."""
    return op.Concat(*values, axis=len(leading), _dtype=values[0].dtype,
                     _shape=ir.Shape([*leading, columns]), _name=base)


def _with_last_dim(shape: ir.Shape | None, size: int) -> ir.Shape | None:
    return None if shape is None or len(shape) == 0 else ir.Shape([*shape[:-1], size])


@pattern(P("MatMul", Var("x"), Var("w", const=True), name="node"), check=_mergeable,
         name="merge_shared_input_matmuls", tags=[KEEPS_QDQ_UNITS])
def merge_shared_input_matmuls(op: OpBuilder, x: ir.Value, products: list[_Product],
                               first: ir.Node) -> Replacement:
    """MatMul(x, Wi) [+ Bi], i = 1..n -> Split(MatMul(x, Concat(Wi)) [+ Concat(Bi)])."""
    out = products[0].node.outputs[0]
    leading, columns = products[0].leading, sum(p.columns for p in products)
    weights = _concat(op, [p.weight for p in products], leading, columns, "merged_weights")
    merged = op.MatMul(x, weights, _dtype=out.dtype, _shape=_with_last_dim(out.shape, columns),
                       _name="merged_products")
    biases = [p.bias for p in products if p.bias is not None]
    if biases:
        merged = op.Add(merged, _concat(op, biases, (), columns, "merged_biases"),
                        _dtype=out.dtype, _shape=merged.shape, _name="merged_biased")
    parts = split_node(op, merged, -1, [p.columns for p in products], [
        Out(f"{p.result.name or 'product'}_part", p.result.dtype, p.result.shape)
        for p in products])
    # what computes a later product's weight moves up with it
    return Replacement(values={p.result: part for p, part in zip(products, parts)},
                       before=first, moved=[link for p in products for link in p.chain])
