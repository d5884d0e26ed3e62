"""``onnxfold inspect``: what a model holds and how much of it is still constant-foldable."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import onnx_ir as ir

from onnxfold.analysis import plan_graph
from onnxfold.io import load_model
from onnxfold.report import model_counts


def foldable_ops(model: ir.Model, shape_folding: bool = True) -> Counter:
    """Op-type histogram of the nodes onnxfold would still try to fold (all graphs)."""
    ops: Counter = Counter()
    for graph in model.graphs():
        for node in plan_graph(graph, model.ir_version, shape_folding=shape_folding).foldable:
            ops[node.op_type] += 1
    return ops


def inspect_model(path: str | os.PathLike, check: bool = True) -> dict:
    """A dict of facts about the model, with a human-readable ``text`` entry."""
    from onnxfold.shapes import infer_shapes

    model = load_model(path, check=check)
    counts = model_counts(model)
    infer_shapes(model)
    foldable = foldable_ops(model)
    info: dict[str, Any] = {
        "path": os.fspath(path),
        "ir_version": model.ir_version,
        "opsets": {d or "ai.onnx": v for d, v in model.opset_imports.items()},
        "nodes": counts.nodes,
        "initializers": counts.initializers,
        "initializer_bytes": counts.initializer_bytes,
        "foldable_nodes": sum(foldable.values()),
        "foldable_by_op": dict(foldable.most_common()),
        "ops": dict(sorted(counts.ops.items(), key=lambda kv: -kv[1])),
    }
    opsets = ", ".join(f"{d} {v}" for d, v in info["opsets"].items())
    lines = [f"{info['path']}: IR {model.ir_version}, opsets {opsets}",
             f"nodes {counts.nodes}, initializers {counts.initializers} "
             f"({counts.initializer_bytes / 2**20:.1f} MiB)",
             f"constant-foldable nodes: {info['foldable_nodes']}"]
    lines += [f"  {op:24} {n}" for op, n in foldable.most_common()]
    info["text"] = "\n".join(lines)
    return info
