"""``onnxfold inspect``: what a model holds and how much of it is still constant-foldable."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import onnx_ir as ir

from onnxfold.analysis.constness import OpFacts, plan_graph
from onnxfold.analysis.shapes import infer_shapes
from onnxfold.analysis.step_inputs import shared_dim_names
from onnxfold.analysis.symbolic import blocked_scaffolding, shape_values
from onnxfold.app.signature import one_model_lines, signature
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.errors import OnnxfoldError, one_line
from onnxfold.io import load_model
from onnxfold.ir.constants import source_array
from onnxfold.ir.graph import all_graphs, node_label
from onnxfold.pipeline.leftovers import group_leftovers, leftover_lines
from onnxfold.pipeline.report import model_counts


def foldable_ops(model: ir.Model, facts: OpFacts, shape_folding: bool = True) -> Counter:
    """Op-type histogram of the nodes onnxfold would still try to fold (all graphs), by the
    op facts of a catalogue."""
    ops: Counter = Counter()
    for graph in all_graphs(model):
        for node in plan_graph(graph, model.ir_version, shape_folding=shape_folding,
                               facts=facts).foldable:
            ops[node.op_type] += 1
    return ops


def inspect_model(path: str | os.PathLike, check: bool = True,
                  catalogue: Catalogue | None = None) -> dict:
    """A dict of facts about the model, with a human-readable ``text`` entry; ``catalogue``:
    the rules whose op facts say what still folds (None: the installed rules)."""
    catalogue = load_catalogue() if catalogue is None else catalogue
    model = load_model(path, check=check)
    counts = model_counts(model)
    infer_shapes(model)
    foldable = foldable_ops(model, catalogue)
    static_shapes, blocked = _shape_scaffolding(model, catalogue)
    foldable.update(static_shapes)
    info: dict[str, Any] = {
        "path": os.fspath(path),
        "ir_version": model.ir_version,
        "opsets": {d or "ai.onnx": v for d, v in model.opset_imports.items()},
        "nodes": counts.nodes,  # Constant nodes not counted (as everywhere in reports)
        "constant_nodes": counts.constants,
        "initializers": counts.initializers,
        "initializer_bytes": counts.initializer_bytes,
        "foldable_nodes": sum(foldable.values()),
        "foldable_by_op": dict(foldable.most_common()),
        "ops": dict(sorted(counts.ops.items(), key=lambda kv: -kv[1])),
        "dynamic_shape_nodes": [{"node": node_label(n), "op": n.op_type,
                                 "blocked_by": "; ".join(dims)} for n, dims in blocked],
    }
    info["blocked_by_module"] = group_leftovers(model, [], info["dynamic_shape_nodes"])
    opsets = ", ".join(f"{d} {v}" for d, v in info["opsets"].items())
    lines = [f"{info['path']}: IR {model.ir_version}, opsets {opsets}",
             f"nodes {counts.nodes} (and {counts.constants} Constant nodes, not counted), "
             f"initializers {counts.initializers} "
             f"({counts.initializer_bytes / 2**20:.1f} MiB)",
             f"constant-foldable nodes: {info['foldable_nodes']}"]
    lines += [f"  {op:24} {n}" for op, n in foldable.most_common()]
    if blocked:
        lines.append(f"shape nodes blocked by dynamic dims: {len(blocked)} (--input-shape "
                     "fixes them)")
        lines += [f"  {line}" for line in leftover_lines(info["blocked_by_module"])]
        lines.append("  nodes:")
        lines += [f"    {n.op_type} {node_label(n)}: {'; '.join(dims)}"
                  for n, dims in blocked[:10]]
        if len(blocked) > 10:
            lines.append(f"    ... and {len(blocked) - 10} more")
    try:
        info["signature"] = _signature(path, check, catalogue)
        lines += one_model_lines(info["signature"])
    except OnnxfoldError as e:  # what the fold refuses, inspect still describes
        info["signature"] = None
        lines.append(f"signature    not made: {one_line(e)}")
    info["text"] = "\n".join(lines)
    return info


def _signature(path: str | os.PathLike, check: bool, catalogue: Catalogue) -> dict[str, Any]:
    """What ``optimize``'s signature says of its input: the facts, and FLOPs at the first input
    set a check would use, counted as ``optimize`` counts it: the model is folded in memory,
    nothing written."""
    from onnxfold.check.running.options import CompareOptions
    from onnxfold.pipeline.optimizer import optimize

    result = optimize(path, check=check, catalogue=catalogue)
    assert result.signature is not None
    return signature(result.signature, result.signature.before["file_bytes"], None,
                     CompareOptions())


def _shape_scaffolding(model: ir.Model, catalogue: Catalogue
                      ) -> tuple[Counter, list[tuple[ir.Node, list[str]]]]:
    """Shape nodes static for every value of the dynamic dims (by op), and those blocked."""
    static: Counter = Counter()
    steps = catalogue.shape_steps
    for graph in all_graphs(model):
        planned = set(plan_graph(graph, model.ir_version, facts=catalogue).foldable)
        values = shape_values(graph, source_array, shared_dim_names(model), steps=steps)
        for node in graph:
            known = values.get(node.outputs[0]) if len(node.outputs) == 1 else None
            if known is not None and known.is_constant and node not in planned and \
                    node.op_type != "Constant":
                static[node.op_type] += 1
    return static, blocked_scaffolding(model, source_array, steps)
