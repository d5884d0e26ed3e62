"""Symbolic shape values: what the shape scaffolding of a graph computes, element by element.

onnx's shape inference gives every value a shape whose dims are ints or names; it does not
expose what the *values* of shape tensors are (``Shape(x)``, ``Gather`` of it, ``Concat`` of
that with constants...), which is what folding the scaffolding of a model with dynamic axes
needs. :func:`shape_values` follows those small integer tensors through the ops that build
shapes, element by element: each element is an int, or a :class:`Sym` (a dynamic dim, or an
expression of them). A value whose elements are all ints is a constant for every value of the
dynamic dims; one that keeps a ``Sym`` names the dim that blocks it.

Two dims are the same symbol when they are the same axis of the same value, or carry the same
name from shape inference (a graph input's ``dim_param``, or the name inference gave a dim it
proved equal to it) - unless the inputs use that name more than once: onnxruntime does not
check that such dims agree, so they prove nothing, except under the user's
``--assume-named-dims-equal`` (``NAMED_DIMS_EQUAL_KEY``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxfold.ir.graph import DEFAULT_DOMAINS, all_graphs, tensor_of
from onnxfold.ir.slicing import onnx_slice

MAX_ELEMENTS = 64  # shape tensors are short; longer integer tensors are data, not shapes
REFINED_KEY = "onnxfold.symbolic.dims"  # Value.meta: dims proved better than the declared ones
# Model.meta: True when the user assumes that the inputs' dims of one name are one value
NAMED_DIMS_EQUAL_KEY = "onnxfold.symbolic.named_dims_equal"


@dataclass(frozen=True)
class Sym:
    """A dynamic dim or an expression of them: ``("dim", name)``, ``("axis", id, name, i)``,
    ``(op, a, b)``, ``("Broadcast", a, b, ...)`` (what broadcasting dims that may each be 1
    gives: the one that is not 1) or ``("Reshape0", e, d)`` (a Reshape target element ``e``,
    which copies the input's dim ``d`` where it is 0)."""

    expr: tuple

    def __str__(self) -> str:
        kind = self.expr[0]
        if kind == "dim":
            return str(self.expr[1])
        if kind == "axis":
            return f"{self.expr[2]}[{self.expr[3]}]"
        if kind == "Reshape0":
            return f"({self.expr[1]} or, if 0, {self.expr[2]})"
        if kind == "Broadcast":
            return f"broadcast({', '.join(str(a) for a in self.expr[1:])})"
        return f"({self.expr[1]} {kind} {self.expr[2]})"

    def atoms(self) -> list[Sym]:
        """The dims this expression is made of."""
        if self.expr[0] in ("dim", "axis"):
            return [self]
        return [a for part in self.expr[1:] if isinstance(part, Sym) for a in part.atoms()]


Dim = int | Sym


@dataclass(frozen=True)
class Known:
    """The value of a small integer tensor: its elements, and whether it is a 0-D scalar."""

    elements: tuple[Dim, ...]
    scalar: bool = False
    dtype: np.dtype = np.dtype(np.int64)

    @property
    def is_constant(self) -> bool:
        return all(isinstance(e, int) for e in self.elements)

    def array(self) -> np.ndarray:
        arr = np.asarray(self.elements, self.dtype)
        return arr.reshape(()) if self.scalar else arr

    def blocking(self) -> list[Sym]:
        """The dynamic dims that keep this value from being a constant."""
        found: dict[Sym, None] = {}
        for e in self.elements:
            if isinstance(e, Sym):
                found.update(dict.fromkeys(e.atoms()))
        return list(found)


def shared_dim_names(model: ir.Model) -> frozenset[str]:
    """Dim names the model's inputs use more than once. onnxruntime does not check that dims
    of one name agree, so such a name proves nothing: its dims are told apart by axis. None
    when the user assumes them equal (``NAMED_DIMS_EQUAL_KEY``): one name, one symbol."""
    if model.meta.get(NAMED_DIMS_EQUAL_KEY):
        return frozenset()
    seen: dict[str, int] = {}
    for value in model.graph.inputs:
        for dim in value.shape or ():
            name = getattr(dim, "value", None)
            if isinstance(name, str) and name:
                seen[name] = seen.get(name, 0) + 1
    return frozenset(n for n, count in seen.items() if count > 1)


def dim_symbol(value: ir.Value, axis: int, ambiguous: frozenset[str] = frozenset()
               ) -> Dim | None:
    """Axis ``axis`` of ``value``'s shape as an int or a symbol; None if its rank is unknown.

    A dim :func:`shape_values` proved to be an int or a graph input's dim (``REFINED_KEY``)
    is that; a named dim is the symbol of its name unless the name is ``ambiguous``; any other
    dynamic dim is a symbol of this very axis of this very value (by identity: names change)."""
    shape = value.shape
    if shape is None or axis >= len(shape):
        return None
    dim = shape[axis]
    if isinstance(dim, int):
        return dim
    refined = value.meta.get(REFINED_KEY)
    if refined is not None and len(refined) == len(shape) and refined[axis] is not None:
        return refined[axis]
    return _declared(value, axis, ambiguous)


def _declared(value: ir.Value, axis: int, ambiguous: frozenset[str]) -> Dim:
    """Axis ``axis`` of ``value`` as shape inference declares it (the rank is known)."""
    assert value.shape is not None
    dim = value.shape[axis]
    if isinstance(dim, int):
        return dim
    name = getattr(dim, "value", None)
    if isinstance(name, str) and name and name not in ambiguous:
        return Sym(("dim", name))
    return Sym(("axis", id(value), value.name or "?", axis))


def _ints(arr: np.ndarray | None) -> list[int] | None:
    """The elements of a 0-D or 1-D integer array (shape tensors are never of higher rank)."""
    if arr is None or arr.dtype.kind not in "iu" or arr.size > MAX_ELEMENTS or arr.ndim > 1:
        return None
    return [int(v) for v in arr.reshape(-1).tolist()]


def _fits(known: Known) -> bool:
    """Whether every static element is representable in the value's dtype (onnxruntime wraps
    what is not: such a value is left to it)."""
    if known.dtype == np.bool_:
        return True
    info = np.iinfo(known.dtype)
    return all(info.min <= e <= info.max for e in known.elements if isinstance(e, int))


def _arith(op: str, a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        if op == "Add":
            return a + b
        if op == "Sub":
            return a - b
        if op == "Mul":
            return a * b
        if b != 0:
            q = abs(a) // abs(b)  # integer Div truncates toward zero, as onnxruntime's
            return q if (a < 0) == (b < 0) else -q
        return Sym(("Div", a, b))
    if op == "Sub" and a == b:
        return 0
    if op == "Div" and a == b:
        return 1
    if op in ("Mul", "Div") and b == 1 or op in ("Add", "Sub") and b == 0:
        return a
    if op in ("Mul", "Add") and (a == 1 and op == "Mul" or a == 0 and op == "Add"):
        return b
    if op in ("Mul", "Add") and _order(b) < _order(a):
        a, b = b, a  # commutative: one form for a + b and b + a, so that they compare equal
    return Sym((op, a, b))


def _order(d: Dim) -> tuple[int, str]:
    """A total order of dims (ints first), for the operands of commutative expressions."""
    return (0, f"{d:024d}") if isinstance(d, int) else (1, repr(d.expr))


def _broadcast(op: str, a: Known, b: Known) -> Known | None:
    x, y = a.elements, b.elements
    if len(x) == 1 and len(y) > 1:
        x = x * len(y)
    elif len(y) == 1 and len(x) > 1:
        y = y * len(x)
    if len(x) != len(y):
        return None
    return Known(tuple(_arith(op, p, q) for p, q in zip(x, y)), a.scalar and b.scalar, a.dtype)


def _normalize(index: int, size: int) -> int | None:
    index = index + size if index < 0 else index
    return index if 0 <= index < size else None


def _slice(elements: tuple[Dim, ...], start: int, end: int, step: int) -> tuple[Dim, ...] | None:
    """``elements[start:end:step]`` as onnxruntime's Slice clamps it (``onnxfold.ir.slicing``)."""
    if step == 0:
        return None
    return elements[onnx_slice(start, end, step, len(elements))]


Arrays = Callable[[ir.Value], np.ndarray | None]
_STEP_OPS = frozenset({"Shape", "Identity", "Cast", "Gather", "Slice", "Concat", "Unsqueeze",
                       "Squeeze", "Add", "Sub", "Mul", "Div", "Reshape", "Equal", "Where",
                       "Size", "ConstantOfShape"})  # the ops _step follows


def _step(node: ir.Node, known: dict[ir.Value, Known], arrays: Arrays,
          ambiguous: frozenset[str]) -> Known | None:
    """The value of ``node``'s first output, if it is a shape tensor this module follows."""
    op = node.op_type
    if op not in _STEP_OPS:
        return None  # most nodes, at once
    ins = list(node.inputs)

    def value(i: int) -> ir.Value | None:
        return ins[i] if i < len(ins) else None

    def get(i: int) -> Known | None:
        v = value(i)
        return None if v is None else known.get(v)

    def array(i: int) -> np.ndarray | None:
        v = value(i)
        return None if v is None else arrays(v)

    def ints(i: int) -> list[int] | None:
        return _ints(array(i))

    if op == "Shape":
        x = ins[0]
        if x is None or x.shape is None:
            return None
        rank = len(x.shape)
        start = node.attributes.get_int("start", 0)
        end = node.attributes.get_int("end", rank)
        dims = [dim_symbol(x, i, ambiguous) for i in range(rank)]
        return Known(_slice(tuple(d for d in dims if d is not None), start, end, 1) or ())
    if op in ("Identity", "Cast"):
        source = get(0)
        if source is None:
            return None
        if op == "Cast":
            to = ir.DataType(node.attributes.get_int("to", 0))
            if to not in (ir.DataType.INT64, ir.DataType.INT32):
                return None
            return Known(source.elements, source.scalar, np.dtype(to.numpy()))
        return source
    if op == "Gather":
        data, indices = get(0), array(1)
        picks = _ints(indices)
        if data is None or data.scalar or indices is None or picks is None or \
                node.attributes.get_int("axis", 0) != 0:
            return None
        chosen = [_normalize(i, len(data.elements)) for i in picks]
        if any(c is None for c in chosen):
            return None
        return Known(tuple(data.elements[c] for c in chosen if c is not None),
                     indices.ndim == 0, data.dtype)
    if op == "Slice":
        data = get(0)
        starts, ends = ints(1), ints(2)
        axes = ints(3) if value(3) is not None else [0]
        steps = ints(4) if value(4) is not None else [1]
        if data is None or data.scalar or None in (starts, ends, axes, steps) or \
                axes not in ([0], [-1]) or len(starts or ()) != 1:
            return None
        assert starts is not None and ends is not None and steps is not None
        part = _slice(data.elements, starts[0], ends[0], steps[0])
        return None if part is None else Known(part, False, data.dtype)
    if op == "Concat":
        parts = [get(i) for i in range(len(ins))]
        if not parts or any(p is None or p.scalar for p in parts):
            return None
        return Known(tuple(e for p in parts if p is not None for e in p.elements), False,
                     parts[0].dtype if parts[0] is not None else np.dtype(np.int64))
    if op == "Unsqueeze":
        source = get(0)
        axes = ints(1) if value(1) is not None else \
            list(node.attributes.get_ints("axes", []) or [])
        return Known(source.elements, False, source.dtype) \
            if source is not None and source.scalar and len(axes or ()) == 1 else None
    if op == "Squeeze":
        source = get(0)
        return Known(source.elements, True, source.dtype) \
            if source is not None and len(source.elements) == 1 and not source.scalar else None
    if op in ("Add", "Sub", "Mul", "Div"):
        a, b = get(0), get(1)
        return _broadcast(op, a, b) if a is not None and b is not None else None
    if op == "Reshape":  # a scalar or 1-D shape value reshaped to [n] or [-1] keeps its elements
        source, target = get(0), ints(1)
        if source is None or target is None or len(target) != 1 or \
                target[0] not in (-1, len(source.elements)):
            return None
        return Known(source.elements, False, source.dtype)
    if op == "Equal":
        a, b = get(0), get(1)
        if a is None or b is None:
            return None
        pairs = _broadcast("Sub", a, b)
        if pairs is None:
            return None
        return Known(tuple(1 if d == 0 else 0 if isinstance(d, int) or _positive(d)
                           else Sym(("Equal", d, 0)) for d in pairs.elements),
                     pairs.scalar, np.dtype(np.bool_))
    if op == "Where":  # torch's expand(-1): Where(Equal(shape, -1), 1s, shape)
        flags, a, b = array(0), get(1), get(2)
        derived = get(0)  # an Equal of shape values: known before it is folded
        if flags is None and derived is not None and derived.is_constant and \
                derived.dtype == np.bool_:
            flags = derived.array()
        if flags is None or flags.dtype != np.bool_ or flags.ndim > 1 or a is None or \
                b is None or a.dtype != b.dtype:
            return None
        cond = tuple(bool(f) for f in flags.reshape(-1).tolist())
        size = max(len(cond), len(a.elements), len(b.elements))
        if any(len(k) not in (1, size) for k in (cond, a.elements, b.elements)):
            return None
        take = cond * size if len(cond) == 1 else cond
        then, other = [k.elements * size if len(k.elements) == 1 else k.elements
                       for k in (a, b)]
        return Known(tuple(then[i] if take[i] else other[i] for i in range(size)),
                     flags.ndim == 0 and a.scalar and b.scalar, a.dtype)
    if op == "ConstantOfShape":  # torch's expand(-1): Mul(ConstantOfShape(Shape(s)), -1)
        shape, attr = get(0), node.attributes.get("value")
        fill = tensor_of(attr).numpy() if attr is not None else np.zeros(1, np.float32)
        if shape is None or not shape.is_constant or len(shape.elements) != 1 or \
                fill.dtype.kind not in "iu" or fill.size != 1:
            return None
        count = int(shape.elements[0])  # type: ignore[arg-type]  # is_constant: ints
        if not 0 <= count <= MAX_ELEMENTS:
            return None
        return Known((int(fill.reshape(-1)[0]),) * count, False, fill.dtype)
    if op == "Size":
        x = ins[0]
        if x is None or x.shape is None:
            return None
        product: Dim = 1
        for i in range(len(x.shape)):
            d = dim_symbol(x, i, ambiguous)
            if d is None:
                return None
            product = _arith("Mul", product, d)
        return Known((product,), True)
    return None


# Dims of every value, from its node's shape semantics. Shape inference may name a dim it could
# not relate to the inputs ``unk__2`` (an Add of [N, 128, 768] and a [unk__0, unk__1, 768] that
# a fold has since made [1, 128, 768] keeps ``unk__2``: re-inference does not rename it). What
# each op does to shapes proves it is ``N``; only provable steps are taken.

_SAME_SHAPE = frozenset({
    "Identity", "Cast", "CastLike", "Neg", "Abs", "Sqrt", "Exp", "Log", "Erf", "Tanh",
    "Sigmoid", "Relu", "Softmax", "LogSoftmax", "IsNaN", "IsInf", "Not", "Reciprocal", "Floor",
    "Ceil", "Round", "Sign", "Sin", "Cos", "Gelu", "HardSigmoid", "HardSwish", "LeakyRelu",
    "Elu", "Selu", "Celu", "Softplus", "Softsign", "Mish", "ThresholdedRelu", "Clip", "PRelu",
    "Dropout", "LayerNormalization", "BatchNormalization", "InstanceNormalization",
    "LpNormalization", "Trilu", "Hardmax", "BitwiseNot"})  # output 0 has input 0's shape
_BROADCAST = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal", "Greater", "Less",
    "GreaterOrEqual", "LessOrEqual", "Where", "Max", "Min", "Sum", "Mean", "BitShift",
    "BitwiseAnd", "BitwiseOr", "BitwiseXor"})  # multidirectional broadcasting of all inputs

Dims = tuple[Dim | None, ...]


def _broadcast_dim(column: list[Dim | None]) -> Dim | None:
    """One axis of a broadcast: every input's dim there is 1 or the result."""
    sizes = {d for d in column if isinstance(d, int) and d != 1}
    if len(sizes) == 1:
        return sizes.pop()  # a dynamic dim beside it is 1 or the same size
    if sizes or None in column:
        return None
    syms: set[Sym] = set()
    for d in column:
        if isinstance(d, Sym):
            syms.update(d.expr[1:] if d.expr[0] == "Broadcast" else (d,))
    if not syms:
        return 1
    if len(syms) == 1:
        return syms.pop()  # N with 1s or N: N
    return Sym(("Broadcast", *sorted(syms, key=str)))  # N with M: whichever is not 1


def _broadcast_dims(shapes: list[Dims]) -> Dims:
    rank = max(len(s) for s in shapes)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    return tuple(_broadcast_dim([s[i] for s in padded]) for i in range(rank))


def _nonnegative(d: Dim) -> bool:
    """Whether ``d`` is >= 0 for every value of the dims (a dim, a sum or product of them)."""
    if isinstance(d, int):
        return d >= 0
    if d.expr[0] in ("dim", "axis", "Broadcast"):
        return True
    if d.expr[0] == "Reshape0":
        return all(_nonnegative(p) for p in d.expr[1:])
    return d.expr[0] in ("Add", "Mul", "Div") and all(_nonnegative(p) for p in d.expr[1:])


def _positive(d: Sym) -> bool:
    """Whether ``d`` is > 0 for every value of the dims: a dim plus a positive int."""
    kind = d.expr[0]
    a, b = (d.expr[1], d.expr[2]) if len(d.expr) == 3 else (None, None)
    return kind == "Add" and (isinstance(b, int) and b > 0 and a is not None and
                              _nonnegative(a) or isinstance(a, int) and a > 0 and
                              b is not None and _nonnegative(b)) or \
        kind == "Sub" and isinstance(b, int) and b < 0 and a is not None and _nonnegative(a)


def _has_factor(d: Dim | None, factor: Sym) -> bool:
    """Whether ``d`` is ``factor`` or a product with it (then it is 0 when ``factor`` is)."""
    if d == factor:
        return True
    return isinstance(d, Sym) and d.expr[0] == "Mul" and any(
        _has_factor(p, factor) for p in d.expr[1:])


def _monomial(d: Dim | None) -> tuple[int, list[Sym]] | None:
    """``d`` as an int times a product of dims, if it is one."""
    if isinstance(d, int):
        return d, []
    if d is None:
        return None
    if d.expr[0] != "Mul":
        return 1, [d]
    parts = [_monomial(p) for p in d.expr[1:]]
    if any(p is None for p in parts):
        return None
    coefficient, factors = 1, []
    for part in parts:
        assert part is not None
        coefficient *= part[0]
        factors += part[1]
    return coefficient, factors


def _quotient(total: Dim, divisor: Dim) -> Dim | None:
    """``total / divisor`` when the divisor's dims are among the total's and its int divides."""
    a, b = _monomial(total), _monomial(divisor)
    if a is None or b is None or b[0] <= 0 or a[0] % b[0]:
        return None
    rest = list(a[1])
    for factor in b[1]:
        if factor not in rest:
            return None
        rest.remove(factor)
    out: Dim = a[0] // b[0]
    for factor in sorted(rest, key=str):
        out = _arith("Mul", out, factor)
    return out


def _reshaped(source: Dims, target: Known, allowzero: bool) -> Dims:
    out: list[Dim | None] = []
    for i, e in enumerate(target.elements):
        copied = source[i] if i < len(source) else None
        if isinstance(e, int):
            out.append(e if e > 0 or (e == 0 and allowzero) else copied if e == 0 else None)
        elif _nonnegative(e) and (allowzero or _has_factor(copied, e)):
            out.append(e)  # were e 0 at run time, the copied dim is 0 too
        elif _nonnegative(e) and copied is not None:
            out.append(Sym(("Reshape0", e, copied)))  # e, or the copied dim where e is 0
        else:
            out.append(None)
    inferred = [i for i, e in enumerate(target.elements) if e == -1]
    if len(inferred) == 1 and None not in source and \
            sum(1 for d in out if d is None) == 1:  # the -1: what the other dims leave
        total: Dim = 1
        for d in source:
            assert d is not None
            total = _arith("Mul", total, d)
        others: Dim = 1
        for d in out:
            if d is not None:
                others = _arith("Mul", others, d)
        quotient = _quotient(total, others)
        out[inferred[0]] = Sym(("Div", total, others)) if quotient is None else quotient
    return tuple(out)


_REDUCE = frozenset({
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin"})


def _reduced(node: ir.Node, first: Dims, ints: Callable[[int], list[int] | None]
             ) -> Dims | None:
    """The dims a reduction leaves: its axes 1 (``keepdims``) or gone, the others kept (the
    axes an attribute, or input 1 from opset 13/18 on; none given: every axis, unless
    ``noop_with_empty_axes``)."""
    if node.op_type in ("ArgMax", "ArgMin"):
        given: list[int] | None = [node.attributes.get_int("axis", 0)]
    elif len(node.inputs) > 1 and node.inputs[1] is not None:
        given = ints(1)
    else:
        given = list(node.attributes.get_ints("axes", []) or [])
    if given is None:
        return None
    if not given:
        if node.attributes.get_int("noop_with_empty_axes", 0):
            return first
        given = list(range(len(first)))
    axes = [_normalize(a, len(first)) for a in given]
    if None in axes:
        return None
    keep = node.attributes.get_int("keepdims", 1)
    return tuple(1 if i in axes else d for i, d in enumerate(first) if keep or i not in axes)


def _axes(node: ir.Node, ints: Callable[[int], list[int] | None], rank: int) -> list[int] | None:
    axes = ints(1) if len(node.inputs) > 1 and node.inputs[1] is not None else \
        list(node.attributes.get_ints("axes", []) or []) or None
    if axes is None:
        return None
    found = [_normalize(a, rank) for a in axes]
    return None if None in found else [a for a in found if a is not None]


def _split_dims(node: ir.Node, dims: Callable[[ir.Value | None], Dims | None],
                known: dict[ir.Value, Known]) -> list[Dims | None]:
    """The dims of each output of a Split whose sizes are given."""
    ins = list(node.inputs)
    first = dims(ins[0]) if ins else None
    sizes = known.get(ins[1]) if len(ins) > 1 and ins[1] is not None else None
    if "split" in node.attributes:
        sizes = Known(tuple(node.attributes.get_ints("split", []) or ()))
    if first is None or sizes is None or sizes.scalar or \
            len(sizes.elements) != len(node.outputs):
        return []
    axis = _normalize(node.attributes.get_int("axis", 0), len(first))
    if axis is None:
        return []
    return [first[:axis] + (size,) + first[axis + 1:] for size in sizes.elements]


BIG = 2**31 - 1  # a Slice end at least this takes the rest of any axis


def _sliced(first: Dims, starts: Known, ends: Known, axes: list[int] | None,
            steps: list[int] | None) -> Dims | None:
    count = len(starts.elements)
    axes = list(range(count)) if axes is None else axes
    steps = [1] * count if steps is None else steps
    if len(ends.elements) != count or len(axes) != count or len(steps) != count:
        return None
    out: list[Dim | None] = list(first)
    for start, end, axis, step in zip(starts.elements, ends.elements, axes, steps):
        a = _normalize(axis, len(first))
        if a is None:
            return None
        d = first[a]
        if isinstance(d, int) and isinstance(start, int) and isinstance(end, int) and step:
            out[a] = len(range(d)[onnx_slice(start, end, step, d)])
        elif start == 0 and step == 1 and (isinstance(end, int) and end >= BIG or end == d):
            out[a] = d
        else:
            out[a] = None
    return tuple(out)


def _output_dims(node: ir.Node, dims: Callable[[ir.Value | None], Dims | None],
                 known: dict[ir.Value, Known], arrays: Arrays) -> Dims | None:
    """The dims of ``node``'s first output from its inputs' (None: not derived here)."""
    op = node.op_type
    ins = list(node.inputs)
    first = dims(ins[0]) if ins else None

    def scalar(i: int) -> Dim | None:
        v = ins[i] if i < len(ins) else None
        k = known.get(v) if v is not None else None
        return k.elements[0] if k is not None and len(k.elements) == 1 else None

    def ints(i: int) -> list[int] | None:
        v = ins[i] if i < len(ins) else None
        return None if v is None else _ints(arrays(v))

    if op == "ConstantOfShape" and ins and ins[0] is not None and ins[0] in known:
        return known[ins[0]].elements
    if op == "Range":
        start, limit, delta = scalar(0), scalar(1), scalar(2)
        if isinstance(start, int) and isinstance(limit, int) and isinstance(delta, int) \
                and delta != 0:
            return (max(0, -((start - limit) // delta)),)
        if start == 0 and delta == 1 and limit is not None and _nonnegative(limit):
            return (limit,)
        return None
    if op in _SAME_SHAPE:
        return first
    if op in _BROADCAST:
        shapes = [dims(v) for v in ins if v is not None]
        return None if not shapes or any(s is None for s in shapes) else \
            _broadcast_dims([s for s in shapes if s is not None])
    if first is None:
        return None
    if op == "Slice":
        starts = known.get(ins[1]) if len(ins) > 2 and ins[1] is not None else None
        ends = known.get(ins[2]) if len(ins) > 2 and ins[2] is not None else None
        axes = ints(3) if len(ins) > 3 and ins[3] is not None else []
        steps = ints(4) if len(ins) > 4 and ins[4] is not None else []
        if starts is None or ends is None or axes is None or steps is None:
            return None
        return _sliced(first, starts, ends, axes or None, steps or None)
    if op in _REDUCE:
        return _reduced(node, first, ints)
    if op == "Transpose":
        perm = list(node.attributes.get_ints("perm", []) or range(len(first))[::-1])
        return tuple(first[p] for p in perm) if sorted(perm) == list(range(len(first))) \
            else None
    if op == "Unsqueeze":
        given = ints(1) if len(ins) > 1 and ins[1] is not None else \
            list(node.attributes.get_ints("axes", []) or [])
        axes = _axes(node, ints, len(first) + len(given or ()))
        if axes is None or len(set(axes)) != len(axes):
            return None
        rest = iter(first)
        return tuple(1 if i in axes else next(rest) for i in range(len(first) + len(axes)))
    if op == "Squeeze":
        axes = _axes(node, ints, len(first))
        return None if axes is None else tuple(d for i, d in enumerate(first) if i not in axes)
    if op == "Reshape":
        target = known.get(ins[1]) if len(ins) > 1 and ins[1] is not None else None
        return None if target is None or target.scalar else \
            _reshaped(first, target, bool(node.attributes.get_int("allowzero", 0)))
    if op == "Tile":
        repeats = known.get(ins[1]) if len(ins) > 1 and ins[1] is not None else None
        if repeats is None or repeats.scalar or len(repeats.elements) != len(first):
            return None
        return tuple(None if d is None else _arith("Mul", d, r)
                     for d, r in zip(first, repeats.elements))
    if op == "Expand":
        target = known.get(ins[1]) if len(ins) > 1 and ins[1] is not None else None
        return None if target is None or target.scalar else \
            _broadcast_dims([first, target.elements])
    if op == "MatMul":
        other = dims(ins[1]) if len(ins) > 1 else None
        if other is None or len(first) < 2 or len(other) < 2:
            return None
        return _broadcast_dims([first[:-2], other[:-2]]) + (first[-2], other[-1])
    if op == "Gather":
        indices = dims(ins[1]) if len(ins) > 1 else None
        axis = _normalize(node.attributes.get_int("axis", 0), len(first))
        return None if indices is None or axis is None else \
            first[:axis] + indices + first[axis + 1:]
    if op == "Flatten":
        axis = node.attributes.get_int("axis", 1)
        axis = axis + len(first) if axis < 0 else axis
        if not 0 <= axis <= len(first) or None in first:
            return None
        head: Dim = 1
        tail: Dim = 1
        for i, d in enumerate(first):
            assert d is not None
            if i < axis:
                head = _arith("Mul", head, d)
            else:
                tail = _arith("Mul", tail, d)
        return head, tail
    if op == "Concat":
        shapes = [dims(v) for v in ins if v is not None]
        axis = _normalize(node.attributes.get_int("axis", 0), len(first))
        if axis is None or any(s is None or len(s) != len(first) for s in shapes):
            return None
        out: list[Dim | None] = []
        for i in range(len(first)):
            column = [s[i] for s in shapes if s is not None]
            if i == axis:
                total: Dim | None = 0
                for d in column:
                    total = None if total is None or d is None else _arith("Add", total, d)
                out.append(total)
            else:  # the inputs agree there: any known one is the dim
                out.append(next((d for d in column if isinstance(d, int)),
                                next((d for d in column if d is not None), None)))
        return tuple(out)
    return None


class _KnownBy(dict):
    """Known elements asked of a function (``RewriteContext.shape_value``), as the
    ``known`` mapping of :func:`_output_dims` reads them."""

    def __init__(self, of: Callable[[ir.Value], Known | None]) -> None:
        super().__init__()
        self.of = of

    def get(self, value: ir.Value, default: Known | None = None  # type: ignore[override]
            ) -> Known | None:
        found = self.of(value) if isinstance(value, ir.Value) else None
        return found if found is not None else default

    def __contains__(self, value: object) -> bool:
        return isinstance(value, ir.Value) and self.of(value) is not None

    def __missing__(self, value: ir.Value) -> Known:
        found = self.of(value)
        if found is None:
            raise KeyError(value)
        return found


def derived_dims(node: ir.Node, values: Callable[[ir.Value], Known | None], arrays: Arrays,
                 ambiguous: frozenset[str] = frozenset()) -> Dims | None:
    """The dims of ``node``'s first output that its op's shape semantics give from its inputs'
    dims (:func:`dim_symbol`) and shape values (``values``); None where not derived."""
    return _output_dims(node, lambda v: _value_dims(v, ambiguous), _KnownBy(values), arrays)


def input_dims(value: ir.Value, ambiguous: frozenset[str] = frozenset()) -> Dims | None:
    """``value``'s dims as :func:`dim_symbol` gives them (a constant's: ints)."""
    return _value_dims(value, ambiguous)


def _value_dims(value: ir.Value | None, ambiguous: frozenset[str]) -> Dims | None:
    if value is None:
        return None
    tensor = value.const_value
    producer = value.producer()
    if tensor is None and producer is not None and producer.op_type == "Constant" and \
            "value" in producer.attributes:
        tensor = tensor_of(producer.attributes["value"])
    if tensor is not None:
        return tuple(int(d) for d in tensor.shape.numpy())
    if value.shape is None:
        return None
    return tuple(dim_symbol(value, i, ambiguous) for i in range(len(value.shape)))


def _of_inputs(d: Dim | None, inputs: frozenset[int], inputs_dims: frozenset[str]) -> bool:
    """Whether ``d`` is an int or made of the graph inputs' dims only."""
    return isinstance(d, int) or isinstance(d, Sym) and all(
        a.expr[0] == "dim" and a.expr[1] in inputs_dims or
        a.expr[0] == "axis" and a.expr[1] in inputs for a in d.atoms())


def _all_static(values: Sequence[ir.Value | None]) -> bool:
    """Whether no value has a dynamic dim (a value without a shape has none to refine)."""
    for value in values:
        shape = value.shape if value is not None else None
        if shape is not None and not all(isinstance(d, int) for d in shape.dims):
            return False
    return True


def _refine(node: ir.Node, known: dict[ir.Value, Known], arrays: Arrays,
            ambiguous: frozenset[str], inputs: frozenset[int], inputs_dims: frozenset[str],
            placeholders: dict[str, Dim]) -> None:
    """Record in ``REFINED_KEY`` the dims of ``node``'s outputs that shape inference left as a
    name of its own, an ambiguous name or none, and the node's semantics prove an int or an
    expression of the graph inputs' dims."""
    def dims(v: ir.Value | None) -> Dims | None:
        return _value_dims(v, ambiguous)

    if _all_static(node.outputs):  # every dim an int: nothing to refine (most nodes, at once)
        for out in node.outputs:
            if out is not None and out.shape is not None:
                meta = out.meta
                if REFINED_KEY in meta:
                    del meta[REFINED_KEY]
        return
    if node.op_type == "Split":
        derived_all = _split_dims(node, dims, known)
    else:
        derived_all = [_output_dims(node, dims, known, arrays)]
    for k, out in enumerate(node.outputs):
        if out is None or out.shape is None:
            continue
        rank = len(out.shape)
        derived = derived_all[k] if k < len(derived_all) else None
        if derived is not None and len(derived) != rank:
            derived = None
        refined: list[Dim | None] = []
        for axis in range(rank):
            declared = _declared(out, axis, ambiguous)
            if _of_inputs(declared, inputs, inputs_dims):
                refined.append(None)
                continue
            name = declared.expr[1] if isinstance(declared, Sym) and declared.expr[0] == "dim" \
                else None
            found = derived[axis] if derived is not None else None
            if name is not None and name in placeholders:
                found = placeholders[name]  # the same name is the same dim: one symbol for it
            elif not _of_inputs(found, inputs, inputs_dims):
                found = None
            elif name is not None and found is not None:
                placeholders[name] = found
            refined.append(found)
        if any(d is not None for d in refined):
            out.meta[REFINED_KEY] = tuple(refined)
        elif REFINED_KEY in out.meta:
            del out.meta[REFINED_KEY]


_SHAPE_DTYPES = frozenset({ir.DataType.INT64, ir.DataType.INT32})


def _may_be_shape(value: ir.Value) -> bool:
    """Whether ``value`` can be a small integer tensor, from its declared type and shape (no
    data read): an integer of at most one dim and ``MAX_ELEMENTS`` elements."""
    tensor = value.const_value
    dtype = tensor.dtype if tensor is not None else value.dtype
    shape = tensor.shape if tensor is not None else value.shape
    if dtype is not None and dtype not in _SHAPE_DTYPES:
        return False
    if shape is None:
        return dtype is not None  # a Constant node's output may have no declared shape
    return len(shape) <= 1 and all(isinstance(d, int) and d <= MAX_ELEMENTS for d in shape)


def known_constant(value: ir.Value, arrays: Arrays) -> Known | None:
    """The elements of ``value`` when it is a small integer constant (no graph walk)."""
    if not _may_be_shape(value):
        return None  # not a constant's data worth reading (the cheap test, first)
    arr = arrays(value)
    ints = _ints(arr)
    if ints is None or arr is None:
        return None
    return Known(tuple(ints), arr.ndim == 0, arr.dtype)


class _Known(dict):
    """Known elements by value; a constant's are read the first time they are asked for
    (most constants of a graph are weights no shape computation reads)."""

    def __init__(self, arrays: Arrays) -> None:
        super().__init__()
        self.arrays = arrays
        self.not_constant: set[ir.Value] = set()

    def get(self, value: ir.Value, default: Known | None = None  # type: ignore[override]
            ) -> Known | None:
        found = super().get(value)
        if found is None and value not in self.not_constant:
            found = known_constant(value, self.arrays)
            if found is None:
                self.not_constant.add(value)
            else:
                self[value] = found
        return found if found is not None else default

    def __contains__(self, value: object) -> bool:
        return isinstance(value, ir.Value) and self.get(value) is not None

    def __missing__(self, value: ir.Value) -> Known:
        found = self.get(value)
        if found is None:
            raise KeyError(value)
        return found


def shape_values(graph: ir.Graph, arrays: Arrays, ambiguous: frozenset[str] = frozenset()
                 ) -> dict[ir.Value, Known]:
    """The known elements of every small integer tensor of ``graph`` that builds a shape.

    ``arrays(value)`` gives the data of constants (initializers, Constant outputs);
    ``ambiguous``: :func:`shared_dim_names`."""
    known = _Known(arrays)
    inputs_dims = frozenset(
        name for value in graph.inputs for dim in value.shape or ()
        if isinstance(name := getattr(dim, "value", None), str) and name
        and name not in ambiguous)
    inputs = frozenset(id(value) for value in graph.inputs)
    placeholders: dict[str, Dim] = {}
    for node in graph:
        if node.domain not in DEFAULT_DOMAINS:
            continue
        _refine(node, known, arrays, ambiguous, inputs, inputs_dims, placeholders)
        if len(node.outputs) != 1:
            continue
        found = _step(node, known, arrays, ambiguous)
        if found is not None and len(found.elements) <= MAX_ELEMENTS and _fits(found):
            known[node.outputs[0]] = found
    return known


def describe_dim(atom: Sym, model: ir.Model) -> str:
    """``N`` of input ``x``: a dim named with the graph inputs that declare it."""
    if atom.expr[0] == "axis":
        value = next((v for v in model.graph.inputs if id(v) == atom.expr[1]), None)
        shape = value.shape if value is not None else None
        dim = shape[atom.expr[3]] if shape is not None and atom.expr[3] < len(shape) else None
        name = getattr(dim, "value", None)
        if value is not None and isinstance(name, str) and name:
            return f"`{name}` of input {value.name} (axis {atom.expr[3]})"
    if atom.expr[0] != "dim":
        return f"`{atom}`"
    owners = [v.name or "" for v in model.graph.inputs if v.shape is not None and any(
        getattr(d, "value", None) == atom.expr[1] for d in v.shape)]
    return f"`{atom}` of input {', '.join(owners)}" if owners else f"`{atom}`"


def blocked_scaffolding(model: ir.Model, arrays: Arrays) -> list[tuple[ir.Node, list[str]]]:
    """Nodes that compute shape values still dynamic, with the dims that block each."""
    found = []
    ambiguous = shared_dim_names(model)
    for graph in all_graphs(model):
        values = shape_values(graph, arrays, ambiguous)
        for node in graph:
            known = values.get(node.outputs[0]) if len(node.outputs) == 1 else None
            if known is not None and not known.is_constant and node.op_type != "Constant":
                found.append((node, [describe_dim(a, model) for a in known.blocking()]))
    return found
