"""Size policy decided before evaluation: folds that would make the model bigger.

Folding replaces constant subgraphs by their results. That is a win only when the kept results
are no larger than the constants they replace. Two cases are refused by default:

- **growth**: a kept result larger than ``growth_factor`` times the *exclusive* constant bytes
  it comes from (constants that die with the fold). fp16 weights cast to fp32 double in size;
  a transpose of a weight that stays in use elsewhere (GPT-2's tied embedding) duplicates it.
- **model growth**: the sum of all growth above ``max_growth_bytes``.

Results under ``growth_min_bytes`` are allowed, except copies of shared weights: a kept result
larger than a scalar or a shape (``SMALL_BYTES``) that reads a floating-point or quantized
source staying in use elsewhere (a tied embedding and its transpose, a float weight read both
by a QuantizeLinear and by a float op) is refused whatever its size, unless growth is allowed
(``growth_factor=None``). Sizes come from static shapes; a result whose size is unknown before
evaluation is allowed here (the expansion bound still applies).

**QDQ**: dequantizations of constant quantized weights (``kept_quantized``) stay, so a
quantized model stays quantized, except where the dequantized value only feeds foldable nodes
that quantize it again (``DequantizeLinear -> Transpose -> QuantizeLinear``, what
onnxruntime's quantizer writes around a transposed weight): that chain folds into one
quantized initializer and the float intermediate never reaches the model. QuantizeLinear of a
constant float weight folds like any op (its result is 2-8x smaller than its source).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection

import onnx_ir as ir

from onnxfold.analysis.constness import ConstPlan
from onnxfold.analysis.declines import DeclineKind, Reason
from onnxfold.ir.graph import identity_source, static_shape

HALF_FLOATS = {ir.DataType.FLOAT16: 2, ir.DataType.BFLOAT16: 2}
QUANTIZED = {ir.DataType.INT8: 4, ir.DataType.UINT8: 4, ir.DataType.INT16: 2,
             ir.DataType.UINT16: 2, ir.DataType.INT4: 8, ir.DataType.UINT4: 8}
SMALL_BYTES = 64  # a scalar or a shape: never counted as a copy of a shared weight


def _is_weight(value: ir.Value) -> bool:
    """A floating-point or quantized constant larger than a scalar or a shape."""
    dtype = value.dtype
    if dtype is None or not (dtype.is_floating_point() or dtype in QUANTIZED):
        return False
    return (static_nbytes(value) or 0) > SMALL_BYTES


def static_nbytes(value: ir.Value) -> int | None:
    """Bytes of ``value`` from its static shape and dtype, or None."""
    tensor = value.const_value
    if tensor is not None:
        return tensor.nbytes
    dtype = value.dtype
    if dtype is None or dtype == ir.DataType.STRING:
        return None
    shape = static_shape(value)
    if shape is None:
        return None
    return int(math.prod(shape) * dtype.itemsize)  # math.prod: exact, no numpy call


MAX_KEPT_ORIGINS = 256  # sources a value's kept set may hold; the models seen need ~20


class Origins:
    """For every constant value of a plan, the source constants it is computed from.

    Each value's set is made from its node's inputs' sets as the plan's nodes come, and kept
    while it holds at most :data:`MAX_KEPT_ORIGINS` sources. A larger one is traced again
    from the value whenever asked for: a chain of n constant nodes each reading a weight of
    its own would otherwise keep n**2 / 2 entries (8,000 Adds: 1.5 GB), and only the few
    results a fold keeps are asked about."""

    def __init__(self, plan: ConstPlan) -> None:
        self._plan = plan
        self._foldable: set[ir.Node] | None = None  # made for the first trace
        sets: dict[ir.Value, frozenset[ir.Value] | None] = {
            v: frozenset((v,)) for v in plan.sources}
        for node in plan.foldable:
            found = [sets[v] for v in node.inputs if v in sets]  # (None is not in it)
            kept = [f for f in found if f is not None]
            merged: frozenset[ir.Value] | None
            if len(kept) < len(found):
                merged = None  # an input traced anew: this value is traced anew
            elif len(kept) == 1:
                merged = kept[0]  # shared, not copied: frozensets never change
            else:
                merged = frozenset().union(*kept)
                if len(merged) > MAX_KEPT_ORIGINS:
                    merged = None
            for out in node.outputs:
                sets[out] = merged
        self._sets = sets

    def get(self, value: ir.Value, default: frozenset[ir.Value] | None = None
            ) -> frozenset[ir.Value] | None:
        """The sources ``value`` is computed from; ``default`` if it is not constant."""
        if value not in self._sets:
            return default
        found = self._sets[value]
        return found if found is not None else self._trace(value)

    def _trace(self, value: ir.Value) -> frozenset[ir.Value]:
        """The sources upstream of ``value`` through the plan's foldable nodes (what the sets
        made as the nodes came hold)."""
        if self._foldable is None:
            self._foldable = set(self._plan.foldable)
        sources, foldable = self._plan.sources, self._foldable
        found: set[ir.Value] = set()
        seen = {value}
        stack = [value]
        while stack:
            v = stack.pop()
            if v in sources:
                found.add(v)
                continue
            producer = v.producer()
            if producer is None or producer not in foldable:
                continue
            for u in producer.inputs:
                if u is not None and u not in seen and u in self._sets:
                    seen.add(u)
                    stack.append(u)
        return frozenset(found)


class _Judge:
    """What :func:`refuse_growth` weighs: the kept results of a plan's planned nodes that may
    grow the model, each as ``(growth, size, exclusive source bytes, node)`` given the source
    constants still ``alive`` (kept by the model whatever is folded)."""

    def __init__(self, plan: ConstPlan, planned: set[ir.Node], outputs: set[ir.Value],
                 origins_of: Origins, kept: Callable[[ir.Value], bool],
                 source_bytes: Callable[[ir.Value], int], growth_min_bytes: int) -> None:
        self.plan, self.planned, self.outputs, self.origins_of = plan, planned, outputs, origins_of
        self.kept, self.source_bytes, self.growth_min_bytes = kept, source_bytes, growth_min_bytes

    def of(self, node: ir.Node, alive: set[ir.Value]) -> list[tuple[int, int, int, ir.Node]]:
        """The candidates among ``node``'s results: kept, larger than ``growth_min_bytes`` or
        a copy of a shared weight."""
        found = []
        for out in node.outputs:
            size = static_nbytes(out)
            if size is None or not self.kept(out) or (
                    out not in self.outputs and
                    identity_source(out, self.plan.sources) is not None):
                continue  # an Identity of a constant is kept as that constant: no copy
            sources = self.origins_of.get(out) or frozenset()
            copies_shared = size > SMALL_BYTES and any(
                s in alive and _is_weight(s) for s in sources)
            if size <= self.growth_min_bytes and not copies_shared:
                continue
            exclusive = sum(self.source_bytes(s) for s in sources if s not in alive)
            found.append((size - exclusive, size, exclusive, node))
        return found

    def every(self, alive: set[ir.Value]) -> list[tuple[int, int, int, ir.Node]]:
        """Every planned node's candidates, from the last node to the first."""
        return [c for node in reversed(self.plan.foldable) if node in self.planned
                for c in self.of(node, alive)]

    def refuse_in_one_sweep(self, alive: set[ir.Value], factor: float,
                            refused: list[tuple[ir.Node, Reason]]) -> bool:
        """Refuse, from the last planned node to the first, each whose candidates grow more
        than ``factor``; whether any was. A node refused leaves what it reads kept, and the
        nodes before it see that in the same sweep (``alive`` grows with them): a refusal
        cascading up a chain takes one sweep, not one sweep a node. (Each refusal only makes
        others more likely, so the nodes refused in the end are those refused sweep by sweep
        over the whole plan.)"""
        any_refused = False
        for node in reversed(self.plan.foldable):
            if node not in self.planned:
                continue
            growing = [c for c in self.of(node, alive) if c[1] > factor * c[2]]
            if not growing:
                continue
            refused.extend((node, Reason(DeclineKind.GROWTH, _growth_detail(
                size, exclusive, factor))) for _growth, size, exclusive, _node in growing)
            self.planned.discard(node)
            alive.update(v for v in node.inputs if v in self.plan.sources)
            any_refused = True
        return any_refused


def refuse_growth(plan: ConstPlan, planned: set[ir.Node], graph: ir.Graph,
                  growth_factor: float | None, growth_min_bytes: int,
                  max_growth_bytes: int | None, widening: dict[ir.DataType, int],
                  requantizing: frozenset[str],
                  requantized: Collection[ir.Node] = frozenset(),
                  origins_of: Origins | None = None,
                  ) -> tuple[list[tuple[ir.Node, Reason]], int]:
    """Remove from ``planned`` the nodes whose kept results would grow the model; say why.

    ``widening`` maps source dtypes the user allows to widen (fp16 casts, dequantization) to
    the factor their bytes may grow by; ``requantizing``: the ops :func:`refuse_dequantization`
    was given; ``requantized``: the dequantizations it let through for their requantization;
    ``origins_of``: the :class:`Origins` of ``plan``, when the caller has it.
    Returns the refusals and the growth still planned.
    """
    origins_of = Origins(plan) if origins_of is None else origins_of
    refused: list[tuple[ir.Node, Reason]] = []
    outputs = set(graph.outputs)
    inputs = set(graph.inputs)

    def kept(value: ir.Value) -> bool:
        return value in outputs or any(user not in planned for user, _ in value.uses())

    def source_bytes(value: ir.Value) -> int:
        factor = widening.get(value.dtype, 1) if value.dtype is not None else 1
        return (static_nbytes(value) or 0) * factor

    judge = _Judge(plan, planned, outputs, origins_of, kept, source_bytes, growth_min_bytes)
    changed = True
    while changed:
        changed = False
        alive = {s for s in plan.sources if kept(s) or s in inputs}
        if growth_factor is not None and judge.refuse_in_one_sweep(alive, growth_factor,
                                                                   refused):
            changed = True
            continue
        candidates = judge.every(alive)
        if growth_factor is not None:
            # a dequantization let through for its requantization whose QuantizeLinear was
            # just refused: its float result would now be kept
            for node in plan.foldable:
                if node in planned and node in requantized and \
                        not _requantized(node, planned, graph, requantizing):
                    refused.append((node, _KEPT_QUANTIZED))
                    planned.discard(node)
                    changed = True
        if not changed and max_growth_bytes is not None:
            total = sum(g for g, *_ in candidates if g > 0)
            by_growth = sorted(candidates, key=lambda c: c[0], reverse=True)
            for growth, _size, _exclusive, node in by_growth:
                if total <= max_growth_bytes or growth <= 0:
                    break
                refused.append((node, Reason(DeclineKind.MODEL_GROWTH, f"folding adds {total} B "
                                             f"> limit {max_growth_bytes} B")))
                planned.discard(node)
                total -= growth
                changed = True
    return refused, sum(g for g, *_rest, node in candidates if g > 0 and node in planned)


def _growth_detail(size: int, exclusive: int, factor: float) -> str:
    """Why a kept result is refused for growth, what leaving it costs at run time, and the
    flag that trades the size for the speed."""
    what = (f"a {_size(size)} copy of a constant; its source stays in use" if exclusive == 0
            else f"result {_size(size)} > {factor:g}x the {_size(exclusive)} of constants it "
                 "replaces")
    return (f"{what}; left to compute at run time: onnxruntime folds it when it creates a "
            "session (at its basic level and above), else it runs on every call; "
            f"--allow-growth stores it (+{_size(size - exclusive)})")


def _size(nbytes: int) -> str:
    return f"{nbytes} B" if nbytes < 2**20 else f"{nbytes / 2**20:.1f} MiB"


_KEPT_QUANTIZED = Reason(DeclineKind.QDQ_POLICY, "quantized weights stay quantized (--fold-qdq)")


def _requantized(node: ir.Node, planned: set[ir.Node], graph: ir.Graph,
                 requantizing: frozenset[str]) -> bool:
    """Whether ``node``'s result reaches the model only quantized again: one chain of planned
    single-output nodes, each read once, ends at input 0 of a planned node of ``requantizing``
    (QuantizeLinear; a result fanning out to two quantizations would be kept twice)."""
    outputs = set(graph.outputs)
    current = node
    for _ in range(len(planned) + 1):
        if len(current.outputs) != 1:
            return False
        value = current.outputs[0]
        uses = list(value.uses())
        if value in outputs or len(uses) != 1:
            return False
        user, index = uses[0]
        if user not in planned or user.graph is not graph:
            return False
        if user.op_type in requantizing and user.domain in ("", "ai.onnx"):
            return index == 0
        current = user
    return False


def refuse_dequantization(foldable: list[ir.Node], planned: set[ir.Node],
                          kept_ops: frozenset[str], fold_qdq: bool,
                          requantizing: frozenset[str]
                          ) -> tuple[list[tuple[ir.Node, Reason]], frozenset[ir.Node]]:
    """Quantized weights stay quantized unless ``fold_qdq``: their dequantizations (the ops
    ``rules/facts.py`` marks ``kept_quantized``) leave ``planned``, except those whose results
    are only requantized by planned nodes (of the ops it marks ``requantizes``: see the module
    docstring). Returns the refusals with why, and the dequantizations let through for their
    requantization (what :func:`refuse_growth` must refuse if that requantization goes)."""
    if fold_qdq:
        return [], frozenset()
    candidates = [n for n in foldable if n.op_type in kept_ops and n in planned]
    graph = candidates[0].graph if candidates else None
    kept = []
    changed = True
    while changed:  # a dequantization kept can break another one's chain (a shared Transpose)
        changed = False
        for node in candidates:
            if node in planned and not (graph is not None and node.graph is graph and
                                        _requantized(node, planned, graph, requantizing)):
                planned.discard(node)
                kept.append(node)
                changed = True
        changed = changed and any(n in planned for n in candidates)
    let_through = frozenset(node for node in candidates if node in planned)
    return [(n, _KEPT_QUANTIZED) for n in kept], let_through
