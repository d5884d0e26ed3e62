"""``--inline-functions``: every call of a model-local function becomes its body, in time
linear in the nodes it creates, and only when they are few enough.

The inlining is onnx-ir's ``InlinePass``, with two bounds around it:

- the expanded graph is counted first (``expansion.py``); above ``EXPANSION_BUDGET`` nodes
  nothing is inlined (a nest of functions each calling the one below twice grows as 2**depth)
  and the caller reports why;
- onnx-ir 1.1 names each copy of a value by trying ``name``, ``name_2``, ``name_3``, ... from
  the start every time, so N calls of one function cost N**2/2 set lookups (a 2,048-node nest
  took 45 s). While the pass runs, its naming helper is replaced by one that resumes each
  name's search where the last one ended: the same names (the set of used names only grows,
  so a suffix found taken stays taken), in linear time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import onnx_ir as ir
from onnx_ir.passes.common import InlinePass
from onnx_ir.passes.common import inliner as _inliner

from onnxfold.analysis.expansion import EXPANSION_BUDGET, describe, expanded_size

_NAMER = "_make_unique_name"
_PATCHING = threading.Lock()  # one replacement at a time: each restores what it replaced


@contextmanager
def _resumed_name_search() -> Iterator[None]:
    """Within the block, onnx-ir's inliner names copies in linear time (module docstring)."""
    tried: dict[tuple[int, str], int] = {}  # (id of a set of used names, name) -> last suffix
    alive: dict[int, set[str]] = {}  # the sets keyed by id, kept so no id is reused

    def make_unique_name(name: str, callstack: object, used_names: set[str]) -> str:
        alive.setdefault(id(used_names), used_names)
        key = (id(used_names), name)
        suffix = tried.get(key, 1)
        candidate = name if suffix == 1 else f"{name}_{suffix}"
        while candidate in used_names:
            suffix += 1
            candidate = f"{name}_{suffix}"
        tried[key] = suffix
        used_names.add(candidate)
        return candidate

    with _PATCHING:
        original = getattr(_inliner, _NAMER, None)
        if original is None:  # a newer onnx-ir that names differently: nothing to speed up
            yield
            return
        setattr(_inliner, _NAMER, make_unique_name)
        try:
            yield
        finally:
            setattr(_inliner, _NAMER, original)


def inline_functions(model: ir.Model, budget: int = EXPANSION_BUDGET) -> tuple[bool, str | None]:
    """Inline every local function call of ``model`` in place, unless the expanded graph
    exceeds ``budget`` nodes; return (whether the model changed, why nothing was inlined)."""
    if not model.functions:
        return False, None
    size = expanded_size(model, budget)
    if size > budget:
        return False, (f"--inline-functions: nothing inlined: with every function call expanded "
                       f"the graph would have {describe(size, budget)} nodes (the budget is "
                       f"{budget:,}); the functions are kept")
    with _resumed_name_search():
        return InlinePass()(model).modified, None
