"""The check's own reading of a graph's symbolic dims, for choosing the inputs it samples.

The input planner (:mod:`onnxfold.check.inputs.dim_relations`) reads relations between the
inputs' dims off the graph: the length a Gather's indices give an axis of an input, two dims a
broadcast aligns. Those lengths are computed in the graph
(``Range(0, Shape(past)[2] + Shape(ids)[1])``), so it needs them written in the inputs' dims.
The fold has a walk of its own for that (``onnxfold.analysis.symbolic`` and the rules' shape
steps); the check does not call it: a blind spot there would choose the very inputs that hide
it. This walk is smaller. It follows the ops exporters build index and mask shapes from, the
small integer tensors that hold shapes element by element, and leaves every other dim to
onnx's shape inference (a name it gives is an atom; a name dynamo writes as an expression,
``s70 + s88``, is read as one). It plans inputs; it never decides a verdict.

A dim is a :data:`Poly`: a polynomial of dim names with integer coefficients, as a mapping
from a sorted tuple of names (a monomial; ``()`` the constant) to its coefficient.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np
import onnx_ir as ir

Monomial = tuple[str, ...]
Poly = dict[Monomial, int]  # monomial -> coefficient; () holds the constant
Linear = dict[str, int]  # dim name -> coefficient; "" holds the constant
Dims = list[Poly | None]  # a value's dims (None: unknown)
AxisNames = Mapping[tuple[str, int], str]  # (graph input, axis) -> the name its dim goes by

MAX_ELEMENTS = 64  # the largest integer tensor followed element by element (a shape's)
LARGE_END = 2**31 - 1  # a Slice end at or past this reads to the end of its axis
# bounds on one dim, past which the walk says "unknown": a graph that multiplies sums of dims
# again and again would otherwise grow its polynomials (and a number squared its digits)
# exponentially; no shape an exporter builds comes near them
MAX_TERMS = 32
MAX_DEGREE = 8
MAX_COEFFICIENT = 2**63


def const(n: int) -> Poly:
    """The constant ``n``."""
    return {(): n} if n else {}


def atom(name: str) -> Poly:
    """The dim called ``name``."""
    return {(name,): 1}


def bounded(p: Poly) -> Poly | None:
    """``p`` without its zero terms, or None past :data:`MAX_TERMS`, :data:`MAX_DEGREE` or
    :data:`MAX_COEFFICIENT`."""
    out = {k: v for k, v in p.items() if v}
    if len(out) > MAX_TERMS or any(len(k) > MAX_DEGREE or abs(v) >= MAX_COEFFICIENT
                                   for k, v in out.items()):
        return None
    return out


def add(a: Poly, b: Poly, sign: int = 1) -> Poly | None:
    """``a + sign * b`` (None past the bounds)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + sign * v
    return bounded(out)


def mul(a: Poly, b: Poly) -> Poly | None:
    """``a * b`` (None past the bounds, found before the product is made)."""
    if len(a) * len(b) > MAX_TERMS or \
            max(map(len, a), default=0) + max(map(len, b), default=0) > MAX_DEGREE:
        return None
    out: Poly = {}
    for ka, va in a.items():
        for kb, vb in b.items():
            k = tuple(sorted(ka + kb))
            out[k] = out.get(k, 0) + va * vb
    return bounded(out)


def as_int(p: Poly | None) -> int | None:
    """``p`` where it is a number (asked of every dim of every value: no set made)."""
    if p is None:
        return None
    if not p:
        return 0
    return p[()] if len(p) == 1 and () in p else None


def divided(a: Poly, b: Poly) -> Poly | None:
    """``a / b`` where ``b`` is one term dividing every term of ``a`` exactly; else None."""
    if len(b) != 1:
        return None
    (names, coeff), = b.items()
    out: Poly = {}
    for k, v in a.items():
        rest = list(k)
        for name in names:
            if name not in rest:
                return None
            rest.remove(name)
        if v % coeff:
            return None
        out[tuple(rest)] = v // coeff
    return out


def linear(p: Poly | None) -> Linear | None:
    """``p`` as a linear form of names, where it is one."""
    if p is None or any(len(k) > 1 for k in p):
        return None
    return {(k[0] if k else ""): v for k, v in p.items()} or {"": 0}


def factors(p: Poly | None) -> list[Poly]:
    """``p`` as a product in factors (a flattened ``[b, n]`` is ``b*n``): the names of a
    single term of coefficient 1 each, else ``p`` itself."""
    if p is None:
        return []
    if len(p) == 1:
        (names, coeff), = p.items()
        if coeff == 1 and len(names) > 1:
            return [atom(name) for name in names]
    return [p]


_TERM = re.compile(r"^(?:(\d{1,18})\*)?([A-Za-z_][\w.]*|\d{1,18})$")


def parse(text: str) -> Linear | None:
    """``"s0 + 2*s1 - 1"`` (a dim name dynamo writes as an expression) as a linear form, or
    None when ``text`` is not one (``Min(64, s53)``, ``s0//2``); a copy of the form read once
    per text (every layer declares the same few)."""
    form = _parsed(text)
    return None if form is None else dict(form)


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> Linear | None:
    form: Linear = {}
    squeezed = text.replace(" ", "")
    if not squeezed or squeezed[-1] in "+-":
        return None
    for sign, term in re.findall(r"([+-]?)([^+-]+)", squeezed):
        match = _TERM.match(term)
        if not match:
            return None
        coeff = int(match.group(1) or 1) * (-1 if sign == "-" else 1)
        name = match.group(2)
        key, coeff = ("", coeff * int(name)) if name.isdigit() else (name, coeff)
        form[key] = form.get(key, 0) + coeff
    return form or None


def named(text: str, names: Collection[str] | None = None) -> Poly:
    """The dim a name stands for: its expression where it is one (of ``names`` only, where
    given: ``a.b + c`` of names no input has stays a name of its own), else the name."""
    form = parse(text)
    if form is None or (names is not None and not set(form) - {""} <= set(names)):
        return atom(text)
    return {((k,) if k else ()): v for k, v in form.items() if v}


class GraphDims:
    """Every value's dims in the main graph of ``model`` as polynomials of dim names (what
    onnx's inference left on the values, refined by the walk), and the elements of its
    small integer tensors. ``axis_names`` names the inputs' anonymous dims."""

    def __init__(self, model: ir.Model, axis_names: AxisNames | None = None) -> None:
        axis_names = axis_names or {}
        # the inputs' dim names: an expression of them is read as one (dynamo's s70 + s88)
        self.names: set[str] = set(axis_names.values())
        for value in model.graph.inputs:
            self.names.update(label for d in value.shape or ()
                              if isinstance(label := getattr(d, "value", None), str))
        self._read: dict[str, Poly] = {}  # each dim's name as read (:func:`_named_once`)
        self.shapes: dict[ir.Value, Dims | None] = {}  # (None: not even the rank known)
        # (keyed by optional values: a missing input has no elements)
        self.values: dict[ir.Value | None, list[Poly | None]] = {}
        for value in model.graph.inputs:
            declared = _inferred(value, self.names, self._read)
            anonymous = {axis: atom(name) for (input_name, axis), name in axis_names.items()
                         if input_name == (value.name or "")}
            self.shapes[value] = None if declared is None else \
                [anonymous.get(i) if d is None else d for i, d in enumerate(declared)]
        for value in model.graph.initializers.values():
            try:
                self._constant(value, value.const_value)
            except Exception:  # a weight that cannot be read is a value of unknown elements
                continue
        for node in model.graph:
            try:
                self._step(node)
            except Exception:  # an op this walk misreads keeps inference's dims
                continue

    def dims(self, value: ir.Value | None) -> Dims | None:
        """``value``'s dims, or None where not even its rank is known."""
        if value is None:
            return None
        if value not in self.shapes:
            self.shapes[value] = _inferred(value, self.names, self._read)
        return self.shapes[value]

    def dim(self, value: ir.Value, axis: int) -> Poly | None:
        """``value``'s dim at ``axis``."""
        dims = self.dims(value)
        return dims[axis] if dims is not None and -len(dims) <= axis < len(dims) else None

    def _constant(self, value: ir.Value, tensor: ir.TensorProtocol | None) -> None:
        if tensor is None:
            return
        self.shapes[value] = [const(d) for d in tensor.shape.numpy()]
        if tensor.dtype.is_integer() and tensor.size <= MAX_ELEMENTS:
            self.values[value] = [const(int(e)) for e in tensor.numpy().reshape(-1)]

    def _given(self, node: ir.Node, index: int, attribute: str = ""
               ) -> tuple[bool, list[int] | None]:
        """Whether ``node``'s optional input ``index`` (or its ``attribute``, in older opsets)
        is given, and its numbers where known: a given input whose numbers are not known is
        no default."""
        if attribute and attribute in node.attributes:
            return True, list(node.attributes.get_ints(attribute) or [])
        if len(node.inputs) <= index or node.inputs[index] is None:
            return False, None
        return True, self._ints(node.inputs[index])

    def _ints(self, value: ir.Value | None) -> list[int] | None:
        """The elements of ``value`` where all are numbers."""
        elements = self.values.get(value) if value is not None else None
        if elements is None:
            return None
        ints = [as_int(e) for e in elements]
        return None if any(i is None for i in ints) else ints  # type: ignore[return-value]

    def _step(self, node: ir.Node) -> None:
        if node.domain not in ("", "ai.onnx"):
            return
        if node.op_type == "Constant":
            value = node.attributes.get("value")
            if value is not None:
                self._constant(node.outputs[0], value.as_tensor())
            elif "value_int" in node.attributes or "value_ints" in node.attributes:
                scalar = "value_int" in node.attributes
                ints = [node.attributes.get_int("value_int", 0)] if scalar else \
                    list(node.attributes.get_ints("value_ints") or [])
                self.shapes[node.outputs[0]] = [] if scalar else [const(len(ints))]
                self.values[node.outputs[0]] = [const(int(i)) for i in ints]
            return
        if node.op_type == "Split":
            self._split(node)
            return
        step = _STEPS.get(node.op_type)
        found: tuple[Dims | None, list[Poly | None] | None] = \
            step(self, node) if step is not None else (None, None)
        shape, elements = found
        out = node.outputs[0] if node.outputs else None
        if out is None:
            return
        self._settle(out, shape)
        if elements is not None and len(elements) <= MAX_ELEMENTS:
            self.values[out] = elements

    def _settle(self, out: ir.Value, own: Dims | None) -> None:
        """``out``'s dims: the walk's ``own`` merged with what inference says."""
        self.shapes[out] = _merged(own, _inferred(out, self.names, self._read))

    # -- steps: each gives an output's dims and, for small integer tensors, its elements

    def _same(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        """An op that keeps its input's shape and (a cast, an identity) its elements."""
        elements = self.values.get(node.inputs[0])
        passes = node.op_type == "Identity" or \
            (node.op_type in ("Cast", "CastLike") and _cast_keeps(node, elements))
        return self.dims(node.inputs[0]), elements if passes else None

    def _broadcast(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        shapes = [self.dims(v) for v in node.inputs]
        shape = _broadcast(shapes)
        elements = None
        combine = _ARITHMETIC.get(node.op_type)
        ranks = [len(s) if s is not None else None for s in shapes]
        if combine is not None and len(node.inputs) == 2 and \
                all(r is not None and r <= 1 for r in ranks):  # (a [2, 1] and a [2]: 4)
            a, b = (self.values.get(v) if v is not None else None for v in node.inputs)
            if a is not None and b is not None and (len(a) == len(b) or 1 in (len(a), len(b))):
                size = max(len(a), len(b))
                elements = [combine(a[i % len(a)], b[i % len(b)]) for i in range(size)]
        return shape, elements

    def _shape(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        dims = self.dims(node.inputs[0])
        if dims is None:
            return None, None
        rank = len(dims)
        start = _clamp(node.attributes.get_int("start", 0), rank)
        end = _clamp(node.attributes.get_int("end", rank), rank)
        picked = dims[start:end]
        return [const(len(picked))], picked

    def _gather(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        data, indices = self.dims(node.inputs[0]), self.dims(node.inputs[1])
        axis = node.attributes.get_int("axis", 0)
        elements = None
        if data is None or indices is None:
            return None, None
        axis %= max(len(data), 1)
        source, picked = self.values.get(node.inputs[0]), self._ints(node.inputs[1])
        if source is not None and picked is not None and len(data) == 1:
            elements = [source[i] for i in picked]
        return data[:axis] + indices + data[axis + 1:], elements

    def _gather_nd(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        data, indices = self.dims(node.inputs[0]), self.dims(node.inputs[1])
        if data is None or not indices or node.attributes.get_int("batch_dims", 0) != 0:
            return None, None
        depth = as_int(indices[-1])
        return (indices[:-1] + data[depth:] if depth is not None else None), None

    def _concat(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        known = [dims for dims in (self.dims(v) for v in node.inputs) if dims is not None]
        if not known or len(known) != len(node.inputs) or len({len(s) for s in known}) != 1:
            return None, None
        rank = len(known[0])
        axis = node.attributes.get_int("axis", 0) % max(rank, 1)
        dims: Dims = [next((s[i] for s in known if s[i] is not None), None) for i in range(rank)]
        along = [s[axis] for s in known]
        dims[axis] = None if any(d is None for d in along) else \
            _sum([d for d in along if d is not None])
        parts = [p for p in (self.values.get(v) for v in node.inputs) if p is not None]
        elements = None if rank != 1 or len(parts) != len(node.inputs) or \
            sum(map(len, parts)) > MAX_ELEMENTS else [e for p in parts for e in p]
        return dims, elements

    def _unsqueeze(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        dims = self.dims(node.inputs[0])
        _, axes = self._given(node, 1, "axes")
        if dims is None or axes is None:
            return None, self.values.get(node.inputs[0])
        rank = len(dims) + len(axes)
        out: Dims = list(dims)
        for axis in sorted(a % rank for a in axes):
            out.insert(axis, const(1))
        return out, self.values.get(node.inputs[0])

    def _squeeze(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        dims = self.dims(node.inputs[0])
        given, axes = self._given(node, 1, "axes")
        # without axes every dim of 1 goes, and a dim not known may be one: rank unknown
        if dims is None or (given and axes is None) or \
                (not given and any(as_int(d) is None for d in dims)):
            return None, self.values.get(node.inputs[0])
        rank = len(dims)
        dropped = {a % rank for a in axes} if axes is not None else \
            {i for i, d in enumerate(dims) if as_int(d) == 1}
        return [d for i, d in enumerate(dims) if i not in dropped], \
            self.values.get(node.inputs[0])

    def _flatten(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        dims = self.dims(node.inputs[0])
        if dims is None:
            return None, None
        axis = node.attributes.get_int("axis", 1)
        axis += len(dims) if axis < 0 else 0
        if not 0 <= axis <= len(dims):
            return None, None
        return [_product(dims[:axis]), _product(dims[axis:])], None

    def _reshape(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        dims, target = self.dims(node.inputs[0]), self.values.get(node.inputs[1])
        elements = self.values.get(node.inputs[0])
        if target is None:
            return None, elements
        out: Dims = list(target)
        zero_copies = node.attributes.get_int("allowzero", 0) == 0
        for i, d in enumerate(target):
            if as_int(d) == 0 and zero_copies:
                out[i] = dims[i] if dims is not None and i < len(dims) else None
        if any(as_int(d) == -1 for d in out):
            i = next(i for i, d in enumerate(out) if as_int(d) == -1)
            total = _product(dims) if dims is not None else None
            rest = _product([d for j, d in enumerate(out) if j != i])
            out[i] = divided(total, rest) if total is not None and rest is not None else None
        return out, elements

    def _expand(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        target = self.values.get(node.inputs[1])
        return (_broadcast([self.dims(node.inputs[0]), list(target)])
                if target is not None else None), None

    def _constant_of_shape(self, node: ir.Node
                           ) -> tuple[Dims | None, list[Poly | None] | None]:
        target = self.values.get(node.inputs[0])
        return (list(target) if target is not None else None), None

    def _range(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        start, limit, delta = (self.values.get(v, [None])[0] if v is not None else None
                               for v in node.inputs[:3])
        first, last, step = as_int(start), as_int(limit), as_int(delta)
        if first is not None and last is not None and step:
            return [const(len(range(first, last, step)))], None
        if start is None or limit is None or step != 1:
            return None, None
        return [add(limit, start, -1)], None

    def _transpose(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        dims = self.dims(node.inputs[0])
        if dims is None:
            return None, None
        perm = node.attributes.get_ints("perm") or list(range(len(dims)))[::-1]
        return [dims[p] for p in perm], None

    def _slice(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        dims = self.dims(node.inputs[0])
        starts, ends = (self.values.get(v) if v is not None else None
                        for v in node.inputs[1:3])
        has_axes, axes = self._given(node, 3)
        has_steps, steps = self._given(node, 4)
        if dims is None or starts is None or ends is None or (has_axes and axes is None) or \
                (has_steps and steps is None):
            return None, None
        axes = axes if axes is not None else list(range(len(starts)))
        steps = steps if steps is not None else [1] * len(starts)
        out: Dims = list(dims)
        source = self.values.get(node.inputs[0])
        elements = None
        for axis, start, end, step in zip(axes, starts, ends, steps):
            axis %= len(dims)
            out[axis] = _sliced(dims[axis], start, end, step)
            first, last = as_int(start), as_int(end)
            if source is not None and len(dims) == 1 and first is not None and \
                    last is not None:
                elements = source[first:last:step]
        return out, elements

    def _matmul(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        a, b = self.dims(node.inputs[0]), self.dims(node.inputs[1])
        if a is None or b is None or len(a) < 2 or len(b) < 2:
            return None, None
        batch = _broadcast([a[:-2], b[:-2]])
        return ([*batch, a[-2], b[-1]] if batch is not None else None), None

    def _size(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        dims = self.dims(node.inputs[0])
        return [], [_product(dims)] if dims is not None else None

    def _reduce(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        """A reduction (axes as an attribute or an input; ArgMax's one axis): the reduced
        axes kept as 1 or dropped."""
        dims = self.dims(node.inputs[0])
        if dims is None:
            return None, None
        if node.op_type in ("ArgMax", "ArgMin"):
            axes: list[int] | None = [node.attributes.get_int("axis", 0)]
        else:
            given, axes = self._given(node, 1, "axes")
            if given and axes is None:
                return None, None
        if not axes:
            if node.attributes.get_int("noop_with_empty_axes", 0) != 0:
                return list(dims), None
            axes = list(range(len(dims)))
        reduced = {a % len(dims) for a in axes}
        keep = node.attributes.get_int("keepdims", 1) != 0
        return [const(1) if i in reduced else d for i, d in enumerate(dims)
                if keep or i not in reduced], None

    def _split(self, node: ir.Node) -> None:
        """Each output of a Split: the input's dims, the split axis as long as its part
        (given, or an equal share of a numeric length)."""
        dims = self.dims(node.inputs[0])
        given, sizes = self._given(node, 1, "split")
        for i, out in enumerate(node.outputs):
            own: Dims | None = None
            if dims is not None:
                axis = node.attributes.get_int("axis", 0) % len(dims)
                length = as_int(dims[axis])
                part: Poly | None = None
                if given:  # the sizes, where known
                    part = const(sizes[i]) if sizes is not None and i < len(sizes) else None
                elif length is not None and length % len(node.outputs) == 0:
                    part = const(length // len(node.outputs))  # equal parts
                own = [part if j == axis else d for j, d in enumerate(dims)]
            self._settle(out, own)

    def _pad(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        dims = self.dims(node.inputs[0])
        _, pads = self._given(node, 1, "pads")
        if dims is None or not pads or len(pads) != 2 * len(dims) or \
                (len(node.inputs) > 3 and node.inputs[3] is not None):
            return None, None
        return [add(d, const(pads[i] + pads[i + len(dims)])) if d is not None else None
                for i, d in enumerate(dims)], None

    def _tile(self, node: ir.Node) -> tuple[Dims | None, list[Poly | None] | None]:
        dims, repeats = self.dims(node.inputs[0]), self.values.get(node.inputs[1])
        if dims is None or repeats is None or len(repeats) != len(dims):
            return None, None
        return [mul(d, r) if d is not None and r is not None else None
                for d, r in zip(dims, repeats)], None


Step = Callable[[GraphDims, ir.Node], tuple[Dims | None, list[Poly | None] | None]]


def _inferred(value: ir.Value, names: Collection[str], read: dict[str, Poly]) -> Dims | None:
    """What onnx's inference left on ``value``: numbers, and names as :func:`named` reads
    them with the inputs' dim ``names`` (a name it made up, ``unk__3``, is an atom no input
    has); ``read``: the names read so far (a layer's dims recur in every layer)."""
    shape = value.shape
    if shape is None:
        return None
    return [const(d) if isinstance(d, int) else
            _named_once(text, names, read) if isinstance(text := d.value, str) and
            text not in ("", "?") else None for d in shape.dims]


def _named_once(text: str, names: Collection[str], read: dict[str, Poly]) -> Poly:
    """:func:`named`, each text read once (no step changes a dim in place: it is shared)."""
    found = read.get(text)
    if found is None:
        found = read[text] = named(text, names)
    return found


def _merged(own: Dims | None, inferred: Dims | None) -> Dims | None:
    """The walk's dims where it has them, inference's numbers over them, its names where the
    walk has none."""
    if own is None or (inferred is not None and len(own) != len(inferred)):
        return inferred
    if inferred is None:
        return own
    return [i if _is_number(i) else o if o is not None else i for o, i in zip(own, inferred)]


def _broadcast(shapes: Sequence[Dims | None]) -> Dims | None:
    """The dims ``shapes`` broadcast to: per aligned axis the one that is not 1."""
    if not shapes or any(s is None for s in shapes):
        return None
    known: list[Dims] = shapes  # type: ignore[assignment]
    if all(s == known[0] for s in known):  # (most often: one shape, each axis its own)
        return list(known[0])
    rank = max(len(s) for s in known)
    out: Dims = []
    for i in range(-rank, 0):
        wide = [s[i] for s in known if len(s) >= -i and s[i] != _ONE]
        out.append(const(1) if not wide else
                   next((d for d in wide if _is_number(d)),
                        next((d for d in wide if d is not None), None)))
    return out


_ONE = const(1)


def _is_number(p: Poly | None) -> bool:
    """Whether ``p`` is a number (:func:`as_int` not None), asked of every dim a step
    merges."""
    return p is not None and (not p or (len(p) == 1 and () in p))


def _sliced(dim: Poly | None, start: Poly | None, end: Poly | None, step: int) -> Poly | None:
    """A Slice's length on one axis where the walk can say it: a numeric slice of a numeric
    dim, a start to the end (``dim - start``), a prefix up to a computed end (that end: the
    mask an exporter cuts to the sequence's length is as long as the sequence)."""
    first, last, length = as_int(start), as_int(end), as_int(dim)
    if step != 1 or start is None or end is None:
        return None
    if length is not None and first is not None and last is not None:
        return const(len(range(length)[first:last]))
    if dim is not None and first is not None and first >= 0 and last is not None and \
            last >= LARGE_END:
        return add(dim, const(first), -1)
    if first == 0 and last is None and (length is not None or end == dim):
        return end
    return None


def _clamp(index: int, rank: int) -> int:
    return max(0, min(rank, index + rank if index < 0 else index))


def _sum(dims: Sequence[Poly]) -> Poly | None:
    total: Poly | None = {}
    for d in dims:
        total = add(total, d) if total is not None else None
    return total


def _product(dims: Sequence[Poly | None]) -> Poly | None:
    total: Poly | None = const(1)
    for d in dims:
        if d is None or total is None:
            return None
        total = mul(total, d)
    return total


def _cast_keeps(node: ir.Node, elements: list[Poly | None] | None) -> bool:
    """Whether a Cast (or CastLike) hands ``elements`` on as they are: to int64, or to an
    integer type that holds each (a narrower one wraps: onnxruntime's int32 of 2**63 - 1 is
    -1). The walk follows integers only (a float's Div is no integer's), so never to a
    float."""
    if node.op_type == "CastLike":
        like = node.inputs[1] if len(node.inputs) > 1 else None
        target = like.dtype if like is not None else None
    else:
        target = ir.DataType(node.attributes.get_int("to", 0))
    if target is None or elements is None:
        return False
    if target == ir.DataType.INT64:
        return True
    numbers = [as_int(e) for e in elements]
    if any(n is None for n in numbers):
        return False
    if not target.is_integer():
        return False
    info = np.iinfo(target.numpy())
    return all(info.min <= n <= info.max for n in numbers)  # type: ignore[operator]


def _integer_div(a: Poly | None, b: Poly | None) -> Poly | None:
    """An integer Div as onnxruntime computes it: toward zero (-7 / 2 is -3)."""
    x, y = as_int(a), as_int(b)
    if x is not None and y:
        quotient = abs(x) // abs(y)
        return const(quotient if (x < 0) == (y < 0) else -quotient)
    if a is not None and y and all(v % y == 0 for v in a.values()):
        return {k: v // y for k, v in a.items()}
    return None


def _lift(op: Callable[[Poly, Poly], Poly | None]
          ) -> Callable[[Poly | None, Poly | None], Poly | None]:
    return lambda a, b: None if a is None or b is None else op(a, b)


def _extreme(pick: Callable[[int, int], int]) -> Callable[[Poly, Poly], Poly | None]:
    def chosen(a: Poly, b: Poly) -> Poly | None:
        x, y = as_int(a), as_int(b)
        return const(pick(x, y)) if x is not None and y is not None else \
            a if a == b else None
    return chosen


_ARITHMETIC: dict[str, Callable[[Poly | None, Poly | None], Poly | None]] = {
    "Add": _lift(add), "Sub": _lift(lambda a, b: add(a, b, -1)), "Mul": _lift(mul),
    "Div": _integer_div, "Max": _lift(_extreme(max)), "Min": _lift(_extreme(min))}
_SAME_SHAPE = frozenset({
    "Cast", "CastLike", "Identity", "Neg", "Not", "Abs", "Relu", "Sigmoid", "Tanh", "Exp",
    "Log", "Sqrt", "Erf", "Softmax", "LogSoftmax", "Trilu", "CumSum", "IsNaN", "IsInf",
    "Sign", "Floor", "Ceil", "Round", "Reciprocal", "Dropout", "LayerNormalization"})
_REDUCTIONS = frozenset({
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin"})
_BROADCASTING = frozenset({
    "Add", "Sub", "Mul", "Div", "Where", "And", "Or", "Xor", "Equal", "Less", "LessOrEqual",
    "Greater", "GreaterOrEqual", "Max", "Min", "BitwiseAnd", "BitwiseOr", "Pow", "Mod"})
_STEPS: dict[str, Step] = {
    **dict.fromkeys(_SAME_SHAPE, GraphDims._same),
    **dict.fromkeys(_BROADCASTING, GraphDims._broadcast),
    "Shape": GraphDims._shape, "Size": GraphDims._size, "Gather": GraphDims._gather,
    "GatherND": GraphDims._gather_nd, "Concat": GraphDims._concat,
    "Unsqueeze": GraphDims._unsqueeze, "Squeeze": GraphDims._squeeze,
    "Flatten": GraphDims._flatten, "Reshape": GraphDims._reshape, "Expand": GraphDims._expand,
    "ConstantOfShape": GraphDims._constant_of_shape, "Range": GraphDims._range,
    "Transpose": GraphDims._transpose, "Slice": GraphDims._slice, "MatMul": GraphDims._matmul,
    "Tile": GraphDims._tile, "Pad": GraphDims._pad,
    **dict.fromkeys(_REDUCTIONS, GraphDims._reduce)}
