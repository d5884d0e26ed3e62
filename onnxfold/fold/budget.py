"""The pool budget: a node's outputs are sized, and refused, before they are allocated.

Sizes come from static shapes, else from the op's size rule (``rules/sizes.py``) applied to
its constant inputs. Without ``--memory-limit`` the pool's heap may not exceed the budget; with
it, buffers spill to disk above the limit (before a new result is allocated) and a single
output larger than the budget or the limit is refused: it would be built on the heap first.
Default budget: a quarter of the memory the process may use (the tightest of the host's RAM
and its memory cgroups' limits, ``onnxfold.host.memory_limits``), at most 4 GiB.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx_ir as ir

from onnxfold.analysis.declines import DeclineKind, Reason
from onnxfold.fold.policy import static_nbytes
from onnxfold.host.memory_limits import available_memory

MAX_DEFAULT_BUDGET = 4 << 30
LOOP_WORK_LIMIT = 10_000_000  # trip count x body nodes a constant Loop may run when folded


def default_pool_budget() -> int:
    """A quarter of the memory this process may use (host RAM or a tighter cgroup limit), at
    most 4 GiB (4 GiB where neither can be read)."""
    memory = available_memory()
    return MAX_DEFAULT_BUDGET if memory is None else min(memory // 4, MAX_DEFAULT_BUDGET)


def pool_budget(requested: int | None, memory_limit: int | None) -> int:
    """The most one node's outputs may take: ``--pool-budget`` (else the default), and never
    more than ``--memory-limit``, since an output is built on the heap before it can spill."""
    budget = requested or default_pool_budget()
    return budget if memory_limit is None else min(budget, memory_limit)


def planned_bytes(node: ir.Node, arrays: Callable[[ir.Value], np.ndarray | None],
                  size_rule: Callable[..., int | None] | None,
                  attributes: Callable[[], dict]) -> int | None:
    """Bytes ``node``'s evaluation needs before it runs: its size rule on the input arrays
    (``arrays(value)``; it may count a folder's temporaries) and its static output shapes,
    whichever is larger; None when neither is known. (Called under the evaluation's
    ``np.errstate(all="ignore")``: a rule's overflow is not a warning.)"""
    known = _static_bytes(node.outputs)
    if size_rule is None:
        return known
    inputs = [arrays(v) if v is not None else None for v in node.inputs]
    if any(a is None for v, a in zip(node.inputs, inputs) if v is not None):
        return known
    try:
        size = size_rule(*inputs, **attributes())
    except Exception:  # an input the rule cannot read: the folder declines such nodes anyway
        return known
    if size is None:
        return known
    return int(size) if known is None else max(known, int(size))  # the rule counts temporaries


def _static_bytes(values: Sequence[ir.Value]) -> int | None:
    """The bytes of ``values`` from their static shapes; None when one of them is unknown."""
    total = 0
    for v in values:
        size = static_nbytes(v)
        if size is None:
            return None
        total += size
    return total


def over_budget(need: int | None, live: int, budget: int, spilling: bool) -> Reason | None:
    """Why ``need`` more bytes may not be allocated in a pool holding ``live``, or None."""
    if need is None:
        return None
    if need > budget or (not spilling and live + need > budget):
        return Reason(DeclineKind.SIZE, f"outputs of {need} B would exceed the pool budget of "
                                        f"{budget} B ({live} B in use; --pool-budget)")
    return None


def loop_work(node: ir.Node, trips: Callable[[ir.Value], np.ndarray | None]) -> Reason | None:
    """A constant ``Loop`` whose trip count times its body's size is too much to run."""
    if node.op_type != "Loop" or not node.inputs or node.inputs[0] is None:
        return None
    count = trips(node.inputs[0])
    body = node.attributes.get("body")
    if count is None or count.size != 1 or body is None:
        return None
    work = int(np.asarray(count).reshape(-1)[0]) * max(len(body.as_graph()), 1)
    if work > LOOP_WORK_LIMIT:
        return Reason(DeclineKind.SIZE, f"Loop of {int(np.asarray(count).reshape(-1)[0])} "
                                        f"iterations ({work} node runs > {LOOP_WORK_LIMIT})")
    return None


def expansion(out_bytes: int, in_bytes: Callable[[], int], factor: float, min_bytes: int,
              max_tensor: int | None) -> Reason | None:
    """Why a result of ``out_bytes`` made from ``in_bytes()`` of inputs may not be *kept* (become
    an initializer); intermediates the pool frees are judged by the budget alone. The input
    bytes are asked for only where they decide: above ``min_bytes``, for a finite factor."""
    if not math.isinf(factor) and out_bytes > min_bytes and \
            out_bytes > factor * (inputs := in_bytes()):
        return Reason(DeclineKind.SIZE, f"output {out_bytes} B > {factor:g}x inputs "
                                        f"{inputs} B")
    if max_tensor is not None and out_bytes > max_tensor:
        return Reason(DeclineKind.SIZE, f"output over the per-tensor limit of {max_tensor} B")
    return None
