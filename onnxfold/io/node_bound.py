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
from collections.abc import Iterable

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


def refuse_too_many_nodes(proto: onnx.ModelProto, label: str) -> list[onnx.GraphProto]:
    """Raise InputError when ``proto`` has more nodes than the bound (module docstring); else
    return its main graph and every subgraph in it, in ``graph_protos``' order (depth first),
    found by the same walk. The count stops as soon as it is over the bound."""
    limit = max_nodes()
    total = len(proto.graph.node) + sum(len(f.node) for f in proto.functions)
    if total > limit:  # at a glance, without walking the nodes for subgraphs
        raise _too_many(label, limit)
    graphs: list[onnx.GraphProto] = []
    stack = [proto.graph]
    while stack:
        graph = stack.pop()
        graphs.append(graph)
        total = _push_subgraphs(graph.node, stack, total, limit, label)
    bodies = [f.node for f in proto.functions]  # their subgraphs count, and are not listed
    while bodies:
        inner: list[onnx.GraphProto] = []
        total = _push_subgraphs(bodies.pop(), inner, total, limit, label)
        bodies.extend(graph.node for graph in inner)
    return graphs


def _push_subgraphs(nodes: Iterable[onnx.NodeProto], stack: list[onnx.GraphProto],
                    total: int, limit: int, label: str) -> int:
    """Push the graphs in ``nodes``' attributes on ``stack`` (the first one on top), adding
    their nodes to ``total``; the new total, or InputError once it is over ``limit``."""
    found: list[onnx.GraphProto] = []
    for node in nodes:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found.append(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                found.extend(attr.graphs)
    for graph in found:
        total += len(graph.node)
        if total > limit:
            raise _too_many(label, limit)
    stack.extend(reversed(found))
    return total


def _too_many(label: str, limit: int) -> InputError:
    return InputError(f"{label}: more than {limit:,} nodes, the bound on a model's size "
                      f"(set {MAX_NODES_ENV}=N to raise it)")
