"""Whole-model cleanups run after folding: Identity removal, initializer deduplication and
the pruning of subgraph initializers that folding left unused."""

from __future__ import annotations

import hashlib
from collections import defaultdict

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import IdentityEliminationPass

from onnxfold.patterns import cleanup


@cleanup("remove_identity")
def remove_identity(model: ir.Model) -> int:
    """Identity nodes disappear (graph outputs keep their names)."""
    before = sum(1 for g in model.graphs() for n in g if n.op_type == "Identity")
    IdentityEliminationPass()(model)
    return before - sum(1 for g in model.graphs() for n in g if n.op_type == "Identity")


def _digest(tensor: ir.TensorProtocol) -> bytes:
    arr = tensor.numpy()
    data = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
    return hashlib.blake2b(memoryview(data.reshape(-1).view(np.uint8)), digest_size=32).digest()


@cleanup("dedupe_initializers")
def dedupe_initializers(model: ir.Model) -> int:
    """Identical initializers (same dtype, shape and bytes) become one; inputs are left alone.

    Only tensors that share dtype and shape with another are hashed, so most weights are never
    read.
    """
    removed = 0
    for graph in model.graphs():
        groups: dict[tuple, list[ir.Value]] = defaultdict(list)
        for value in graph.initializers.values():
            tensor = value.const_value
            if tensor is None or value in graph.inputs or value in graph.outputs \
                    or tensor.dtype == ir.DataType.STRING:
                continue
            groups[(tensor.dtype, tuple(tensor.shape.numpy()))].append(value)
        for members in groups.values():
            if len(members) < 2:
                continue
            seen: dict[bytes, ir.Value] = {}
            for value in members:
                key = _digest(value.const_value)
                keep = seen.setdefault(key, value)
                if keep is value:
                    continue
                value.replace_all_uses_with(keep)
                graph.initializers.pop(value.name)
                removed += 1
    return removed


@cleanup("prune_subgraph_initializers")
def prune_subgraph_initializers(model: ir.Model) -> int:
    """Initializers of subgraphs (Loop/If/Scan bodies) that nothing reads any more disappear.

    Folding a body's weight leaves the weight unused, and onnx-ir's unused-node pass only
    prunes the main graph's initializers: without this the body would keep both.
    """
    removed = 0
    for graph in model.graphs():
        if graph is model.graph:
            continue
        kept = set(graph.inputs) | set(graph.outputs)
        for value in list(graph.initializers.values()):
            if not value.uses() and value not in kept:
                graph.initializers.pop(value.name)
                removed += 1
    return removed
