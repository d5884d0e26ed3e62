"""What the two models of a check accept: the same inputs and outputs (the dims the second
one fixes are ``check.inputs.pinned``'s)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from onnxfold.check.running.runner import Runner
from onnxfold.errors import InputError


def names_differ(what: str, a: Sequence[str], b: Sequence[str]) -> str | None:
    """How two lists of names differ (None: same names)."""
    only_a, only_b = [x for x in a if x not in b], [x for x in b if x not in a]
    if not only_a and not only_b:
        return None
    parts = [f"only in A: {', '.join(only_a)}" if only_a else "",
             f"only in B: {', '.join(only_b)}" if only_b else ""]
    return f"the models' {what} differ ({'; '.join(p for p in parts if p)})"


def same_interface(io_a: Mapping[str, list[tuple[str, str]]], sess_b: Runner, label_a: str,
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
