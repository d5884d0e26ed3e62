"""The dim algebra of symbolic shape values: dims as ints or expressions, and what rules and
the walk compute of them.

A dim is an int or a :class:`Sym`: a dynamic dim (a name, or an axis of a value) or an
expression of them, kept within :data:`MAX_EXPRESSION_SIZE` nodes (:func:`expression`). A
:class:`Known` is the value of a small integer tensor that builds a shape, element by element.
The arithmetic (:func:`arith`, :func:`broadcast_elements`, :func:`quotient`...) simplifies
where an identity allows and puts commutative operands in one order, so that equal expressions
compare equal. Nothing here reads a graph: :mod:`onnxfold.analysis.step_inputs` reads a
value's dims, :mod:`onnxfold.analysis.symbolic` walks a graph.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from onnxfold.ir.slicing import onnx_slice

MAX_ELEMENTS = 64  # shape tensors are short; longer integer tensors are data, not shapes
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
    which copies the input's dim ``d`` where it is 0), ``("Min", e, k)`` (a slice ``[0:e]`` of
    an axis ``k`` long) or ``("Opaque", serial, *atoms)`` (an
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


def small_ints(arr: np.ndarray | None) -> list[int] | None:
    """The elements of a 0-D or 1-D integer array (shape tensors are never of higher rank)."""
    if arr is None or arr.dtype.kind not in "iu" or arr.size > MAX_ELEMENTS or arr.ndim > 1:
        return None
    return [int(v) for v in arr.reshape(-1).tolist()]


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
    if op in ("Mul", "Add") and dim_order(b) < dim_order(a):
        a, b = b, a  # commutative: one form for a + b and b + a, so that they compare equal
    return expression(op, a, b)


def dim_order(d: Dim) -> tuple:
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
    # min(a, k) against a: a, whenever the broadcast runs (equal to a, or k = 1, or it fails)
    syms -= {d for d in syms if d.expr[0] == "Min" and d.expr[1] in syms}
    if not syms:
        return 1
    if len(syms) == 1:
        return syms.pop()  # N with 1s or N: N
    # N with M: whichever is not 1
    return expression("Broadcast", *sorted(syms, key=dim_order))


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
    if d.expr[0] in ("Reshape0", "Min"):
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
    for factor in sorted(rest, key=dim_order):
        out = arith("Mul", out, factor)
    return out


# a dim as dynamo writes it ("s70 + 2*s88 - 1"): a linear form of named dims
_TERM = re.compile(r"^\s*(?:(\d+)\s*\*\s*)?([A-Za-z_][\w.]*|\d+)\s*$")
Linear = dict[str, int]  # dim name -> coefficient; "" holds the constant


def parse_expression(text: str) -> Linear | None:
    """``"s0 + 2*s1 - 1"`` as a linear form, or None when ``text`` is not one."""
    form: Linear = {}
    for sign, term in re.findall(r"([+-]?)\s*([^+-]+)", text.replace(" ", "")):
        match = _TERM.match(term)
        if not match:
            return None
        coeff = int(match.group(1) or 1) * (-1 if sign == "-" else 1)
        atom = match.group(2)
        key, coeff = ("", coeff * int(atom)) if atom.isdigit() else (atom, coeff)
        form[key] = form.get(key, 0) + coeff
    return form or None


def expression_of(text: object, names: Collection[str]) -> bool:
    """Whether ``text`` is a dim's name or a linear form (dynamo's ``s70 + s88``) of
    ``names`` only (not a name ONNX's inference made up, ``unk__3``, where that is none of
    them)."""
    form = parse_expression(text) if isinstance(text, str) and text else None
    return form is not None and set(form) - {""} <= set(names)


def expression_value(text: str, sizes: Mapping[str, int]) -> int | None:
    """``text``, a dim's name or a linear form of names, at ``sizes`` (by name); None where
    it is not one or names a dim ``sizes`` does not give."""
    form = parse_expression(text) if text else None
    if form is None or not set(form) - {""} <= sizes.keys():
        return None
    return sum(c * (sizes[k] if k else 1) for k, c in form.items())
