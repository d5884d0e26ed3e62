"""The dims the second model of a check fixes where the first leaves them dynamic.

A model folded at fixed shapes (``--input-shape input_ids:1,128``) accepts only those shapes
where the original accepts any: it can be compared with the original only there. Those dims
are *pinned*: every input set binds them to the second model's values (the outputs'
comparison, ``check.outputs``), the fold verification re-derives at them (``check.folds``),
and the check says so (its verdict holds at those dims). A floor both read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import onnx_ir as ir

from onnxfold.check.inputs.dim_relations import is_named
from onnxfold.errors import InputError
from onnxfold.ir.graph import is_static_dim


@dataclass(frozen=True)
class Pinned:
    """Dims the second model fixes: named ones (``batch=1``) and unnamed ones by input and
    axis; ``where`` says which inputs fix them, for the note."""

    named: dict[str, int] = field(default_factory=dict)
    axes: dict[str, dict[int, int]] = field(default_factory=dict)
    where: dict[str, list[str]] = field(default_factory=dict)  # "batch=1" -> inputs
    each: list[tuple[str, int, str]] = field(default_factory=list)  # (input, axis, "batch=1")

    def __bool__(self) -> bool:
        return bool(self.named or self.axes)

    def note(self, by: str) -> str:
        """One line for the report: what is pinned, by which inputs, by whom (``by``)."""
        parts = [f"{dim} ({', '.join(inputs)})" for dim, inputs in self.where.items()]
        return (f"{by} fixes dims the original leaves dynamic: {'; '.join(parts)}; both are "
                "compared there only")

    def unasked(self, fixed: Mapping[str, Sequence[int]],
                why: str = "no --input-shape fixed") -> str:
        """The pinned dims that ``fixed`` (by input, the axes ``--input-shape`` fixed) does
        not account for, as a failure saying ``why`` they should not be fixed (empty: none)."""
        wrong = [f"{dim} of {name} (axis {axis})" for name, axis, dim in self.each
                 if axis not in fixed.get(name, ())]
        return (f"the optimized model fixes dims the original leaves dynamic and {why}: "
                f"{', '.join(wrong)}") if wrong else ""


def pinned_dims(a: ir.Model, b: ir.Model, given: Mapping[str, int]) -> Pinned:
    """The dims of ``a``'s inputs that are dynamic in ``a`` and static in ``b`` (an input of
    the same name). InputError where ``given`` (``--dim``) sets one to another value."""
    inputs_b = {v.name: v for v in b.graph.inputs}
    pinned = Pinned()
    for value in a.graph.inputs:
        other = inputs_b.get(value.name)
        if other is None or value.shape is None or other.shape is None or \
                len(value.shape) != len(other.shape):
            continue
        for axis, (dim_a, dim_b) in enumerate(zip(value.shape, other.shape)):
            if is_static_dim(dim_a) or not is_static_dim(dim_b):  # -1 is any size
                continue
            name = getattr(dim_a, "value", None)
            if is_named(name):
                if name in given and given[name] != dim_b:
                    raise InputError(f"--dim {name}={given[name]}: the second model fixes "
                                     f"{name} at {dim_b} (input {value.name})")
                pinned.named.setdefault(name, dim_b)
                key = f"{name}={dim_b}"
            else:
                pinned.axes.setdefault(str(value.name), {})[axis] = dim_b
                key = f"axis {axis}={dim_b}"
            pinned.where.setdefault(key, []).append(str(value.name))
            pinned.each.append((str(value.name), axis, key))
    return pinned
