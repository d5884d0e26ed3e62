"""What the two models of a check accept: the same inputs and outputs, and the dims the second
one fixes.

A model folded at fixed shapes (``--input-shape input_ids:1,128``) accepts only those shapes
where the original accepts any: it can be compared with the original only there. The dims the
second model fixes and the first leaves dynamic are therefore *pinned*: every input set binds
them to the second model's values, and the check says so (its verdict holds at those dims).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import onnx_ir as ir

from onnxfold.analysis.dim_relations import is_named
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

    def unasked(self, fixed: Mapping[str, Sequence[int]]) -> str:
        """The pinned dims that ``fixed`` (by input, the axes ``--input-shape`` fixed) does
        not account for, as a failure (empty: none)."""
        wrong = [f"{dim} of {name} (axis {axis})" for name, axis, dim in self.each
                 if axis not in fixed.get(name, ())]
        return ("the optimized model fixes dims the original leaves dynamic and no "
                f"--input-shape fixed: {', '.join(wrong)}") if wrong else ""


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


def names_differ(what: str, a: Sequence[str], b: Sequence[str]) -> str | None:
    """How two lists of names differ (None: same names)."""
    only_a, only_b = [x for x in a if x not in b], [x for x in b if x not in a]
    if not only_a and not only_b:
        return None
    parts = [f"only in A: {', '.join(only_a)}" if only_a else "",
             f"only in B: {', '.join(only_b)}" if only_b else ""]
    return f"the models' {what} differ ({'; '.join(p for p in parts if p)})"


def same_interface(io_a: Mapping[str, list[tuple[str, str]]], sess_b, label_a: str,
                   label_b: str) -> None:
    """InputError unless B's session has A's input and output names and input types."""
    for what, get in (("inputs", "get_inputs"), ("outputs", "get_outputs")):
        problem = names_differ(what, [name for name, _ in io_a[get]],
                               [v.name for v in getattr(sess_b, get)()])
        if problem:
            raise InputError(f"{label_a} vs {label_b}: {problem}")
    types_b = {i.name: i.type for i in sess_b.get_inputs()}
    for name, type_a in io_a["get_inputs"]:
        if types_b[name] != type_a:
            raise InputError(f"{label_a} vs {label_b}: input {name} is {type_a} in A but "
                             f"{types_b[name]} in B")
