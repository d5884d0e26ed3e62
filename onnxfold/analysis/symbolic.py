"""Symbolic shape values: what the shape scaffolding of a graph computes, element by element.

onnx's shape inference gives every value a shape whose dims are ints or names; it does not
expose what the *values* of shape tensors are (``Shape(x)``, ``Gather`` of it, ``Concat`` of
that with constants...), which is what folding the scaffolding of a model with dynamic axes
needs. :func:`shape_values` follows those small integer tensors through the ops that build
shapes, element by element: each element is an int, or a :class:`Sym` (a dynamic dim, or an
expression of them). A value whose elements are all ints is a constant for every value of the
dynamic dims; one that keeps a ``Sym`` names the dim that blocks it.

What each op does is declared per op in ``rules/shape_steps.py`` (``@shape_value``,
``@shape_dims``) and reaches this module as a :class:`ShapeSteps` value (the catalogue's
``shape_steps``); this module keeps the dim algebra and the walk over the graph.

Two dims are the same symbol when they are the same axis of the same value, or carry the same
name from shape inference (a graph input's ``dim_param``, or the name inference gave a dim it
proved equal to it) - unless the inputs use that name more than once: onnxruntime does not
check that such dims agree, so they prove nothing, except under the user's
``--assume-named-dims-equal`` (:func:`shared_dim_names`' ``assume_equal``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, cast

import numpy as np
import onnx_ir as ir

from onnxfold.ir.graph import DEFAULT_DOMAINS, all_graphs, tensor_of
from onnxfold.ir.slicing import onnx_slice

MAX_ELEMENTS = 64  # shape tensors are short; longer integer tensors are data, not shapes
REFINED_KEY = "onnxfold.symbolic.dims"  # Value.meta: dims proved better than the declared ones
# Nodes an expression's tree may have (a part it holds twice counts twice: what printing,
# hashing and comparing it cost). Each layer of some exports builds its dims from the last
# layer's, twice over (chython's rxnmap: 75,000 nodes by layer 16, 10 s of a 1,000-node
# model); the exports seen need at most ~100.
MAX_EXPRESSION_SIZE = 1024
TEXT_KEPT_SIZE = 64  # an expression up to this size keeps its text (~20 bytes a node) once made
_opaque_serials = itertools.count()


@dataclass(frozen=True)
class Sym:
    """A dynamic dim or an expression of them: ``("dim", name)``, ``("axis", id, name, i)``,
    ``(op, a, b)``, ``("Broadcast", a, b, ...)`` (what broadcasting dims that may each be 1
    gives: the one that is not 1), ``("Reshape0", e, d)`` (a Reshape target element ``e``,
    which copies the input's dim ``d`` where it is 0) or ``("Opaque", serial, *atoms)`` (an
    expression too large to keep, of those dims: equal to itself alone).

    Expressions are made by :func:`expression`, which keeps them within
    :data:`MAX_EXPRESSION_SIZE`."""

    expr: tuple
    size: ClassVar[int] = 1  # nodes of the expression's tree (set by :func:`expression`)

    # The hash, the text, the order key and the atoms are kept once made (in the instance's
    # __dict__, outside the compared fields): an expression's parts are shared by the
    # expressions built on it, and hashing one, ordering operands or asking what an
    # expression is made of would otherwise walk its whole tree again each time

    def __hash__(self) -> int:
        found = self.__dict__.get("_hash")
        if found is None:
            found = hash((self.expr,))  # what the dataclass's own hash is
            object.__setattr__(self, "_hash", found)
        return found

    def __str__(self) -> str:
        text = self.__dict__.get("_text")
        if text is None:
            text = self._text_of()
            if self.size <= TEXT_KEPT_SIZE:  # (a larger one's text is its parts' texts joined)
                object.__setattr__(self, "_text", text)
        return text

    def _text_of(self) -> str:
        kind = self.expr[0]
        if kind == "dim":
            return str(self.expr[1])
        if kind == "axis":
            return f"{self.expr[2]}[{self.expr[3]}]"
        if kind == "Opaque":
            return f"expression#{self.expr[1]}({', '.join(str(a) for a in self.expr[2:])})"
        if kind == "Reshape0":
            return f"({self.expr[1]} or, if 0, {self.expr[2]})"
        if kind == "Broadcast":
            return f"broadcast({', '.join(str(a) for a in self.expr[1:])})"
        return f"({self.expr[1]} {kind} {self.expr[2]})"

    @property
    def order_key(self) -> tuple:
        """A key of a total order of expressions, for sorting operands into one canonical
        form: atoms first, by their text (``N``, ``x[0]``: what a report lists them by), then
        expressions by kind, size and their parts' keys (ints before expressions). Made once,
        of the parts' own keys (never a copy of them): a text or ``repr`` of a large
        expression (an input dim's name in it hundreds of times) would be rebuilt whole at
        every comparison."""
        found = self.__dict__.get("_order_key")
        if found is None:
            kind = self.expr[0]
            found = (0, str(self), self.expr) if kind in ("dim", "axis") else (
                1, kind, self.size, *((0, p) if isinstance(p, int) else (1, p.order_key)
                                      for p in self.expr[1:]))
            object.__setattr__(self, "_order_key", found)
        return found

    def atoms(self) -> tuple[Sym, ...]:
        """The dims this expression is made of, each once, in the order they first appear."""
        found = self.__dict__.get("_atoms")
        if found is None:
            found = (self,) if self.expr[0] in ("dim", "axis") else tuple(dict.fromkeys(
                a for part in self.expr[1:] if isinstance(part, Sym) for a in part.atoms()))
            object.__setattr__(self, "_atoms", found)
        return found


Dim = int | Sym


def expression(kind: str, *parts: Dim) -> Sym:
    """The expression ``(kind, *parts)``, or, were its tree to exceed
    :data:`MAX_EXPRESSION_SIZE` nodes, an opaque symbol of the dims it is made of: a dim
    nothing else equals, so that no step proves anything of it (each one is new)."""
    size = 1 + sum(p.size for p in parts if isinstance(p, Sym))
    if size > MAX_EXPRESSION_SIZE:
        atoms = dict.fromkeys(a for p in parts if isinstance(p, Sym) for a in p.atoms())
        made = Sym(("Opaque", next(_opaque_serials), *atoms))
        size = 1 + len(atoms)
    else:
        made = Sym((kind, *parts))
    object.__setattr__(made, "size", size)  # (frozen: set once, as it is made)
    return made


_INT64 = np.dtype(np.int64)  # a shape's element type, the default of Known.dtype (immutable)


@dataclass(frozen=True)
class Known:
    """The value of a small integer tensor: its elements, and whether it is a 0-D scalar."""

    elements: tuple[Dim, ...]
    scalar: bool = False
    dtype: np.dtype = _INT64

    @property
    def is_constant(self) -> bool:
        """Whether every element is static (the value folds to a constant)."""
        return all(isinstance(e, int) for e in self.elements)

    def array(self) -> np.ndarray:
        """The elements as an array of the value's dtype and rank (static elements only)."""
        arr = np.asarray(self.elements, self.dtype)
        return arr.reshape(()) if self.scalar else arr

    def blocking(self) -> list[Sym]:
        """The dynamic dims that keep this value from being a constant."""
        found: dict[Sym, None] = {}
        for e in self.elements:
            if isinstance(e, Sym):
                found.update(dict.fromkeys(e.atoms()))
        return list(found)


def shared_dim_names(model: ir.Model, assume_equal: bool = False) -> frozenset[str]:
    """Dim names the model's inputs use more than once. onnxruntime does not check that dims
    of one name agree, so such a name proves nothing: its dims are told apart by axis. None
    when the user assumes them equal (``assume_equal``, ``--assume-named-dims-equal``): one
    name, one symbol."""
    if assume_equal:
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
    return _axis_dim(value, shape[axis], axis, _refined(value, len(shape)), ambiguous)


def dim_symbols(value: ir.Value, ambiguous: frozenset[str] = frozenset()
                ) -> tuple[Dim, ...] | None:
    """Every axis of ``value``'s shape as :func:`dim_symbol` gives it (the shape and the
    refinement read once, not once an axis); None if its rank is unknown."""
    shape = value.shape
    if shape is None:
        return None
    dims = shape.dims
    refined = _refined(value, len(dims))
    return tuple(_axis_dim(value, d, axis, refined, ambiguous) for axis, d in enumerate(dims))


def _axis_dim(value: ir.Value, dim: int | ir.SymbolicDim, axis: int,
              refined: tuple[Dim | None, ...] | None, ambiguous: frozenset[str]) -> Dim:
    """:func:`dim_symbol` of axis ``axis``, from its declared ``dim`` and ``value``'s
    :func:`_refined` dims (read once by a caller asking for every axis)."""
    if isinstance(dim, int) and dim >= 0:  # (Paddle writes -1 for "any size": no size)
        return dim
    found = refined[axis] if refined is not None else None
    return found if found is not None else _declared_dim(value, dim, axis, ambiguous)


def _refined(value: ir.Value, rank: int) -> tuple[Dim | None, ...] | None:
    """``value``'s refined dims (``REFINED_KEY``) if recorded for its rank ``rank``.

    Read from the store's plain dict: the ``MetadataStore`` (a ``UserDict``) answers a missing
    key through a raised ``KeyError``, and this is asked for every dim of every value."""
    refined = value.meta.data.get(REFINED_KEY)
    return refined if refined is not None and len(refined) == rank else None


def _declared_dim(value: ir.Value, dim: int | ir.SymbolicDim, axis: int,
                  ambiguous: frozenset[str]) -> Sym:
    """``dim``, the dynamic axis ``axis`` of ``value``'s declared shape (a name, none, or a
    negative int), as a symbol."""
    name = None if isinstance(dim, int) else dim.value
    if isinstance(name, str) and name and name not in ambiguous:
        return Sym(("dim", name))
    return Sym(("axis", id(value), value.name or "?", axis))


def small_ints(arr: np.ndarray | None) -> list[int] | None:
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


def arith(op: str, a: Dim, b: Dim) -> Dim:
    """``a op b`` for ``op`` Add, Sub, Mul or Div (integer, truncating as onnxruntime's): an int
    when both are ints, else an expression simplified where an identity allows (``x - x``,
    ``x * 1``), with commutative operands in one order so that equal expressions compare
    equal."""
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
        return expression("Div", a, b)
    if op == "Sub" and a == b:
        return 0
    if op == "Div" and a == b:
        return 1
    if (op in ("Mul", "Div") and b == 1) or (op in ("Add", "Sub") and b == 0):
        return a
    if op in ("Mul", "Add") and ((a == 1 and op == "Mul") or (a == 0 and op == "Add")):
        return b
    if op in ("Mul", "Add") and _order(b) < _order(a):
        a, b = b, a  # commutative: one form for a + b and b + a, so that they compare equal
    return expression(op, a, b)


def _order(d: Dim) -> tuple:
    """A total order of dims (ints first), for the operands of commutative expressions."""
    return (0, d) if isinstance(d, int) else (1, d.order_key)


def broadcast_elements(op: str, a: Known, b: Known) -> Known | None:
    """``a op b`` element by element (:func:`arith`), a one-element side broadcast to the other;
    None when the lengths do not broadcast."""
    x, y = a.elements, b.elements
    if len(x) == 1 and len(y) > 1:
        x = x * len(y)
    elif len(y) == 1 and len(x) > 1:
        y = y * len(x)
    if len(x) != len(y):
        return None
    return Known(tuple(arith(op, p, q) for p, q in zip(x, y)), a.scalar and b.scalar, a.dtype)


def normalize_index(index: int, size: int) -> int | None:
    """``index`` into ``size`` elements counted from 0 (a negative one from the end); None when
    out of range."""
    index = index + size if index < 0 else index
    return index if 0 <= index < size else None


def slice_elements(elements: tuple[Dim, ...], start: int, end: int, step: int
                   ) -> tuple[Dim, ...] | None:
    """``elements[start:end:step]`` as onnxruntime's Slice clamps it (``onnxfold.ir.slicing``)."""
    if step == 0:
        return None
    return elements[onnx_slice(start, end, step, len(elements))]


Arrays = Callable[[ir.Value], np.ndarray | None]
# which shapeless values a walk gives a shape (``shape_values``' ``complete``); None: none
Completing = Callable[[ir.Value], bool] | None


@dataclass(frozen=True)
class StepInputs:
    """What a shape-value step (``@shape_value`` in ``rules/``) reads of its node: the node,
    the shape values known so far, constants' data and the ambiguous dim names."""

    node: ir.Node
    known: dict[ir.Value, Known]
    arrays: Arrays
    ambiguous: frozenset[str]

    def value(self, i: int) -> ir.Value | None:
        """Input ``i`` (None when omitted or absent)."""
        inputs = self.node.inputs
        return inputs[i] if i < len(inputs) else None

    def get(self, i: int) -> Known | None:
        """The shape value of input ``i``, if known."""
        v = self.value(i)
        return None if v is None else self.known.get(v)

    def array(self, i: int) -> np.ndarray | None:
        """The constant data of input ``i``, if it is a constant."""
        v = self.value(i)
        return None if v is None else self.arrays(v)

    def ints(self, i: int) -> list[int] | None:
        """Input ``i``'s elements when it is a small constant integer tensor."""
        return small_ints(self.array(i))


def _step(node: ir.Node, known: dict[ir.Value, Known], arrays: Arrays,
          ambiguous: frozenset[str], steps: ShapeSteps) -> Known | None:
    """The value of ``node``'s first output, if it is a shape tensor an op's step follows."""
    step = steps.values.get(node.op_type)
    return None if step is None else step(StepInputs(node, known, arrays, ambiguous))


# Dims of every value, from its node's shape semantics. Shape inference may name a dim it could
# not relate to the inputs ``unk__2`` (an Add of [N, 128, 768] and a [unk__0, unk__1, 768] that
# a fold has since made [1, 128, 768] keeps ``unk__2``: re-inference does not rename it). What
# each op does to shapes proves it is ``N``; only provable steps are taken.

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
    # N with M: whichever is not 1
    return expression("Broadcast", *sorted(syms, key=_order))


def broadcast_dims(shapes: list[Dims]) -> Dims:
    """The dims of the multidirectional broadcast of ``shapes`` (right-aligned; a dynamic dim
    against 1 is itself, two different ones whichever is not 1)."""
    rank = max(len(s) for s in shapes)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    return tuple(_broadcast_dim([s[i] for s in padded]) for i in range(rank))


def nonnegative(d: Dim) -> bool:
    """Whether ``d`` is >= 0 for every value of the dims (a dim, a sum or product of them)."""
    if isinstance(d, int):
        return d >= 0
    if d.expr[0] in ("dim", "axis", "Broadcast"):
        return True
    if d.expr[0] == "Reshape0":
        return all(nonnegative(p) for p in d.expr[1:])
    return d.expr[0] in ("Add", "Mul", "Div") and all(nonnegative(p) for p in d.expr[1:])


def positive(d: Sym) -> bool:
    """Whether ``d`` is > 0 for every value of the dims: a dim plus a positive int."""
    kind = d.expr[0]
    a, b = (d.expr[1], d.expr[2]) if len(d.expr) == 3 else (None, None)
    return (kind == "Add" and ((isinstance(b, int) and b > 0 and a is not None and
                              nonnegative(a)) or (isinstance(a, int) and a > 0 and
                              b is not None and nonnegative(b)))) or \
        (kind == "Sub" and isinstance(b, int) and b < 0 and a is not None and nonnegative(a))


def has_factor(d: Dim | None, factor: Sym) -> bool:
    """Whether ``d`` is ``factor`` or a product with it (then it is 0 when ``factor`` is)."""
    if d == factor:
        return True
    return isinstance(d, Sym) and d.expr[0] == "Mul" and any(
        has_factor(p, factor) for p in d.expr[1:])


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


def quotient(total: Dim, divisor: Dim) -> Dim | None:
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
    for factor in sorted(rest, key=_order):
        out = arith("Mul", out, factor)
    return out


class DimsInputs:
    """What an output-dims step (``@shape_dims`` in ``rules/``) reads of its node: its inputs'
    dims (``dims``), shape values (``known``) and constants' data (``arrays``)."""

    def __init__(self, node: ir.Node, dims: Callable[[ir.Value | None], Dims | None],
                 known: dict[ir.Value, Known], arrays: Arrays) -> None:
        self.node = node
        self.dims = dims
        self.known = known
        self.arrays = arrays
        inputs = node.inputs
        self.first: Dims | None = dims(inputs[0]) if inputs else None  # input 0's dims

    def value(self, i: int) -> ir.Value | None:
        """Input ``i`` (None when omitted or absent)."""
        inputs = self.node.inputs
        return inputs[i] if i < len(inputs) else None

    def known_at(self, i: int) -> Known | None:
        """The shape value of input ``i``, if known."""
        v = self.value(i)
        return None if v is None else self.known.get(v)

    def scalar(self, i: int) -> Dim | None:
        """The one element of input ``i``'s shape value, if it has exactly one."""
        k = self.known_at(i)
        return k.elements[0] if k is not None and len(k.elements) == 1 else None

    def ints(self, i: int) -> list[int] | None:
        """Input ``i``'s elements when it is a small constant integer tensor."""
        v = self.value(i)
        return None if v is None else small_ints(self.arrays(v))


ValueStep = Callable[[StepInputs], Known | None]
DimsStep = Callable[[DimsInputs], Dims | None]
EveryOutputDimsStep = Callable[[DimsInputs], list[Dims | None]]


@dataclass(frozen=True)
class ShapeSteps:
    """The per-op steps this module follows, by op type (the catalogue's ``shape_steps``):
    shape values (``values``), first-output dims (``dims``), every output's dims
    (``every_output_dims``, Split)."""

    values: Mapping[str, ValueStep]
    dims: Mapping[str, DimsStep]
    every_output_dims: Mapping[str, EveryOutputDimsStep]


def _output_dims(node: ir.Node, dims: Callable[[ir.Value | None], Dims | None],
                 known: dict[ir.Value, Known], arrays: Arrays, steps: ShapeSteps
                 ) -> Dims | None:
    """The dims of ``node``'s first output from its inputs' (None: not derived here)."""
    step = steps.dims.get(node.op_type)
    return None if step is None else step(DimsInputs(node, dims, known, arrays))


class _KnownBy(dict):
    """Known elements asked of a function (``GraphView.shape_value``), as the
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
                 ambiguous: frozenset[str] = frozenset(), *, steps: ShapeSteps
                 ) -> Dims | None:
    """The dims of ``node``'s first output that its op's shape semantics (``steps``) give from
    its inputs' dims (:func:`dim_symbol`) and shape values (``values``); None where not
    derived."""
    return _output_dims(node, lambda v: _value_dims(v, ambiguous), _KnownBy(values), arrays,
                        steps)


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
    return dim_symbols(value, ambiguous)


def _of_inputs(d: Dim | None, inputs: frozenset[int], inputs_dims: frozenset[str]) -> bool:
    """Whether ``d`` is an int or made of the graph inputs' dims only."""
    if isinstance(d, int):
        return True
    if not isinstance(d, Sym):
        return False
    expr = d.expr
    if expr[0] == "dim":  # an atom itself (most dims): no list of atoms made
        return expr[1] in inputs_dims
    if expr[0] == "axis":
        return expr[1] in inputs
    return all((a.expr[0] == "dim" and a.expr[1] in inputs_dims) or
               (a.expr[0] == "axis" and a.expr[1] in inputs) for a in d.atoms())


def _all_static(values: Sequence[ir.Value | None], complete: Completing) -> bool:
    """Whether no value has a dynamic dim: nothing to refine. A value without a shape has
    none, unless ``complete`` takes it (the walk gives it one where its op's step derives its
    dims)."""
    for value in values:
        if value is None:
            continue
        shape = value.shape
        if shape is None:
            if complete is not None and complete(value) and \
                    isinstance(value.type, ir.TensorType):
                return False
        elif not all(isinstance(d, int) for d in shape.dims):
            return False
    return True


def _completed(out: ir.Value, derived: Dims | None) -> bool:
    """Give ``out``, a tensor value shape inference left without a shape, the rank and dims
    its op's step derived (``derived``); whether it got one. A static dim is that int, a
    named dim (``("dim", name)``) that name, as inference would have named it; any other is
    left unnamed, and :func:`_refined_dims` records it where it is an expression of the
    graph inputs' dims (a symbol of another value's axis would not outlive the walk).

    onnx infers no rank for ``Reshape(x, Concat(Shape(y)))`` before Reshape-14 (an opset-13
    export's attention mask), and every value downstream of it is then shapeless: no
    broadcast, and no neutral ``+ 0`` after it, could be proved."""
    if derived is None or not isinstance(out.type, ir.TensorType):
        return False
    out.shape = ir.Shape([_completed_dim(d) for d in derived])
    return True


def _completed_dim(d: Dim | None) -> int | str | None:
    """A derived dim as :func:`_completed` writes it in a shape."""
    if isinstance(d, int):
        return d if d >= 0 else None
    return d.expr[1] if d is not None and d.expr[0] == "dim" else None


def _refine(node: ir.Node, known: dict[ir.Value, Known], arrays: Arrays,
            ambiguous: frozenset[str], inputs: frozenset[int], inputs_dims: frozenset[str],
            placeholders: dict[str, Dim], steps: ShapeSteps, complete: Completing = None
            ) -> None:
    """Record in ``REFINED_KEY`` the dims of ``node``'s outputs that shape inference left as a
    name of its own, an ambiguous name or none, and the node's semantics prove an int or an
    expression of the graph inputs' dims; ``complete``: the outputs inference left without a
    shape to give the one their op's step derives (:func:`_completed`)."""
    def dims(v: ir.Value | None) -> Dims | None:
        return _value_dims(v, ambiguous)

    if _all_static(node.outputs, complete):  # nothing to refine (most nodes, at once)
        for out in node.outputs:
            if out is not None and out.shape is not None:
                meta = out.meta
                if REFINED_KEY in meta:
                    del meta[REFINED_KEY]
        return
    every_output = steps.every_output_dims.get(node.op_type)
    if every_output is not None:
        derived_all = every_output(DimsInputs(node, dims, known, arrays))
    else:
        derived_all = [_output_dims(node, dims, known, arrays, steps)]
    for k, out in enumerate(node.outputs):
        if out is None:
            continue
        derived = derived_all[k] if k < len(derived_all) else None
        if out.shape is None and not (
                complete is not None and complete(out) and _completed(out, derived)):
            continue
        assert out.shape is not None  # (given by _completed)
        rank = len(out.shape)
        if derived is not None and len(derived) != rank:
            derived = None
        refined = _refined_dims(out.shape.dims, derived, ambiguous, inputs, inputs_dims,
                                placeholders)
        if any(d is not None for d in refined):
            out.meta[REFINED_KEY] = tuple(refined)
        elif REFINED_KEY in out.meta:
            del out.meta[REFINED_KEY]


def _refined_dims(declared: Sequence[int | ir.SymbolicDim], derived: Dims | None,
                  ambiguous: frozenset[str], inputs: frozenset[int],
                  inputs_dims: frozenset[str], placeholders: dict[str, Dim]
                  ) -> list[Dim | None]:
    """The refinement of an output's dims, axis by axis: the derived dim (``derived``) where
    it is made of the graph inputs' dims and the declared one (``declared``, as
    :func:`_declared_dim` reads it) is not; a name seen before keeps the symbol it got then.

    The declared dim is never made a symbol: an int or a graph input's name is of the inputs
    (nothing to refine); any other name is a dim of its own, as is a dim without a usable name
    (a symbol of this output's own axis, never a graph input's)."""
    refined: list[Dim | None] = []
    for axis, dim in enumerate(declared):
        if isinstance(dim, int):
            refined.append(None)
            continue
        name = dim.value
        named = isinstance(name, str) and bool(name) and name not in ambiguous
        if named:
            if name in inputs_dims:
                refined.append(None)
                continue
            if name in placeholders:  # the same name is the same dim: one symbol for it
                refined.append(placeholders[name])
                continue
        found = derived[axis] if derived is not None else None
        if not _of_inputs(found, inputs, inputs_dims):
            refined.append(None)
            continue
        if named and found is not None:
            placeholders[cast(str, name)] = found
        refined.append(found)
    return refined


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
    ints = small_ints(arr)
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
        self.placeholders: dict[str, Dim] | None = None  # the walk's (``updated_shape_values``)

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


def shape_values(graph: ir.Graph, arrays: Arrays, ambiguous: frozenset[str] = frozenset(),
                 *, steps: ShapeSteps, complete: Completing = None
                 ) -> dict[ir.Value, Known]:
    """The known elements of every small integer tensor of ``graph`` that builds a shape.

    ``arrays(value)`` gives the data of constants (initializers, Constant outputs);
    ``ambiguous``: :func:`shared_dim_names`; ``steps``: what each op does (the catalogue's
    ``shape_steps``); ``complete``: which values shape inference left without a shape to give
    the rank and dims their op's step derives (set on the value: what every rule, the fold
    and the next inference read; None: none), walking in graph order so that they carry
    downstream."""
    known = _Known(arrays)
    walk = _Walk(graph, known, arrays, ambiguous, steps, complete)
    for node in graph:
        if node.domain in DEFAULT_DOMAINS:
            walk.visit(node)
    known.placeholders = walk.placeholders
    return known


def updated_shape_values(graph: ir.Graph, previous: dict[ir.Value, Known],
                         changed_nodes: set[ir.Node], arrays: Arrays,
                         ambiguous: frozenset[str] = frozenset(), *, steps: ShapeSteps,
                         complete: Completing = None
                         ) -> tuple[dict[ir.Value, Known], set[ir.Value]]:
    """:func:`shape_values` of ``graph`` after edits at ``changed_nodes`` (added, rewired or
    reading rerouted values), from what it was before (``previous``, for the same arrays,
    ``ambiguous``, steps and ``complete``), and the values whose shape value or refined dims
    changed, or that were given a shape.

    Only the changed nodes, and the readers of values that changed in turn, are computed
    again; the others keep their results. When a node computed again names a dim that others
    may share a symbol with (``_refined_dim``'s placeholders), everything is computed again."""
    old_placeholders = getattr(previous, "placeholders", None)
    if old_placeholders is None:
        return _recomputed(graph, previous, arrays, ambiguous, steps, complete)
    known = _Known(arrays)
    walk = _Walk(graph, known, arrays, ambiguous, steps, complete)
    changed: set[ir.Value] = set()
    for node in graph:
        if node.domain not in DEFAULT_DOMAINS:
            continue
        if node not in changed_nodes and not any(v in changed for v in node.inputs):
            walk.keep(node, previous)
            continue
        if _names_placeholder(node, ambiguous, walk.inputs_dims, old_placeholders):
            return _recomputed(graph, previous, arrays, ambiguous, steps, complete, changed)
        before = [(v, v.meta.data.get(REFINED_KEY), dict.get(previous, v), v.shape is None)
                  for v in node.outputs]
        walk.visit(node)
        changed.update(v for v, refined, value, shapeless in before
                       if v.meta.data.get(REFINED_KEY) != refined or dict.get(known, v) != value
                       or (shapeless and v.shape is not None))
    if walk.placeholders != old_placeholders:
        return _recomputed(graph, previous, arrays, ambiguous, steps, complete, changed)
    known.placeholders = walk.placeholders
    return known, changed


def _recomputed(graph: ir.Graph, previous: dict[ir.Value, Known], arrays: Arrays,
                ambiguous: frozenset[str], steps: ShapeSteps, complete: Completing,
                changed_before: set[ir.Value] | None = None
                ) -> tuple[dict[ir.Value, Known], set[ir.Value]]:
    """:func:`shape_values` computed whole, and the values whose result changed (with
    ``changed_before``, those a partial walk changed before it gave up: a shape it gave is
    not given again)."""
    refined = {v: (v.meta.data.get(REFINED_KEY), v.shape is None)
               for node in graph for v in node.outputs}
    known = shape_values(graph, arrays, ambiguous, steps=steps, complete=complete)
    changed = {v for v, (dims, shapeless) in refined.items()
               if v.meta.data.get(REFINED_KEY) != dims or (shapeless and v.shape is not None)}
    changed.update(v for v in dict.keys(known) | dict.keys(previous)
                   if dict.get(known, v) != dict.get(previous, v))
    changed.update(changed_before or ())
    return known, changed


def _names_placeholder(node: ir.Node, ambiguous: frozenset[str], inputs_dims: frozenset[str],
                       placeholders: dict[str, Dim]) -> bool:
    """Whether an output of ``node`` declares a dim whose name has a placeholder symbol."""
    for out in node.outputs:
        for dim in out.shape or ():
            name = getattr(dim, "value", None)
            if isinstance(name, str) and name in placeholders and name not in inputs_dims \
                    and name not in ambiguous:
                return True
    return False


class _Walk:
    """One walk of a graph in order for :func:`shape_values`: each node's refined dims and the
    shape value of its output."""

    def __init__(self, graph: ir.Graph, known: _Known, arrays: Arrays,
                 ambiguous: frozenset[str], steps: ShapeSteps, complete: Completing) -> None:
        self.known, self.arrays, self.ambiguous, self.steps = known, arrays, ambiguous, steps
        self.complete = complete  # the shapeless values to give a shape (shape_values)
        self.inputs_dims = frozenset(
            name for value in graph.inputs for dim in value.shape or ()
            if isinstance(name := getattr(dim, "value", None), str) and name
            and name not in ambiguous)
        self.inputs = frozenset(id(value) for value in graph.inputs)
        self.placeholders: dict[str, Dim] = {}

    def visit(self, node: ir.Node) -> None:
        known = self.known
        _refine(node, known, self.arrays, self.ambiguous, self.inputs, self.inputs_dims,
                self.placeholders, self.steps, self.complete)
        if len(node.outputs) != 1:
            return
        found = _step(node, known, self.arrays, self.ambiguous, self.steps)
        if found is not None and len(found.elements) <= MAX_ELEMENTS and _fits(found):
            known[node.outputs[0]] = found

    def keep(self, node: ir.Node, previous: dict[ir.Value, Known]) -> None:
        """What ``node`` gave before: its output's shape value, and the placeholder symbols
        its refined dims recorded (the first node naming a dim records it)."""
        for out in node.outputs:
            value = dict.get(previous, out)
            if value is not None:
                self.known[out] = value
            refined = out.meta.data.get(REFINED_KEY)
            if refined is None or out.shape is None or len(refined) != len(out.shape):
                continue
            for dim, found in zip(out.shape, refined):
                name = getattr(dim, "value", None)
                if found is not None and isinstance(name, str) and name and \
                        name not in self.placeholders and name not in self.inputs_dims \
                        and name not in self.ambiguous:
                    self.placeholders[name] = found


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


def blocked_scaffolding(model: ir.Model, arrays: Arrays, steps: ShapeSteps,
                        named_dims_equal: bool = False) -> list[tuple[ir.Node, list[str]]]:
    """Nodes that compute shape values still dynamic, with the dims that block each
    (``named_dims_equal``: see :func:`shared_dim_names`)."""
    found = []
    ambiguous = shared_dim_names(model, named_dims_equal)
    for graph in all_graphs(model):
        values = shape_values(graph, arrays, ambiguous, steps=steps)
        for node in graph:
            known = values.get(node.outputs[0]) if len(node.outputs) == 1 else None
            if known is not None and not known.is_constant and node.op_type != "Constant":
                found.append((node, [describe_dim(a, model) for a in known.blocking()]))
    return found
