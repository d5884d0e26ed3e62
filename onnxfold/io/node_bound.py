"""A bound on the nodes of an input model, checked on the proto before anything else reads it.

onnxfold's cost is linear in a model's nodes, at a high constant: onnx-ir's objects, each
pass's walk, shape inference and the serializer come to about 0.55 ms and 3.1 KB per node
from reading to writing (a chain of Relu nodes, 100,000 -> 67 s, 367 MB; 200,000 -> 115 s,
678 MB, measured on a shared 2-core machine under load, where unloaded runs take about a
quarter of that time). A node count is thus a bound on time and memory: a 4 MB file holds
2,000,000 empty nodes (63 s and 2.3 GB before this bound, past onnx's checker with
``--skip-check``). The largest real models have a few hundred thousand nodes; ``MAX_NODES``
(500,000: about 1.5 GB) admits them and refuses more with one line naming the bound;
``ONNXFOLD_MAX_NODES`` raises (or lowers) it.

Nodes are counted in the main graph, every subgraph and every local function's body, as the
file holds them (a function called many times counts once: its expansion is bounded apart,
``expansion.py``).
"""

from __future__ import annotations

import os

import onnx

from onnxfold.errors import InputError

MAX_NODES = 500_000
MAX_NODES_ENV = "ONNXFOLD_MAX_NODES"


def max_nodes() -> int:
    """The bound: ``ONNXFOLD_MAX_NODES`` when set (a positive integer), else ``MAX_NODES``."""
    text = os.environ.get(MAX_NODES_ENV, "").strip()
    if not text:
        return MAX_NODES
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise InputError(f"{MAX_NODES_ENV}={text!r}: not a positive whole number of nodes")
    return int(text)


def count_nodes(proto: onnx.ModelProto, limit: int) -> int:
    """Nodes of ``proto`` (graphs, subgraphs, function bodies); the count stops once it is
    over ``limit``."""
    total = len(proto.graph.node) + sum(len(f.node) for f in proto.functions)
    if total > limit:
        return total  # at a glance, without walking the nodes for subgraphs
    stack = [proto.graph.node, *(f.node for f in proto.functions)]
    while stack:
        for node in stack.pop():
            for attr in node.attribute:
                graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else \
                    attr.graphs if attr.type == onnx.AttributeProto.GRAPHS else []
                for graph in graphs:
                    total += len(graph.node)
                    if total > limit:
                        return total
                    stack.append(graph.node)
    return total


def refuse_too_many_nodes(proto: onnx.ModelProto, label: str) -> None:
    """Raise InputError when ``proto`` has more nodes than the bound (module docstring)."""
    limit = max_nodes()
    if count_nodes(proto, limit) > limit:
        raise InputError(f"{label}: more than {limit:,} nodes, the bound on a model's size "
                         f"(set {MAX_NODES_ENV}=N to raise it)")
