"""Low-rank branches merged into their base weight across runtime constants: LoRA adapters fed
as graph inputs run at the merged model's speed.

    MatMul(x, W) + s * MatMul(MatMul(x, A), B)  ->  MatMul(x, W + s * (A @ B))

where A and B (and s) are known at the first call: runtime constants
(``settings.runtime_inputs``, what a ``Session`` or a split names) or constants, at least one of
them a runtime constant, and W a constant or a runtime constant. The new weight is computed by
the split's ``runtime_fold`` once per set of feeds and bound to the entry session as an
initializer, so onnxruntime prepacks it and each call runs the base product alone. Folding
``A @ B`` alone would make inference slower (a full matrix in place of two thin ones): the merge
pays because the base product absorbs it. Without runtime constants the rule never applies.

The forms exporters and peft produce:

- the scaling (scalars, constants or runtime constants) anywhere: on the branch's input,
  between its two products, on its result; several multiply; a Gemm's ``alpha`` is one;
- the factors in any layout: a MatMul of a transposed value (the fold computes the
  ``Transpose``), or a Gemm with ``transB``;
- a base Gemm with ``transB`` (its weight's rows are output columns), its bias C, alpha and beta;
- the branch's input through Identity nodes (dynamo's eval-mode ``Dropout``) or an inference
  ``Dropout``;
- the sum in either order, with the base's bias anywhere in it, and several branches of one
  base (several adapters at once): the Adds of one sum are followed to its leaves;
- Conv adapters (peft's Conv2d LoRA: A a convolution with the base's kernel, strides, pads and
  dilations, B a 1x1 convolution): ``W + s * (B[:, :, 0, 0] @ A)`` per tap.

The merged weight is ``Gemm(A, B, W, alpha=s)`` (the delta's transposes as ``transA`` and
``transB``; a runtime-constant scale multiplies the thinner factor), so each branch costs one
node of the runtime fold. In float16 and bfloat16 the product is computed in float32 and rounded
once before it is added. Reassociation is not bitwise: docs/exactness.md has the bound.

A branch whose base weight is a ``DequantizeLinear`` output stays (merging would requantize the
weight, or compute the dequantized weight in float on every call); the reason is reported, as
for the other declines below. A sum of constants only is left to the fold.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxfold.declare import GraphView, Match, OpBuilder, P, Reject, Var, pattern
from onnxfold.ir.graph import is_default_op, through_identities
from onnxfold.ir.qdq_units import dequantized

MAX_TERMS = 16  # leaves of one sum followed
MAX_HOPS = 8  # scalings and Identity nodes followed on a branch
_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)
_HALF = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
_PRODUCTS = ("MatMul", "Gemm")


@dataclass(frozen=True)
class _Base:
    """The product a branch merges into: its node, data input and weight."""

    node: ir.Node  # MatMul, Gemm or Conv
    x: ir.Value
    weight: ir.Value

    @property
    def transposed(self) -> bool:
        """Whether the weight's rows are the output columns (a Gemm with transB)."""
        return self.node.op_type == "Gemm" and bool(self.node.attributes.get_int("transB", 0))


@dataclass(frozen=True)
class _Branch:
    """``scales * (x @ op(a)) @ op(b)`` (or a Conv of a Conv): the term of the sum, the input
    of its first product, its factors (each read transposed or not), the scalars it is
    multiplied by (values) and the product of its Gemms' alphas, and the nodes that compute
    it (its first and second product among them)."""

    term: ir.Value
    x: ir.Value
    a: ir.Value
    a_transposed: bool
    b: ir.Value
    b_transposed: bool
    scales: tuple[ir.Value, ...]
    alpha: float
    nodes: tuple[ir.Node, ...]
    first: ir.Node
    second: ir.Node

    @property
    def conv(self) -> bool:
        return self.second.op_type == "Conv"


def _here(ctx: GraphView, node: ir.Node | None, *op_types: str) -> bool:
    # what to build: a sum's terms end at another graph (an outer value is a term)
    return node is not None and node.op_type in op_types and is_default_op(node) and \
        ctx.here(node)


def _followed(ctx: GraphView, value: ir.Value, dtype: ir.DataType | None) -> bool:
    """Whether ``value`` is an Add of the sum it is read by: an Add of this graph of the
    sum's dtype that only that sum reads."""
    node = value.producer()
    # what to build: an Add another node reads too is a term of the sum, not part of it
    return _here(ctx, node, "Add") and ctx.single_use(value) and value.dtype == dtype


def _sum_root(ctx: GraphView, add: ir.Node) -> bool:
    """Whether ``add`` is the top of its sum (no Add follows it as a part of a larger one)."""
    out = add.outputs[0]
    if not _followed(ctx, out, out.dtype):
        return True
    # what to build: the sum goes on in the Add that alone reads it
    return not _here(ctx, ctx.reader(out), "Add")


def _terms(ctx: GraphView, add: ir.Node) -> tuple[list[ir.Value], list[ir.Node]]:
    """The values the sum at ``add`` adds, left to right, and its inner Add nodes."""
    dtype = add.outputs[0].dtype
    terms: list[ir.Value] = []
    inner: list[ir.Node] = []
    todo = [v for v in reversed(add.inputs) if v is not None]
    while todo:
        value = todo.pop()
        node = value.producer()
        if node is not None and _followed(ctx, value, dtype) and \
                len(terms) + len(todo) < MAX_TERMS:
            inner.append(node)
            todo.extend(v for v in reversed(node.inputs) if v is not None)
        else:
            terms.append(value)
    return terms, inner


def _scalar(ctx: GraphView, value: ir.Value | None, other: ir.Value | None) -> bool:
    """Whether ``value`` is one number known at fold time that does not broadcast ``other``
    to a higher rank."""
    shape = ctx.shape(value)
    if value is None or shape is None or not ctx.known_at_fold(value) or \
            ctx.known_at_fold(other):
        return False
    rank = len(other.shape) if other is not None and other.shape is not None else None
    return all(d == 1 for d in shape) and (len(shape) <= 1 or (rank is not None and
                                                                len(shape) <= rank))


def _peeled(ctx: GraphView, value: ir.Value, scales: list[ir.Value],
            nodes: list[ir.Node]) -> ir.Value:
    """``value`` without the scalings and Identity nodes that compute it (collected)."""
    for _ in range(MAX_HOPS):
        node = value.producer()
        if _here(ctx, node, "Identity") and node is not None and node.inputs[0] is not None:
            nodes.append(node)
            value = node.inputs[0]
            continue
        if not _here(ctx, node, "Mul") or node is None or len(node.inputs) != 2:
            return value
        left, right = node.inputs
        if _scalar(ctx, right, left) and left is not None and right is not None:
            scales.append(right)
            value = left
        elif _scalar(ctx, left, right) and left is not None and right is not None:
            scales.append(left)
            value = right
        else:
            return value
        nodes.append(node)
    return value


def _inference_dropout(ctx: GraphView, node: ir.Node | None) -> bool:
    """A Dropout whose mask nothing reads and whose training mode is absent or false."""
    if not _here(ctx, node, "Dropout") or node is None:
        return False
    # what to build: a Dropout whose mask is read stays a Dropout
    if len(node.outputs) > 1 and ctx.readers(node.outputs[1]):
        return False
    flag = node.inputs[2] if len(node.inputs) > 2 else None
    if flag is None:
        return True
    array = ctx.array(flag)
    return array is not None and array.size == 1 and not bool(array.reshape(-1)[0])


def source(ctx: GraphView, value: ir.Value) -> ir.Value:
    """``value`` through Identity nodes and inference Dropouts: what a branch and its base
    must both read."""
    for _ in range(MAX_HOPS):
        value = list(through_identities(value))[-1]
        node = value.producer()
        if not _inference_dropout(ctx, node) or node is None or node.inputs[0] is None:
            return value
        value = node.inputs[0]
    return value


def _product(ctx: GraphView, value: ir.Value
             ) -> tuple[ir.Node, ir.Value, ir.Value, bool, float] | None:
    """``value`` as ``input @ op(factor) * alpha``: a MatMul or a Gemm without C or transA,
    a Conv without bias, whose second input is known at fold time and its first not (node,
    input, factor, transposed, alpha)."""
    node = value.producer()
    if not _here(ctx, node, *_PRODUCTS, "Conv") or node is None or len(node.inputs) < 2:
        return None
    data, factor = node.inputs[0], node.inputs[1]
    if data is None or factor is None or not ctx.known_at_fold(factor) or \
            ctx.known_at_fold(data) or factor.shape is None:
        return None
    if len(node.inputs) > 2 and not _zero(ctx, node.inputs[2]):
        return None  # a bias (Gemm's C, Conv's B): dynamo gives a Conv without one a zero bias
    if node.op_type == "Conv":
        return node, data, factor, False, 1.0
    if len(factor.shape) != 2:
        return None
    transposed, alpha = False, 1.0
    if node.op_type == "Gemm":
        if node.attributes.get_int("transA", 0):
            return None
        transposed = bool(node.attributes.get_int("transB", 0))
        alpha = node.attributes.get_float("alpha", 1.0)
    factor, flipped = _untransposed(ctx, factor)
    return node, data, factor, transposed != flipped, alpha


def _zero(ctx: GraphView, value: ir.Value | None) -> bool:
    """Whether ``value`` is absent or a constant of zeros."""
    if value is None:
        return True
    array = ctx.array(value)
    return array is not None and not np.any(array)


def _untransposed(ctx: GraphView, factor: ir.Value) -> tuple[ir.Value, bool]:
    """A 2-D ``factor`` computed by a Transpose (dynamo's of each Linear weight): its input
    and True, which the merged weight's Gemm reads transposed instead; else itself, False."""
    node = factor.producer()
    if not _here(ctx, node, "Transpose") or node is None or node.inputs[0] is None:
        return factor, False
    perm = node.attributes.get_ints("perm", None)
    if perm is not None and list(perm) != [1, 0]:
        return factor, False
    return node.inputs[0], True


def _branch(ctx: GraphView, term: ir.Value) -> _Branch | None:
    """``term`` as a low-rank branch: two products of the same kind in a row, scalings around
    them."""
    scales: list[ir.Value] = []
    nodes: list[ir.Node] = []
    second = _product(ctx, _peeled(ctx, term, scales, nodes))
    if second is None:
        return None
    second_node, middle, b, b_t, b_alpha = second
    first = _product(ctx, _peeled(ctx, middle, scales, nodes))
    if first is None or (first[0].op_type == "Conv") != (second_node.op_type == "Conv"):
        return None
    first_node, x, a, a_t, a_alpha = first
    return _Branch(term, x, a, a_t, b, b_t, tuple(scales), a_alpha * b_alpha,
                   (*nodes, second_node, first_node), first_node, second_node)


def _reach(ctx: GraphView, branch: _Branch, bases: list[_Base]
           ) -> tuple[_Base, _Branch] | None:
    """The base whose input ``branch`` reads (through Identity nodes, inference Dropouts and
    scalings of its own), and the branch with those scalings."""
    scales: list[ir.Value] = []
    nodes: list[ir.Node] = []
    value = branch.x
    origins = {source(ctx, b.x): b for b in bases if b.node is not branch.term.producer()}
    for _ in range(MAX_HOPS):
        found = origins.get(source(ctx, value))
        if found is not None:
            return found, dataclasses.replace(
                branch, scales=branch.scales + tuple(scales), nodes=branch.nodes + tuple(nodes))
        peeled = _peeled(ctx, source(ctx, value), scales, nodes)
        if peeled is source(ctx, value):
            return None
        value = peeled
    return None


def _base(ctx: GraphView, term: ir.Value) -> _Base | None:
    """``term`` as a MatMul, Gemm (no transA) or Conv (one group) of dynamic data and a
    weight known at fold time."""
    node = term.producer()
    if not _here(ctx, node, "MatMul", "Gemm", "Conv") or node is None or len(node.inputs) < 2:
        return None
    x, weight = node.inputs[0], node.inputs[1]
    if x is None or weight is None or ctx.known_at_fold(x) or not ctx.known_at_fold(weight):
        return None
    transposed_input = node.attributes.get_int("transA", 0) if node.op_type == "Gemm" else 0
    if transposed_input:
        return None
    group = node.attributes.get_int("group", 1) if node.op_type == "Conv" else 1
    if group != 1:
        return None
    return _Base(node, x, weight)


def _dims(ctx: GraphView, value: ir.Value) -> tuple[int | None, ...] | None:
    """``value``'s dims (None where not static), or None when its rank is not known."""
    shape = ctx.shape(value)
    if shape is not None:
        return tuple(shape)
    if value.shape is None:
        return None
    return tuple(d if isinstance(d, int) else None for d in value.shape)


def _matmul_fits(ctx: GraphView, base: _Base, branch: _Branch) -> Reject | None:
    """Why ``branch``'s product cannot be added to ``base``'s weight (None: it can)."""
    w, a, b = _dims(ctx, base.weight), _dims(ctx, branch.a), _dims(ctx, branch.b)
    if w is None or len(w) != 2 or None in w or a is None or b is None:
        return Reject("the base weight or the branch's factors have no known 2-D shape")
    rows, columns = (w[1], w[0]) if base.transposed else (w[0], w[1])
    a_rows = a[1] if branch.a_transposed else a[0]
    b_columns = b[0] if branch.b_transposed else b[1]
    if a_rows != rows or b_columns != columns:
        return Reject("the branch's product is not the shape of the base weight")
    return None


def _conv_layout(node: ir.Node, taps: int) -> tuple:
    """A Conv's strides, pads, dilations and auto_pad, with ONNX's defaults filled in."""
    def ints(name: str, default: int, count: int) -> tuple[int, ...]:
        attr = node.attributes.get(name)
        return tuple(attr.value) if attr is not None else (default,) * count

    auto_pad = node.attributes.get_string("auto_pad", "NOTSET") or "NOTSET"
    return (ints("strides", 1, taps), ints("pads", 0, 2 * taps), ints("dilations", 1, taps),
            auto_pad, node.attributes.get_int("group", 1) or 1)


def _conv_fits(ctx: GraphView, base: _Base, branch: _Branch) -> Reject | None:
    """Why ``branch``'s convolutions cannot be added to ``base``'s kernel (None: they can):
    A must convolve as the base does, B be a plain 1x1 convolution."""
    w, a, b = _dims(ctx, base.weight), _dims(ctx, branch.a), _dims(ctx, branch.b)
    if w is None or None in w or a is None or b is None or len(a) != len(w) or \
            len(b) != len(w) or len(w) < 3:
        return Reject("the base kernel or the branch's kernels have no known shape")
    if a[1:] != w[1:] or b[0] != w[0] or any(d != 1 for d in b[2:]):
        return Reject("the branch's kernels do not add up to the base kernel's shape")
    taps = len(w) - 2
    if _conv_layout(branch.first, taps) != _conv_layout(base.node, taps):
        return Reject("the branch's first convolution is not laid out as the base's")
    strides, pads, _, auto_pad, group = _conv_layout(branch.second, taps)
    if set(strides) != {1} or set(pads) != {0} or auto_pad not in ("NOTSET", "VALID") or \
            group != 1:
        return Reject("the branch's second convolution is not a plain 1x1")
    return None


def _fits(ctx: GraphView, base: _Base, branch: _Branch) -> Reject | ir.DataType:
    """Why ``branch`` cannot merge into ``base``, or the one float type they share."""
    dtypes = {v.dtype for v in (base.x, base.weight, branch.a, branch.b, *branch.scales)}
    dtype = next(iter(dtypes))
    if len(dtypes) != 1 or dtype is None or dtype not in _FLOATS:
        return Reject("the branch and its base are not of one float type")
    if dequantized(base.weight):
        return Reject("the base weight is quantized (a DequantizeLinear output): merging "
                      "would requantize it")
    if branch.conv != (base.node.op_type == "Conv"):
        return Reject("a convolution and a product do not merge")
    if base.node.op_type == "Gemm" and base.node.attributes.get_float("alpha", 1.0) == 0.0:
        return Reject("the base Gemm's alpha is 0")
    why = _conv_fits(ctx, base, branch) if branch.conv else _matmul_fits(ctx, base, branch)
    return why if why is not None else dtype


@dataclass(frozen=True)
class _Scaled:
    """A branch as it merges: the product of its Gemms' alphas and its constant scalings (in
    float64 those stay values), and the scalings still to multiply."""

    branch: _Branch
    alpha: float
    scales: tuple[ir.Value, ...]


@dataclass(frozen=True)
class _BaseMerge:
    """A base and the branches it takes in: their float type, the base weight's dims."""

    base: _Base
    dtype: ir.DataType
    dims: tuple[int | None, ...] | None
    branches: list[_Scaled]


@dataclass(frozen=True)
class _Merge:
    """One sum's rewrite: its terms and inner Adds, and what each base term takes in."""

    terms: list[ir.Value]
    inner: list[ir.Node]
    merges: dict[ir.Value, _BaseMerge]  # base term -> its branches

    def gone(self) -> list[ir.Node]:
        """The nodes the merged sum no longer needs: its inner Adds, the branches and the
        bases (the rebuilt bases replace them)."""
        return [*self.inner, *(node for merge in self.merges.values()
                               for node in (*(n for s in merge.branches
                                              for n in s.branch.nodes), merge.base.node))]


def _plan(ctx: GraphView, add: ir.Node) -> _Merge | Reject | None:
    """What merging the sum at ``add`` does; a Reject when it has a branch that cannot merge,
    None when it has none."""
    terms, inner = _terms(ctx, add)
    if len(terms) < 2:
        return None
    branches = [b for b in (_branch(ctx, t) for t in terms) if b is not None]
    if not branches:
        return None
    bases = {t: b for t in terms if (b := _base(ctx, t)) is not None}
    merges: dict[ir.Value, list[_Branch]] = {}  # base term -> its branches
    merged_into: dict[ir.Value, tuple[_Base, ir.DataType]] = {}
    reason: Reject | None = None
    for branch in branches:
        reached = _reach(ctx, branch, list(bases.values()))
        if reached is None:
            reason = reason or Reject("no MatMul, Gemm or Conv with a weight known at fold "
                                      "time reads the branch's input in its sum")
            continue
        base, branch = reached
        if not any(ctx.is_runtime_constant(v) for v in (base.weight, branch.a, branch.b,
                                                        *branch.scales)):
            continue  # constants only: the fold's (bitwise) business, not a runtime fold's
        fit = _fits(ctx, base, branch)
        if isinstance(fit, Reject):
            reason = reason or fit
            continue
        merges.setdefault(base.node.outputs[0], []).append(branch)
        merged_into[base.node.outputs[0]] = base, fit
    if not merges:
        return reason
    return _Merge(terms, inner, {term: _merged(ctx, *merged_into[term], branches)
                                 for term, branches in merges.items()})


def _merged(ctx: GraphView, base: _Base, dtype: ir.DataType, branches: list[_Branch]
            ) -> _BaseMerge:
    """What ``base`` takes in: ``branches``, each with its scaling split."""
    return _BaseMerge(base, dtype, _dims(ctx, base.weight),
                      [_scale(ctx, branch, dtype) for branch in branches])


def _mergeable(ctx: GraphView, add: ir.Node) -> bool | Match | Reject:
    if not ctx.settings.runtime_inputs or not _sum_root(ctx, add):
        return False
    plan = _plan(ctx, add)
    if plan is None or isinstance(plan, Reject):
        return plan if isinstance(plan, Reject) else False
    return Match(plan=plan, gone=plan.gone())


def _scale(ctx: GraphView, branch: _Branch, dtype: ir.DataType) -> _Scaled:
    """The branch's scaling as a Gemm alpha (its constants; float64 keeps them as values)
    and the values still to multiply."""
    alpha = branch.alpha
    values: list[ir.Value] = []
    for scale in branch.scales:
        array = ctx.array(scale) if ctx.is_constant(scale) else None
        if array is not None and dtype != ir.DataType.DOUBLE:
            alpha *= float(array.reshape(-1)[0])
        else:
            values.append(scale)
    return _Scaled(branch, alpha, tuple(values))


# -- the rewrite ----------------------------------------------------------------------------

def _int64s(op: OpBuilder, values: list[int], base: str) -> ir.Value:
    return op.constant(np.array(values, np.int64), base)


def _factors(op: OpBuilder, base: _Base, branch: _Branch
             ) -> tuple[ir.Value, bool, ir.Value, bool]:
    """The Gemm operands (P, transA, Q, transB) whose product is the branch's delta in the
    layout of the base weight (for a Conv: its kernel flattened to [out, in * taps])."""
    if branch.conv:
        rows = op.Reshape(branch.b, _int64s(op, [0, -1], "lora_rows"), _dtype=branch.b.dtype,
                          _name="lora_b_matrix")
        taps = op.Reshape(branch.a, _int64s(op, [0, -1], "lora_taps"), _dtype=branch.a.dtype,
                          _name="lora_a_matrix")
        return rows, False, taps, False
    if base.transposed:  # (op(A) @ op(B))^T = op(B)^T @ op(A)^T
        return branch.b, not branch.b_transposed, branch.a, not branch.a_transposed
    return branch.a, branch.a_transposed, branch.b, branch.b_transposed


def _delta(op: OpBuilder, merge: _BaseMerge, scaled: _Scaled, weight: ir.Value) -> ir.Value:
    """``weight`` plus the branch's scaled product, as nodes the runtime fold computes."""
    base, branch, dtype = merge.base, scaled.branch, merge.dtype
    p, trans_p, q, trans_q = _factors(op, base, branch)
    base_alpha = base.node.attributes.get_float("alpha", 1.0) \
        if base.node.op_type == "Gemm" else 1.0
    alpha = scaled.alpha / base_alpha  # the base Gemm multiplies the merged weight by its alpha
    for scale in scaled.scales:
        p = op.Mul(p, scale, _dtype=dtype, _name="lora_scaled")
    w_shape = merge.dims
    flat = None
    if branch.conv and w_shape is not None:  # _conv_fits: a static kernel
        out_channels = int(w_shape[0] or 0)
        flat = [out_channels, math.prod(d or 0 for d in w_shape[1:])]
        weight = op.Reshape(weight, _int64s(op, flat, "kernel_rows"), _dtype=dtype,
                            _shape=ir.Shape(flat), _name="kernel_matrix")
    gemm = {"alpha": alpha, "transA": int(trans_p), "transB": int(trans_q)}
    if dtype in _HALF:  # the product in float32, rounded once, then added
        wide = [op.Cast(v, to=1, _dtype=ir.DataType.FLOAT, _name="lora_float") for v in (p, q)]
        product = op.Gemm(*wide, **gemm, _dtype=ir.DataType.FLOAT, _name="lora_delta")
        narrow = op.Cast(product, to=dtype.value, _dtype=dtype, _name="lora_delta")
        merged = op.Add(weight, narrow, _dtype=dtype, _shape=weight.shape, _name="merged_weight")
    else:
        merged = op.Gemm(p, q, weight, **gemm, _dtype=dtype, _shape=weight.shape,
                         _name="merged_weight")
    if flat is not None and w_shape is not None:
        merged = op.Reshape(merged, _int64s(op, [int(d or 0) for d in w_shape], "kernel_shape"),
                            _dtype=dtype, _shape=ir.Shape(w_shape), _name="merged_kernel")
    return merged


def _rebuilt_base(op: OpBuilder, base: _Base, weight: ir.Value) -> ir.Value:
    """The base node again, reading ``weight``."""
    inputs = list(base.node.inputs)
    inputs[1] = weight
    out = base.node.outputs[0]
    return op.node(base.node.op_type, *inputs, _dtype=out.dtype, _shape=out.shape,
                   _name=out.name or "merged_product", _attributes=base.node.attributes)


def _leaves(plan: _Merge) -> Iterator[ir.Value]:
    merged = {s.branch.term for merge in plan.merges.values() for s in merge.branches}
    return (t for t in plan.terms if t not in merged)


@pattern(P("Add", Var("left"), Var("right"), name="add"), check=_mergeable,
         name="merge_low_rank_branches")
def merge_low_rank_branches(op: OpBuilder, add: ir.Node, plan: _Merge) -> ir.Value:
    """x @ W + s * (x @ A) @ B [+ ...] -> x @ (W + s * A @ B) [+ ...]."""
    replaced: dict[ir.Value, ir.Value] = {}
    for term, merge in plan.merges.items():
        weight = merge.base.weight
        for scaled in merge.branches:
            weight = _delta(op, merge, scaled, weight)
        replaced[term] = _rebuilt_base(op, merge.base, weight)
    out = add.outputs[0]
    values = [replaced.get(t, t) for t in _leaves(plan)]
    total = values[0]
    for i, value in enumerate(values[1:], start=2):
        total = op.Add(total, value, _dtype=out.dtype,
                       _shape=out.shape if i == len(values) else None, _name="sum")
    return total
