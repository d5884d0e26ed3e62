"""What an optimization did, as text for people and JSON for tools."""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

import onnx_ir as ir

from onnxfold.host.terminal import printable, wrapped
from onnxfold.ir.constants import constant_data_size
from onnxfold.ir.graph import all_graphs
from onnxfold.pipeline.leftovers import leftover_lines, pattern
from onnxfold.pipeline.op_table import OpRow, format_table, op_rows
from onnxfold.pipeline.results import FoldStats

# The version of the JSON report's layout (docs/report-json.md, report.schema.json): raised
# when a key is removed or changes meaning; new keys may appear without a new version.
SCHEMA_VERSION = 3
LEFTOVER_LINES = 5  # module groups the summary names (--explain and --json give all)


# phases the summary's time line names apart from the run's own (a 3 s fold showed "71 s")
_APART = ("check", "latency")


@dataclass
class ModelCounts:
    """A model's size: what the report compares before and after the run."""

    nodes: int  # every node but Constant nodes (their values are data, not computation)
    constants: int  # Constant nodes of the default domain
    initializers: int
    initializer_bytes: int
    ops: dict[str, int]  # nodes per op type, Constant nodes not counted
    constant_bytes: int = 0  # the Constant nodes' values (a weight an exporter left in one)


def model_counts(model: ir.Model) -> ModelCounts:
    """Node and initializer counts over the main graph and all subgraphs. Constant nodes are
    counted apart: every count onnxfold reports leaves them out (as the README's tables do),
    and says so."""
    nodes = constants = 0
    ops: Counter = Counter()
    inits = init_bytes = constant_bytes = 0
    for graph in all_graphs(model):
        for node in graph:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                constants += 1
                constant_bytes += constant_data_size(node)[1]
                continue
            nodes += 1
            ops[node.op_type] += 1
        for value in graph.initializers.values():
            inits += 1
            tensor = value.const_value
            if tensor is not None and tensor.dtype != ir.DataType.STRING:
                init_bytes += tensor.nbytes
    return ModelCounts(nodes, constants, inits, init_bytes, dict(ops), constant_bytes)


RUNTIME_DOMAIN = "com.microsoft"  # onnxruntime's contrib ops (and com.microsoft.nchwc, ...)


def runtime_op_counts(model: ir.Model, default_domain: Collection[str]) -> dict[str, int]:
    """The nodes of onnxruntime's own ops ``model`` holds, by op type (``domain.op`` outside
    the default domain), most first: its contrib ops, and ``default_domain``'s (the ops it
    registers in the default domain, where onnx has none)."""
    found: Counter = Counter()
    for graph in all_graphs(model):
        for node in graph:
            domain = node.domain
            if domain == RUNTIME_DOMAIN or domain.startswith(RUNTIME_DOMAIN + "."):
                found[f"{domain}.{node.op_type}"] += 1
            elif domain in ("", "ai.onnx") and node.op_type in default_domain:
                found[node.op_type] += 1
    return dict(found.most_common())


def runtime_ops_line(counts: dict[str, int], limit: int = 6) -> str:
    """``runtime ops  18 nodes of onnxruntime's own ops, kept: MatMulNBits x11, ...``: a model's
    onnxruntime ops, the most frequent ``limit`` by name (com.microsoft's without it)."""
    names = [f"{op.removeprefix(RUNTIME_DOMAIN + '.')} x{n}"
             for op, n in list(counts.items())[:limit]]
    more = f" and {len(counts) - limit} more" if len(counts) > limit else ""
    return (f"runtime ops  {sum(counts.values())} nodes of onnxruntime's own ops, kept: "
            f"{', '.join(names)}{more}")


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


@dataclass(kw_only=True)
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
    unneeded_nodes: int = 0  # constant nodes whose results nothing needed: pruned, not computed
    declined: dict[str, int] = field(default_factory=dict)
    declined_nodes: list[dict[str, str]] = field(default_factory=list)
    rule_hits: dict[str, int] = field(default_factory=dict)
    pattern_hits: dict[str, int] = field(default_factory=dict)
    patterns_rejected: dict[str, int] = field(default_factory=dict)
    cleanup_hits: dict[str, int] = field(default_factory=dict)
    # what each pattern and cleanup did: {rule, kind, hits, nodes_removed, modules}, the rules
    # that removed most first (rewrites() builds it)
    rewrites: list[dict[str, Any]] = field(default_factory=list)
    skipped_steps: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dynamic_shapes: list[dict[str, str]] = field(default_factory=list)
    output: str | None = None
    output_bytes: int | None = None
    external_data: str | None = None
    ops_before: dict[str, int] = field(default_factory=dict)
    ops_after: dict[str, int] = field(default_factory=dict)
    leftovers: list[dict] = field(default_factory=list)  # by module: leftovers.group_leftovers
    folded_regions: list[dict] = field(default_factory=list)  # leftovers.folded_regions
    options: dict[str, Any] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase, in run order
    check: dict[str, Any] | None = None  # the --check comparison's to_dict()
    constant_nodes_before: int = 0  # Constant nodes, not counted in nodes_before/after
    constant_nodes_after: int = 0
    constant_bytes_before: int = 0  # their values' bytes: weights too (strings not counted)
    constant_bytes_after: int = 0
    latency: dict[str, Any] | None = None  # --latency: LatencyResult.to_dict()
    inputs: dict[str, list[int | str | None]] = field(default_factory=dict)  # declared, after
    inputs_fixed: str = ""  # what --input-shape bound: "batch=1, seq=128 fixed on ..."
    # --target-opset: opsets, ops expanded from their bodies, functions inlined, folded first
    conversion: dict[str, Any] | None = None
    # exporter metadata (default; --keep-metadata: None): {mode, entries, bytes} dropped
    metadata_stripped: dict[str, Any] | None = None
    # the command line's: opset, inputs, outputs, parameters, file, compute, before and after
    signature: dict[str, Any] | None = None
    # nodes of onnxruntime's own ops in the output (com.microsoft.*, and its default-domain
    # ones onnx has no schema of), by op: what binds the model to onnxruntime
    runtime_ops: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(cls, source: str | None, before: ModelCounts, after: ModelCounts,
              stats: FoldStats, seconds: float) -> Report:
        """The report of a run of ``seconds`` from the model's counts ``before`` and
        ``after`` it and the totals of its passes."""
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
            function_constants=stats.function_constants, unneeded_nodes=stats.unneeded,
            declined=dict(stats.declined),
            declined_nodes=[{"node": n, "op": o, "kind": r.kind.value, "reason": str(r)}
                            for n, o, r in stats.declined_nodes],
            rule_hits=dict(sorted(stats.rule_hits.items(), key=lambda kv: -kv[1])),
            pattern_hits=dict(stats.pattern_hits), patterns_rejected=dict(stats.rejected_patterns),
            cleanup_hits=dict(stats.cleanup_hits), rewrites=rewrites(stats),
            skipped_steps=list(stats.skipped_steps),
            ops_before=dict(before.ops), ops_after=dict(after.ops),
            constant_nodes_before=before.constants, constant_nodes_after=after.constants,
            constant_bytes_before=before.constant_bytes,
            constant_bytes_after=after.constant_bytes,
            inputs_fixed=stats.inputs_fixed.describe())

    @property
    def weight_bytes(self) -> tuple[int, int]:
        """The model's constant data before and after: its initializers and its Constant
        nodes' values (a fold makes initializers of Constant nodes: counting initializers
        alone, a model whose weights an exporter left in Constant nodes grew)."""
        return (self.initializer_bytes_before + self.constant_bytes_before,
                self.initializer_bytes_after + self.constant_bytes_after)

    def __repr__(self) -> str:
        return (f"Report(nodes {self.nodes_before} -> {self.nodes_after}, initializers "
                f"{_mib(self.initializer_bytes_before)} -> "
                f"{_mib(self.initializer_bytes_after)}, {self.seconds:.2f} s)")

    def op_rows(self) -> list[OpRow]:
        """The per-op rows, most changed first."""
        return op_rows(self.ops_before, self.ops_after)

    def table(self) -> str:
        """The per-op table as text: op, before, after, delta, and a total row."""
        return format_table(self.op_rows())

    def explain(self) -> str:
        """Every constant-foldable node left unfolded, grouped by reason, with examples, and
        the shape scaffolding that dynamic dims keep."""
        if not self.declined_nodes and not self.patterns_rejected and not self.dynamic_shapes:
            return "every constant-foldable node was folded"
        lines = []
        if self.leftovers:
            lines.append("stayed, by module:")
            lines += [f"  {line}" for line in leftover_lines(self.leftovers)]
        groups: dict[str, list[dict[str, str]]] = {}
        for item in self.declined_nodes:
            groups.setdefault(item["kind"], []).append(item)
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
        return "\n".join(map(printable, lines))  # names escaped: each stays on its line

    def to_dict(self) -> dict:
        """The JSON report (docs/report-json.md): ``schema``, ``versions``, ``ops`` (the
        per-op table) and every field of the report but the raw op counts."""
        data = asdict(self)
        del data["ops_before"], data["ops_after"]
        return {"schema": SCHEMA_VERSION, "versions": versions(),
                "ops": [row.to_dict() for row in self.op_rows()], **data}

    def to_json(self) -> str:
        """The report as the ``--json`` file's text (``onnxfold/report.schema.json``)."""
        return json.dumps(self.to_dict(), indent=2)

    def nodes_line(self) -> str:
        """``nodes 1031 -> 371  (Constant nodes not counted: 378 -> 0)``: the one node count
        of the summary, the JSON, the HTML and the README."""
        constants = (f"  (Constant nodes not counted: {self.constant_nodes_before} -> "
                     f"{self.constant_nodes_after})"
                     if self.constant_nodes_before or self.constant_nodes_after else "")
        return f"nodes        {self.nodes_before} -> {self.nodes_after}{constants}"

    def summary(self, table: bool = True, verbose: bool = False) -> str:
        """What ``onnxfold optimize`` prints: the per-op table (``table``), then what a user
        decides on (nodes, weights, time, what was not folded and what stayed, where it was
        written); ``verbose`` adds how the run went (fold counts, pool, phases, rewrites)."""
        seconds = max(self.seconds, sum(self.phases.values()))
        apart = {name: self.phases[name] for name in _APART if self.phases.get(name)}
        own = f"{seconds - sum(apart.values()):.2f} s" + (
            "".join(f", {name} {sec:.1f} s" for name, sec in apart.items()) +
            f" ({seconds:.1f} s in all)" if apart else "")
        lines = [self.nodes_line(),
                 f"weights      {_mib(self.weight_bytes[0])} -> {_mib(self.weight_bytes[1])}",
                 f"time         {own}"]
        if self.options.get("input_shapes"):
            shapes = ", ".join(f"{printable(name)} [{','.join(str(d) for d in dims)}]"
                               for name, dims in self.inputs.items())
            lines.append(f"inputs       {shapes}" + (f" ({self.inputs_fixed})"
                                                    if self.inputs_fixed else ""))
        if verbose:
            lines[1] += f"  ({self.new_initializers} new initializers)"
            lines[2] += f" ({self.rounds} rounds" + "".join(
                f", {name} {sec:.2f}" for name, sec in self.phases.items()) + ")"
            lines.insert(1, f"folded       {self.folded_nodes} nodes: {self.folded_native} "
                            f"native, {self.folded_fallback} via onnxruntime in "
                            f"{self.fallback_sessions} sessions" + (
                                f"; {self.unneeded_nodes} that nothing read were removed "
                                "without being computed" if self.unneeded_nodes else ""))
            lines.append(f"pool peak    {_mib(self.pool_peak_bytes)}" + (
                f" (spilled {self.pool_spilled} buffers, {_mib(self.pool_spilled_bytes)}, "
                "to stay under the memory limit)" if self.pool_spilled else ""))
            rewrites = {**self.pattern_hits, **self.cleanup_hits}
            if rewrites:
                lines.append("rewrites     " + ", ".join(f"{k} {v}" for k, v in rewrites.items()))
        elif self.pool_spilled:
            lines.append(f"memory       spilled {_mib(self.pool_spilled_bytes)} to disk to stay "
                         "under the memory limit")
        if self.folded_in_functions:
            lines.insert(1, f"functions    {self.folded_in_functions} folded in local function "
                            f"bodies ({self.function_constants} Constant nodes written)")
        if self.declined:
            reasons = ", ".join(f"{r}: {n}" for r, n in sorted(self.declined.items()))
            lines.append(f"not folded   {sum(self.declined.values())} ({reasons}; --explain "
                         "says why)")
        inputs = {d for dims in self.inputs.values() for d in dims if isinstance(d, str)}
        shown = leftover_lines(self.leftovers[:LEFTOVER_LINES], short=not verbose,
                               inputs=inputs)
        for i, line in enumerate(shown):
            lines.append(f"{'stayed' if i == 0 else '':13}{line}")
        if len(self.leftovers) > len(shown):
            lines.append(f"{'':13}... and {len(self.leftovers) - len(shown)} more modules "
                         "(--explain)")
        if self.conversion is not None:
            lines.append(conversion_line(self.conversion))
        if self.metadata_stripped is not None and self.metadata_stripped["entries"]:
            lines.append(metadata_line(self.metadata_stripped))
        lines.extend(f"skipped      {step}" for step in self.skipped_steps)
        if self.runtime_ops:
            lines.append(runtime_ops_line(self.runtime_ops))
        lines.extend(f"warning      {warning}" for warning in self.warnings)
        if self.output:
            data = self.external_data  # shown as the output is (its directory's file)
            if data and os.path.dirname(data) == os.path.dirname(os.path.abspath(self.output)):
                data = os.path.join(os.path.dirname(self.output), os.path.basename(data))
            where = f" + {data}" if data else ""
            lines.append(f"wrote        {self.output}{where} ({_mib(self.output_bytes or 0)})")
        # a name stays on its line; a list wraps under its 13-character label (a path is one
        # record, whole)
        lines = [part for line in lines for part in (
            [printable(line)] if line.startswith("wrote ") else
            wrapped(line[:13], printable(line[13:])))]
        return "\n".join(self._table_first(lines) if table else lines)

    def _table_first(self, lines: list[str]) -> list[str]:
        """``lines`` after the per-op table, or after one line where no op's count changed (a
        table of zeros says nothing)."""
        if self.ops_before == self.ops_after and self.ops_before:
            kinds = len(self.ops_after)
            return [f"op table     every op's count as it was ({self.nodes_after} nodes of "
                    f"{kinds} op type{'s' if kinds != 1 else ''}; --json lists them)", *lines]
        if self.ops_before or self.ops_after:
            return [self.table(), "", *lines]
        return lines


def rewrites(stats: FoldStats) -> list[dict[str, Any]]:
    """What each pattern (``kind`` "pattern") and cleanup ("cleanup") of a run did: hits, the
    nodes it removed net (Constant nodes not counted, as everywhere in the report), and a
    pattern's hits by the module path of the node it matched at (layer indices as ``*``);
    most nodes removed first."""
    rows = [{"rule": rule, "kind": kind, "hits": hits,
             "nodes_removed": stats.rule_removed.get(rule, 0),
             "modules": _by_pattern(stats.pattern_modules.get(rule, {}))}
            for kind, hits_of in (("pattern", stats.pattern_hits),
                                  ("cleanup", stats.cleanup_hits))
            for rule, hits in hits_of.items()]
    return sorted(rows, key=lambda row: (-row["nodes_removed"], -row["hits"], row["rule"]))


def _by_pattern(modules: dict[str, int]) -> dict[str, int]:
    """Hits by module, layer indices as ``*`` (the 12 layers of an encoder are one entry, as
    in ``leftovers``), most first."""
    grouped: Counter = Counter()
    for module, hits in modules.items():
        grouped[pattern(module)] += hits
    return dict(sorted(grouped.items(), key=lambda kv: (-kv[1], kv[0])))


def metadata_line(stripped: dict[str, Any]) -> str:
    """The ``metadata`` line: what ``--strip-metadata`` dropped, the exporter's entries and,
    with ``=all``, onnxfold's own records apart (they are not the exporter's)."""
    own = stripped.get("own", 0)
    exporter = stripped["entries"] - own
    what = [f"{exporter} entries of exporter node and value metadata"] if exporter else []
    what += [f"{own} of onnxfold's own records"] if own else []
    why = "--strip-metadata=all" if stripped["mode"] == "all" else \
        "stack traces, module paths; --keep-metadata keeps them"
    return f"metadata     {_mib(stripped['bytes'])} saved: {' and '.join(what)} dropped ({why})"


def conversion_line(conversion: dict[str, Any]) -> str:
    """``opset        20 -> 17 (Gelu x2 expanded ...)``: what ``--target-opset`` did."""
    done = [f"{op} x{n}" for op, n in sorted(conversion["expanded"].items())]
    parts = [f"folded at opset {conversion['from']} first, for the constants the converter "
             "needs"] if conversion.get("folded_first") else []
    if done:
        parts.append(f"{', '.join(done)} expanded into their ONNX function bodies")
    if conversion["inlined_functions"]:
        parts.append("local functions inlined to convert: " +
                     ", ".join(conversion["inlined_functions"]))
    detail = f" ({'; '.join(parts)})" if parts else ""
    return f"opset        {conversion['from']} -> {conversion['to']}{detail}"


def versions() -> dict[str, str | None]:
    """The installed onnxfold, onnx, onnx-ir and onnxruntime versions (None if absent)."""
    found: dict[str, str | None] = {}
    for name in ("onnxfold", "onnx", "onnx-ir", "onnxruntime"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def options_dict(options: Any) -> dict[str, Any]:
    """A dataclass of options (``FoldOptions``) as JSON values: sets and tuples as sorted or
    ordered lists."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(options):
        out[f.name] = _json_value(getattr(options, f.name))
    return out


def _json_value(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return sorted(_json_value(v) for v in value)
    if isinstance(value, tuple | list):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


