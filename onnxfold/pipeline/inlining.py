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
- onnx-ir 1.1 abbreviates each function's id by comparing it with every other id (N**2: 10,000
  functions, the checker's limit, took 8 s of a 12 s run). While the pass runs, that helper is
  replaced by one that gives the same abbreviations from one count of the domains sharing each
  name and overload.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import onnx_ir as ir
from onnx_ir.passes.common import InlinePass
from onnx_ir.passes.common import inliner as _inliner

from onnxfold.analysis.expansion import EXPANSION_BUDGET, describe, expanded_size

_NAMER = "_make_unique_name"
_ABBREVIATOR = "_abbreviate"
_PATCHING = threading.Lock()  # one replacement at a time: each restores what it replaced


def _abbreviations(function_ids: Iterable[ir.OperatorIdentifier]
                   ) -> dict[ir.OperatorIdentifier, str]:
    """onnx-ir's ``_abbreviate`` in linear time: a function's name (and overload), prefixed
    by ``DOMAIN_`` only where a function of another domain has the same name and overload."""
    ids = list(function_ids)
    domains: dict[tuple[str, str], set[str]] = defaultdict(set)
    for domain, name, overload in ids:
        domains[name, overload].add(domain)
    short = {}
    for op_id in ids:
        domain, name, overload = op_id
        prefix = domain + "_" if domains[name, overload] - {domain} else ""
        short[op_id] = prefix + name + (f"_{overload}" if overload != "" else "")
    return short


@contextmanager
def _patched(name: str, replacement: Callable) -> Iterator[None]:
    """Within the block, onnx-ir's inliner calls ``replacement`` for its helper ``name``
    (nothing changes where a newer onnx-ir has no such helper)."""
    original = getattr(_inliner, name, None)
    if original is None:
        yield
        return
    setattr(_inliner, name, replacement)
    try:
        yield
    finally:
        setattr(_inliner, name, original)


@contextmanager
def _linear_inliner() -> Iterator[None]:
    """Within the block, onnx-ir's inliner names copies and abbreviates function ids in
    linear time (module docstring)."""
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

    with _PATCHING, _patched(_NAMER, make_unique_name), _patched(_ABBREVIATOR, _abbreviations):
        yield


def inline_calls(model: ir.Model, criteria: Callable[[ir.Function], bool]) -> bool:
    """Inline, in place, every call of a local function for which ``criteria`` holds (calls
    inside the other functions' bodies too), in linear time; whether the model changed. The
    caller bounds the size (``expanded_size``)."""
    with _linear_inliner():
        return InlinePass(criteria)(model).modified


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
    with _linear_inliner():
        return InlinePass()(model).modified, None
