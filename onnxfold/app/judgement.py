"""An optimize run's options judged in one step, before its outputs are claimed, and what
names a part of the model judged against the model as soon as it is read.

:func:`judged` parses and judges every option on its own (``--dim``, ``--int-range``,
``--custom-op-library``, ``--test-input-shape``'s form, the flags that need ``--check``): the
one model's run, a batch (before it plans or creates anything), each of its jobs and a shard
call it first, and ``onnxfold.simplify`` judges its arguments alike
(:func:`judged_comparison`), so a bad value is one line before anything is claimed, folded or
written. What names a dim or an input of the model (:func:`judged_against`) is
judged against the model as read, before any pass: the output is written only after the fold,
so a run that refuses an option never replaces it. Nothing here depends on what is printed
(``-q``, the signature): the same options are refused, or not, however quiet the run.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from onnxfold.analysis.input_shapes import InputShapes, named_shapes, parse, planned
from onnxfold.errors import InputError
from onnxfold.host.terminal import printable

if TYPE_CHECKING:
    import onnx_ir as ir

    from onnxfold.app.commands import OptimizeSettings
    from onnxfold.check.running.options import CompareOptions


@dataclass(frozen=True)
class Judged:
    """An optimize run's options as judged: the comparison's (``--dim``, ``--int-range``,
    ... parsed, each custom-op library an existing file), which ``--check``, ``--latency`` and
    the signature's first input set use, and ``--test-input-shape``'s shapes as given."""

    comparison: CompareOptions
    test_shapes: tuple[str, ...] = ()


def judged(settings: OptimizeSettings) -> Judged:
    """Every option of ``settings`` parsed and judged on its own; InputError naming the first
    that is wrong."""
    check = settings.check
    inputs = check.comparison.inputs
    if inputs and not check.n:
        raise InputError(f"--inputs {inputs}: feeds --check N; give --check too")
    if check.shapes and not check.n:
        raise InputError(f"--test-input-shape {check.shapes[0]}: shapes the check's "
                         "inputs; give --check N too")
    try:
        parse(check.shapes)
    except InputError as e:
        raise InputError(str(e).replace("--input-shape", "--test-input-shape")) from None
    return Judged(check.comparison.resolved(), check.shapes)


def judged_comparison(options: CompareOptions) -> CompareOptions:
    """A Python caller's comparison options judged as the flags are: the dims (judged as
    ``options`` was made), each integer range two integers, the low one below the high one,
    each custom-op library an existing file."""
    from onnxfold.runtime.custom_ops import checked_libraries

    for name, bounds in options.int_ranges.items():
        if not (isinstance(bounds, tuple | list) and len(bounds) == 2 and all(
                isinstance(b, numbers.Integral) and not isinstance(b, bool) for b in bounds)
                and bounds[0] < bounds[1]):
            raise InputError(f"--int-range {name}: {bounds!r}: expected (LO, HI), integers "
                             "with LO < HI")
    checked_libraries(options.custom_op_libraries)
    return options


def judged_against(model: ir.Model, label: str, comparison: CompareOptions,
                   test_shapes: tuple[str, ...] = (), fixed: InputShapes | None = None
                   ) -> dict[str, int]:
    """The options that name a part of ``model`` (as read, before any pass; ``label``: what
    the messages call it) judged against it: each ``--dim`` a dim of an input (named, or
    anonymous by the name the check gives it: ``x[0]``), each ``--int-range`` an integer input,
    ``--test-input-shape`` (``test_shapes``) the inputs' shapes, and none of them binding a dim
    to another size than another does or than ``--input-shape`` (``fixed``) fixes it at.
    Returns the check's dims ``--test-input-shape`` gives."""
    from onnxfold.check.inputs.dim_relations import is_named
    from onnxfold.check.inputs.feeds import anonymous_dims

    inputs = {str(v.name): v for v in model.graph.inputs
              if v.name not in model.graph.initializers}
    declared = [(name, [_label(d) for d in v.shape or ()]) for name, v in inputs.items()]
    anonymous = anonymous_dims(declared)
    names = {d for _, shape in declared for d in shape if is_named(d)} | set(anonymous.values())
    for name in comparison.dims:
        if name not in names and not (name == "?" and anonymous):
            known = ", ".join(sorted(printable(n) for n in names | (
                {"?"} if anonymous else set()))) or "none"
            raise InputError(f"--dim {printable(name)}: no input of {label} has a dimension of "
                             f"that name (symbolic dimensions: {known})")
    _judge_ranges(inputs, comparison.int_ranges, label)
    tested = _tested_dims(test_shapes, model) if test_shapes else {}
    for name, size in tested.items():
        given = comparison.dims.get(name)
        if given is not None and given != size:
            raise InputError(f"--dim {printable(name)}={given}: --test-input-shape gives "
                             f"{printable(name)} {size}; give one")
    pinned = _pinned(inputs, fixed, anonymous) if fixed is not None else {}
    for name, size in tested.items():
        if pinned.get(name, size) != size:
            raise InputError(f"--test-input-shape gives {printable(name)} {size}: --input-shape "
                             f"fixes it at {pinned[name]}")
    for name, size in comparison.dims.items():
        if pinned.get(name, size) != size:
            raise InputError(f"--dim {printable(name)}={size}: --input-shape fixes "
                             f"{printable(name)} at {pinned[name]}")
    return tested


def _label(dim: object) -> int | str | None:
    """A declared dim as the check reads it: an int, a name, or None."""
    return dim if isinstance(dim, int) else getattr(dim, "value", None)


def _judge_ranges(inputs: Mapping[str, ir.Value], ranges: Mapping[str, tuple[int, int]],
                  label: str) -> None:
    """Each ``--int-range`` names an input of integers."""
    for name in ranges:
        value = inputs.get(name)
        if value is None:
            raise InputError(f"--int-range {printable(name)}: not an input of {label} (inputs: "
                             f"{', '.join(printable(n) for n in inputs)})")
        dtype = value.dtype
        if dtype is not None and not dtype.is_integer():
            raise InputError(f"--int-range {printable(name)}: the input is "
                             f"{dtype.name.lower()}, not an integer")


def _pinned(inputs: Mapping[str, ir.Value], fixed: InputShapes,
            anonymous: Mapping[tuple[str, int], str]) -> dict[str, int]:
    """The dims ``--input-shape`` fixes, by the names the check gives them: each named dim it
    binds, and each anonymous dim a shape gives a size."""
    named = dict(fixed.named)
    shapes = planned(inputs, fixed.shapes, named)  # the fold's own refusals, said first here
    pinned = dict(named)
    for (name, axis), dim in anonymous.items():
        size = shapes.get(name, [])[axis] if axis < len(shapes.get(name, [])) else None
        if isinstance(size, int):
            pinned[dim] = size
    return pinned


def _tested_dims(shapes: Sequence[str], model: ir.Model) -> dict[str, int]:
    """``--test-input-shape x:1,3,224,224`` as the check's dims: each dynamic dim of
    ``model``'s input ``x`` (as read, before any pass) bound to the size given on its axis, an
    anonymous one by the name the check gives it (``x[2]``). InputError, as ``--input-shape``
    says it, for an input the model lacks, another rank, a static dim given another size, or a
    dim given two sizes."""
    from onnxfold.check.inputs.feeds import anonymous_dims

    inputs = {str(v.name): v for v in model.graph.inputs if v.name not in
              model.graph.initializers}
    try:
        parsed = parse(shapes)
        given, named = named_shapes(parsed.shapes, list(inputs)), dict(parsed.named)
        for name in set(given) - set(inputs):
            raise InputError(f"--input-shape {printable(name)}: no such input (inputs: "
                             f"{', '.join(map(printable, inputs))})")
        planned(inputs, given, named)
    except InputError as e:
        raise InputError(str(e).replace("--input-shape", "--test-input-shape")) from None
    anonymous = anonymous_dims([(name, [_label(d) for d in v.shape or ()])
                                for name, v in inputs.items()])
    named.update({anonymous[(name, axis)]: size for name, sizes in given.items()
                  for axis, size in enumerate(sizes)
                  if (name, axis) in anonymous and isinstance(size, int)})
    return named
