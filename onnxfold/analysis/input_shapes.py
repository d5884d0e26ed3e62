"""``--input-shape``: fix some or all of a model's input dims before folding.

Two forms, repeatable: ``NAME:d0,d1,...`` gives input ``NAME`` a full shape (an int fixes a dim,
``?`` keeps the dim the model declares, any other word makes it that named dim), and ``DIM=V``
binds a named dim (``batch=1``) in every input that has it. A bare ``d0,d1,...`` (onnxsim's
``--overwrite-input-shape 1,3,224,224``) is the shape of a model's one input; a model with
several refuses it, naming them. A shape that gives a named dim a
value binds that name too, in every input and output that has it: ``input_ids:1,128`` on a
BERT whose inputs all say ``[batch, seq]`` fixes its attention mask as well, as the ONNX spec
means a name (one value). A dim left symbolic stays symbolic. A dim the model leaves anonymous
(``?``, unnamed, Paddle's -1) names nothing: a shape fixes each one to any size of its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeGuard

import onnx_ir as ir

from onnxfold.errors import InputError
from onnxfold.host.terminal import printable
from onnxfold.ir.graph import is_static_dim
from onnxfold.numbers import flag_value

_NAMED = re.compile(r"^([A-Za-z_][\w.:/-]*)=([^=]*)$")
# a shape without a name (only dims: numbers and ?): the model's one input
_BARE = re.compile(r"^\s*[\d?]+\s*(,\s*[\d?]+\s*)*$")
# the key of the bare shape in ``InputShapes.shapes`` until the model's one input names it
BARE = ""


def as_specs(shapes: Mapping[str, Sequence[int | str | None]] | Sequence[str] | str | None
             ) -> tuple[str, ...]:
    """``{"x": [1, 3, 224, 224]}`` (onnxsim's form; ``None`` or ``"?"`` keeps a dim),
    ``["x:1,3,224,224", "batch=1"]`` (the ``--input-shape`` strings) or ``[1, 3, 224, 224]``
    (the one input's shape) as those strings."""
    if shapes is None:
        return ()
    if isinstance(shapes, str):
        return (shapes,)
    if isinstance(shapes, Sequence) and shapes and all(
            isinstance(d, int) and not isinstance(d, bool) for d in shapes):
        return (",".join(map(str, shapes)),)  # [1, 3, 224, 224]: the one input's (bare)
    if isinstance(shapes, Mapping):
        specs = []
        for name, dims in shapes.items():
            if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
                raise InputError(f"input_shapes[{name!r}]: expected a list of dims, not "
                                 f"{dims!r}")
            specs.append(f"{name}:" + ",".join("?" if d is None else str(d) for d in dims))
        return tuple(specs)
    return tuple(shapes)


def _is_number(part: str) -> bool:
    """Whether a dim was meant as a number (a sign or any digit, ``²`` and ``١`` included),
    rather than ``?`` or a dim name."""  # noqa: RUF002 - an Arabic-Indic digit on purpose
    return part[:1] in "+-" or any(c.isnumeric() for c in part[:1])


@dataclass(frozen=True)
class InputShapes:
    """``--input-shape`` parsed once (:func:`parse`), the value the fold, the references of a
    check or a load check, and ``simplify`` read: the shape given for each input (ints, ``?``
    or dim names), the value given for each dim name, and ``specs``, the strings as given."""

    specs: tuple[str, ...] = ()
    shapes: Mapping[str, Sequence[int | str]] = field(default_factory=dict)
    named: Mapping[str, int] = field(default_factory=dict)


def parse(specs: Sequence[str]) -> InputShapes:
    """The :class:`InputShapes` the ``--input-shape`` strings give."""
    shapes: dict[str, list[int | str]] = {}
    named: dict[str, int] = {}
    for spec in specs:
        match = _NAMED.match(spec.strip())
        if match and ":" not in spec:
            dim = match.group(1)
            value = flag_value(f"--input-shape {dim}", match.group(2), minimum=0)
            if named.setdefault(dim, value) != value:
                raise InputError(f"--input-shape {dim}: given twice, as {named[dim]} and {value}")
            continue
        name, colon, dims = (BARE, ":", spec) if _BARE.match(spec) else spec.rpartition(":")
        parts = [d.strip() for d in dims.split(",")] if dims.strip() else []
        if not colon or (not name and dims is not spec) or any(not d for d in parts):
            raise InputError(f"--input-shape {spec}: expected NAME:d0,d1,... or DIM=VALUE")
        shape = [flag_value(f"--input-shape {name}", d, minimum=0) if _is_number(d) else d
                 for d in parts]
        if shapes.setdefault(name, shape) != shape:
            said = name or "(the one input's, without a name)"
            raise InputError(f"--input-shape {said}: given twice, as {_spec(shapes[name])} and "
                             f"{_spec(shape)}")
        unsafe = [d for d in parts if printable(d) != d]
        if unsafe:
            raise InputError(f"--input-shape {name}: the dim name {printable(unsafe[0])} holds "
                             "control or invisible characters (it would go into the model)")
    return InputShapes(tuple(specs), shapes, named)


def _spec(shape: Sequence[int | str]) -> str:
    return ",".join(map(str, shape))


def _label(dim: object) -> int | str | None:
    """An int, a dim name, or None (unknown) for an ``ir.Shape`` entry."""
    return dim if isinstance(dim, int) else getattr(dim, "value", None)


def _named(label: int | str | None) -> TypeGuard[str]:
    """Whether a dim's label names it: ``?``, an empty name, none, and Paddle's -1 are each
    their own dim (any size), which a shape may fix to any size on its own."""
    return isinstance(label, str) and label not in ("", "?")


@dataclass
class Fixed:
    """What :func:`apply` did: the dims that changed, the named dims it bound (given as
    ``DIM=V``, or read off a shape given for an input that declares that name: a shape's
    ``1`` where the input says ``batch`` fixes ``batch`` in every input that has it), and the
    inputs whose declared shapes changed."""

    changed: int = 0
    bound: dict[str, int] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    axes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # input -> axes made static

    def describe(self) -> str:
        """``batch=1, seq=128 fixed on input_ids, attention_mask`` (empty: nothing bound)."""
        if not self.bound:
            return ""
        dims = ", ".join(f"{k}={v}" for k, v in self.bound.items())
        return f"{dims} fixed on {', '.join(self.inputs)}"


def apply(model: ir.Model, given: InputShapes) -> Fixed:
    """Overwrite the main graph's input dims as ``given`` says, and every dim of the inputs and
    outputs that shares a name with a dim it fixed (the ONNX spec's meaning of a name: one
    value); return what changed."""
    named = dict(given.named)
    inputs = {v.name: v for v in model.graph.inputs if v.name}
    shapes = named_shapes(given.shapes, [name for name in inputs
                                         if name not in model.graph.initializers])
    for name in shapes:
        if name not in inputs:
            raise InputError(f"--input-shape {name}: no such input "
                             f"(inputs: {', '.join(inputs)})")
    given_names = set(named)
    plan = planned(inputs, shapes, named)
    fixed = Fixed()
    used: set[str] = set()
    for name, value in inputs.items():
        old = [_label(d) for d in value.shape] if value.shape is not None else None
        new = plan.get(name, list(old) if old is not None else [])
        if old is None and name not in plan:
            continue
        new = [_bound(d, named, used) for d in new]
        if new != old:
            fixed.changed += sum(a != b for a, b in zip(old or [None] * len(new), new))
            value.shape = ir.Shape(new)
            fixed.inputs.append(name)
            fixed.axes[name] = tuple(i for i, d in enumerate(new) if is_static_dim(d) and
                                     not is_static_dim((old or [None] * len(new))[i]))
    for value in model.graph.outputs:  # the declared outputs follow the names bound
        if value.shape is not None:
            dims = [_bound(_label(d), named, set()) for d in value.shape]
            if dims != [_label(d) for d in value.shape]:
                value.shape = ir.Shape(dims)
    unused = sorted(given_names - used)
    if unused:
        raise InputError(f"--input-shape {unused[0]}=...: no input has a dim of that name")
    fixed.bound = {k: v for k, v in named.items() if k in used}
    return fixed


def named_shapes(shapes: Mapping[str, Sequence[int | str]], inputs: Sequence[str]
                 ) -> Mapping[str, Sequence[int | str]]:
    """``shapes`` with a bare shape given to the model's one input (``inputs``: the names of
    the inputs a caller feeds); InputError where it has several."""
    if BARE not in shapes:
        return shapes
    bare = _spec(shapes[BARE])
    if not inputs:
        raise InputError(f"--input-shape {bare}: a shape without a name is the shape of a "
                         "model's one input; this one has no input a caller feeds")
    if len(inputs) != 1:
        raise InputError(f"--input-shape {bare}: a shape without a name is the shape of a "
                         f"model's one input; this one has {len(inputs)} "
                         f"({', '.join(map(printable, inputs))}): give NAME:{bare}")
    (only,) = inputs
    found = {name: dims for name, dims in shapes.items() if name != BARE}
    if found.setdefault(only, shapes[BARE]) != shapes[BARE]:
        raise InputError(f"--input-shape {printable(only)}: given twice, as "
                         f"{_spec(found[only])} and {bare}")
    return found


def planned(inputs: Mapping[str, ir.Value], shapes: Mapping[str, Sequence[int | str]],
            named: dict[str, int]) -> dict[str, list[int | str | None]]:
    """The shapes given, checked against what each input declares; ``named`` gains the
    names a given value fixes (a ``1`` where the input says ``batch``). ``inputs``: those a
    caller feeds (a bare shape is the one input's)."""
    shapes = named_shapes(shapes, list(inputs))
    found: dict[str, list[int | str | None]] = {}
    for name, value in inputs.items():
        old = [_label(d) for d in value.shape] if value.shape is not None else None
        if name not in shapes:
            continue
        given = shapes[name]
        if old is not None and len(old) != len(given):
            raise InputError(f"--input-shape {name}: {len(given)} dims, the input has "
                             f"{len(old)}")
        new: list[int | str | None] = [(old[i] if old is not None else None) if d == "?" else d
                                       for i, d in enumerate(given)]
        _refuse_contradictions(name, old, new)
        for was, now in zip(old or [], new):  # a named dim given a value: that name is bound
            if _named(was) and isinstance(now, int) and \
                    named.setdefault(was, now) != now:
                raise InputError(f"--input-shape {name}: {was} is {named[was]} elsewhere, "
                                 f"not {now}")
        found[name] = new
    return found


def _bound(dim: int | str | None, named: Mapping[str, int], used: set[str]) -> int | str | None:
    """``dim`` with the value a named binding gives it (noting the name as used)."""
    if isinstance(dim, str) and dim in named:
        used.add(dim)
        return named[dim]
    return dim


def _refuse_contradictions(name: str, old: list[int | str | None] | None,
                           new: list[int | str | None]) -> None:
    """A fixed dim of the model given another fixed value, or a name (which would declare it
    dynamic): refused with the input and dim named (onnxruntime would refuse every feed of the
    new shape, and folding with it is wrong)."""
    for i, (was, given) in enumerate(zip(old or [], new)):
        if is_static_dim(was) and isinstance(given, int) and was != given:
            raise InputError(f"--input-shape {name}: dim {i} is {was} in the model, not {given}")
        if is_static_dim(was) and isinstance(given, str):
            raise InputError(f"--input-shape {name}: dim {i} is {was} in the model; the name "
                             f"{given} would make it dynamic, which the model cannot run "
                             f"(give {was} or ?)")
