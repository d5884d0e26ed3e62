"""What an optimization did, as text for people and JSON for tools."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field

import onnx_ir as ir

from onnxfold.analysis import all_graphs
from onnxfold.fold import FoldStats


@dataclass
class ModelCounts:
    nodes: int
    initializers: int
    initializer_bytes: int
    ops: dict[str, int]


def model_counts(model: ir.Model) -> ModelCounts:
    """Node and initializer counts over the main graph and all subgraphs."""
    nodes = 0
    ops: Counter = Counter()
    inits = init_bytes = 0
    for graph in all_graphs(model):
        for node in graph:
            nodes += 1
            ops[node.op_type] += 1
        for value in graph.initializers.values():
            inits += 1
            tensor = value.const_value
            if tensor is not None and tensor.dtype != ir.DataType.STRING:
                init_bytes += tensor.nbytes
    return ModelCounts(nodes, inits, init_bytes, dict(ops))


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


@dataclass
class Report:
    """The summary printed by ``onnxfold optimize`` (``--json`` writes :meth:`to_dict`)."""

    input: str | None
    nodes_before: int
    nodes_after: int
    folded_nodes: int
    folded_native: int
    folded_fallback: int
    fallback_sessions: int
    initializer_bytes_before: int
    initializer_bytes_after: int
    new_initializers: int
    seconds: float
    pool_peak_bytes: int
    rounds: int
    pool_spilled: int = 0
    pool_spilled_bytes: int = 0
    folded_in_functions: int = 0  # of folded_nodes: in model-local function bodies
    function_constants: int = 0  # Constant nodes the fold wrote into function bodies
    declined: dict[str, int] = field(default_factory=dict)
    declined_nodes: list[dict[str, str]] = field(default_factory=list)
    rule_hits: dict[str, int] = field(default_factory=dict)
    pattern_hits: dict[str, int] = field(default_factory=dict)
    patterns_rejected: dict[str, int] = field(default_factory=dict)
    cleanup_hits: dict[str, int] = field(default_factory=dict)
    skipped_steps: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dynamic_shapes: list[dict[str, str]] = field(default_factory=list)
    output: str | None = None
    output_bytes: int | None = None
    external_data: str | None = None

    @classmethod
    def build(cls, source: str | None, before: ModelCounts, after: ModelCounts,
              stats: FoldStats, seconds: float) -> Report:
        return cls(
            input=source, nodes_before=before.nodes, nodes_after=after.nodes,
            folded_nodes=stats.folded, folded_native=stats.native,
            folded_fallback=stats.via_fallback, fallback_sessions=stats.fallback_sessions,
            initializer_bytes_before=before.initializer_bytes,
            initializer_bytes_after=after.initializer_bytes,
            new_initializers=stats.materialized, seconds=round(seconds, 3),
            pool_peak_bytes=stats.pool_peak_bytes, rounds=stats.rounds,
            pool_spilled=stats.spilled, pool_spilled_bytes=stats.spilled_bytes,
            folded_in_functions=stats.folded_in_functions,
            function_constants=stats.function_constants,
            declined=dict(stats.declined),
            declined_nodes=[{"node": n, "op": o, "kind": r.kind.value, "reason": str(r)}
                            for n, o, r in stats.declined_nodes],
            rule_hits=dict(sorted(stats.rule_hits.items(), key=lambda kv: -kv[1])),
            pattern_hits=dict(stats.pattern_hits), patterns_rejected=dict(stats.rejected_patterns),
            cleanup_hits=dict(stats.cleanup_hits), skipped_steps=list(stats.skipped_steps))

    def explain(self) -> str:
        """Every constant-foldable node left unfolded, grouped by reason, with examples, and
        the shape scaffolding that dynamic dims keep."""
        if not self.declined_nodes and not self.patterns_rejected and not self.dynamic_shapes:
            return "every constant-foldable node was folded"
        groups: dict[str, list[dict[str, str]]] = {}
        for item in self.declined_nodes:
            groups.setdefault(item["kind"], []).append(item)
        lines = []
        for reason, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"{reason}: {len(items)} node(s)")
            for item in items[:5]:
                lines.append(f"  {item['op']} {item['node']}: {item['reason']}")
            if len(items) > 5:
                lines.append(f"  ... and {len(items) - 5} more")
        for what, n in sorted(self.patterns_rejected.items()):
            lines.append(f"rewrite not applied: {what} ({n}x)")
        if self.dynamic_shapes:
            lines.append(f"dynamic shapes: {len(self.dynamic_shapes)} shape node(s) depend on "
                         "dynamic dims (fix them with --input-shape)")
            for item in self.dynamic_shapes[:5]:
                lines.append(f"  {item['op']} {item['node']}: blocked by {item['blocked_by']}")
            if len(self.dynamic_shapes) > 5:
                lines.append(f"  ... and {len(self.dynamic_shapes) - 5} more")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def summary(self) -> str:
        lines = [
            f"nodes        {self.nodes_before} -> {self.nodes_after}  "
            f"(folded {self.folded_nodes}: {self.folded_native} native, "
            f"{self.folded_fallback} via onnxruntime in {self.fallback_sessions} sessions)",
            f"initializers {_mib(self.initializer_bytes_before)} -> "
            f"{_mib(self.initializer_bytes_after)}  ({self.new_initializers} new)",
            f"pool peak    {_mib(self.pool_peak_bytes)}" + (
                f" (spilled {self.pool_spilled} buffers, {_mib(self.pool_spilled_bytes)}, "
                "to stay under the memory limit)" if self.pool_spilled else ""),
            f"time         {self.seconds:.2f} s ({self.rounds} rounds)",
        ]
        if self.folded_in_functions:
            lines.insert(1, f"functions    {self.folded_in_functions} folded in local function "
                            f"bodies ({self.function_constants} Constant nodes written)")
        rewrites = {**self.pattern_hits, **self.cleanup_hits}
        if rewrites:
            lines.append("rewrites     " + ", ".join(f"{k} {v}" for k, v in rewrites.items()))
        if self.declined:
            reasons = ", ".join(f"{r}: {n}" for r, n in sorted(self.declined.items()))
            lines.append(f"not folded   {sum(self.declined.values())} ({reasons})")
        for step in self.skipped_steps:
            lines.append(f"skipped      {step}")
        for warning in self.warnings:
            lines.append(f"warning      {warning}")
        if self.output:
            where = f" + {self.external_data}" if self.external_data else ""
            lines.append(f"wrote        {self.output}{where} ({_mib(self.output_bytes or 0)})")
        return "\n".join(lines)
