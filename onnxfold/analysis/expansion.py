"""How many nodes a model becomes once every call of a model-local function is expanded.

A function may call other functions, so a few kilobytes of functions (``f_k`` calling
``f_(k-1)`` twice, 40 levels deep) expand to 2**40 nodes. Whatever expands calls (onnx-ir's
inliner, ONNX shape inference, onnxruntime's session) then never ends. This module counts the
expanded size once, in time linear in the model's nodes: each function's size is memoized (the
nodes of its body, subgraphs included, with each call replaced by the callee's size), and every
sum saturates just above the caller's ``cap`` so that no count grows without bound. A function
that calls itself, directly or not, expands without end: its size is over any cap.

The callers compare the count with a budget: ``EXPANSION_BUDGET`` for inlining and shape
inference (``--inline-functions`` declines above it, inference then leaves function calls
opaque), ``verify.VERIFY_MAX_NODES`` for loading the output in onnxruntime to verify it,
``ORT_EXPANSION_LIMIT`` for running it there (``compare``, ``--check``, ``Session``). ONNX shape
inference also copies the table of all local functions for every call it expands, so its cost
is the expanded size times the number of functions: :func:`inference_expands_functions` bounds
that product by ``INFERENCE_WORK_BUDGET`` (10,000 functions called once each took 115 s).
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

from onnxfold.errors import InputError
from onnxfold.ir.graph import subgraphs

EXPANSION_BUDGET = 100_000  # nodes, function calls expanded: about 20 s of inlining
INFERENCE_WORK_BUDGET = 20_000_000  # expanded nodes x local functions: about 7 s of inference
ORT_EXPANSION_LIMIT = 20_000  # nodes onnxruntime's loading may add by inlining local functions

FunctionKey = tuple[str, str, str]  # (domain, name, overload), as ``ir.Model.functions`` keys


def _nodes_within(graph: ir.Graph) -> Iterator[ir.Node]:
    """Every node of ``graph`` and of the subgraphs inside it."""
    stack = [graph]
    while stack:
        for node in stack.pop():
            yield node
            stack.extend(subgraphs(node))


def _call_key(node: ir.Node) -> FunctionKey:
    return (node.domain, node.op_type, node.overload)


def _own_size(graph: ir.Graph, functions: dict[FunctionKey, ir.Function]
              ) -> tuple[int, list[FunctionKey]]:
    """Nodes of ``graph`` (subgraphs included; a call counts as one node too: expanding it
    costs a step), and the local functions they call."""
    own, calls = 0, []
    for node in _nodes_within(graph):
        own += 1
        key = _call_key(node)
        if key in functions:
            calls.append(key)
    return own, calls


def function_sizes(model: ir.Model, cap: int) -> dict[FunctionKey, int]:
    """Each local function's expanded size, or ``cap + 1`` for any size above ``cap``
    (a recursive function included)."""
    functions: dict[FunctionKey, ir.Function] = dict(model.functions)
    over = cap + 1
    bodies = {key: _own_size(function.graph, functions) for key, function in functions.items()}
    sizes: dict[FunctionKey, int] = {}
    on_path: set[FunctionKey] = set()
    for root in functions:
        if root in sizes:
            continue
        stack = [root]  # an explicit stack: a 10,000-deep chain of calls is no recursion limit
        while stack:
            key = stack[-1]
            if key in sizes:  # reached again through another caller
                stack.pop()
                continue
            if key not in on_path:
                on_path.add(key)
                pending = [c for c in bodies[key][1] if c not in sizes]
                if any(c in on_path for c in pending):
                    sizes[key] = over  # a call back into a function being expanded
                    on_path.discard(key)
                    stack.pop()
                    continue
                stack.extend(dict.fromkeys(pending))
                continue
            stack.pop()
            on_path.discard(key)
            own, calls = bodies[key]
            total = own
            for callee in calls:
                total = min(over, total + sizes.get(callee, over))
            sizes[key] = total
    return sizes


def expanded_size(model: ir.Model, cap: int = EXPANSION_BUDGET, functions: bool = True) -> int:
    """Nodes of all the model's graphs with every local call expanded, or ``cap + 1`` for any
    size above ``cap``; linear in the nodes of the graphs and the function bodies.
    ``functions=False``: the nodes of the graphs alone."""
    if not model.functions or not functions:
        return min(cap + 1, sum(1 for _ in _nodes_within(model.graph)))
    sizes = function_sizes(model, cap)
    own, calls = _own_size(model.graph, dict(model.functions))
    total = own
    for callee in calls:
        total = min(cap + 1, total + sizes[callee])
    return min(cap + 1, total)


def inference_expands_functions(model: ir.Model) -> bool:
    """Whether ONNX shape inference may be given ``model``'s functions: the expanded size is
    at most ``EXPANSION_BUDGET`` and, times the number of functions, ``INFERENCE_WORK_BUDGET``."""
    if not model.functions:
        return True
    cap = min(EXPANSION_BUDGET, INFERENCE_WORK_BUDGET // len(model.functions))
    return expanded_size(model, cap) <= cap


def refuse_onnxruntime_inlining(model: ir.Model, label: str) -> None:
    """Raise InputError when onnxruntime, loading ``model`` to run it, would inline its local
    functions into more than ``ORT_EXPANSION_LIMIT`` nodes beyond the graph's own: its loading
    grows faster than linearly (a 4 KB nest of functions expanding to 32,768 nodes takes 19 s
    to load, one level more twice as long)."""
    if not model.functions:
        return
    plain = expanded_size(model, functions=False)
    cap = plain + ORT_EXPANSION_LIMIT
    if expanded_size(model, cap) > cap:
        raise InputError(f"{label}: onnxruntime would inline its local functions into more "
                         f"than {ORT_EXPANSION_LIMIT:,} nodes beyond the graph's {plain:,}: too "
                         "many to run it (docs/time-bounds.md)")


def describe(size: int, cap: int) -> str:
    """``size`` for a message: ``more than CAP`` once it is saturated."""
    return f"more than {cap:,}" if size > cap else f"{size:,}"
