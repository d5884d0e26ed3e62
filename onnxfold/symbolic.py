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
check that such dims agree, so they prove nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxfold.analysis import all_graphs, is_default_op

MAX_ELEMENTS = 64  # shape tensors are short; longer integer tensors are data, not shapes


@dataclass(frozen=True)
class Sym:
    """A dynamic dim or an expression of them: ``("dim", name)``, ``("axis", id, name, i)`` or
    ``(op, a, b)``."""

    expr: tuple

    def __str__(self) -> str:
        kind = self.expr[0]
        if kind == "dim":
            return str(self.expr[1])
        if kind == "axis":
            return f"{self.expr[2]}[{self.expr[3]}]"
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
    of one name agree, so such a name proves nothing: its dims are told apart by axis."""
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

    A named dim is the symbol of its name unless the name is ``ambiguous``; any other dynamic
    dim is a symbol of this very axis of this very value (by identity: names change)."""
    shape = value.shape
    if shape is None or axis >= len(shape):
        return None
    dim = shape[axis]
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
    return Sym((op, a, b))


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
    if step == 0:
        return None
    return elements[slice(start, end, step)]  # ONNX clamps like Python slicing


Arrays = Callable[[ir.Value], np.ndarray | None]


def _step(node: ir.Node, known: dict[ir.Value, Known], arrays: Arrays,
          ambiguous: frozenset[str]) -> Known | None:
    """The value of ``node``'s first output, if it is a shape tensor this module follows."""
    op = node.op_type
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
        return Known(tuple(1 if d == 0 else 0 if isinstance(d, int) else Sym(("Equal", d, 0))
                           for d in pairs.elements), pairs.scalar, np.dtype(np.bool_))
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


def shape_values(graph: ir.Graph, arrays: Arrays, ambiguous: frozenset[str] = frozenset()
                 ) -> dict[ir.Value, Known]:
    """The known elements of every small integer tensor of ``graph`` that builds a shape.

    ``arrays(value)`` gives the data of constants (initializers, Constant outputs);
    ``ambiguous``: :func:`shared_dim_names`."""
    known: dict[ir.Value, Known] = {}
    seen: set[ir.Value] = set()

    def seed(value: ir.Value | None) -> None:
        if value is None or value in seen:
            return
        seen.add(value)
        if not _may_be_shape(value):
            return  # not a constant's data worth reading (the cheap test, first)
        arr = arrays(value)
        ints = _ints(arr)
        if ints is not None and arr is not None:
            known[value] = Known(tuple(ints), arr.ndim == 0, arr.dtype)

    for node in graph:
        for value in node.inputs:
            seed(value)
        if not is_default_op(node) or len(node.outputs) != 1:
            continue
        found = _step(node, known, arrays, ambiguous)
        if found is not None and len(found.elements) <= MAX_ELEMENTS and _fits(found):
            known[node.outputs[0]] = found
    return known


def _where(atom: Sym, model: ir.Model) -> str:
    """``N`` of input ``x``: a dim named with the graph inputs that declare it."""
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
                found.append((node, [_where(a, model) for a in known.blocking()]))
    return found
