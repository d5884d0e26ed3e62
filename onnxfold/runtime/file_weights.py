"""Weights only a runtime fold reads stay in the model's file until the fold reads them.

A LoRA merge ``Gemm(A, B, Transpose(W), alpha)`` reads the base weight through what an
exporter put in front of it (a ``Transpose`` of the file's ``W``, a ``Cast``). The compile-time
fold would compute ``Transpose(W)`` once and keep it in memory for every later fold: a copy of
every merged base weight, resident for the Session's life (344 MiB of a 380 MiB decoder). A
weight that only runtime-fold nodes read, through compile-time nodes or directly, is instead
held as a graph input while the model is folded (:func:`held_as_inputs`): nothing computes from
it at compile time, the split moves the nodes between it and the merge into the runtime fold,
and each fold reads it from the file's memory mapping, whose pages the Session gives back
after the fold (``onnxfold.io.mapped.drop_resident_pages``). A weight any other node reads (a
tied embedding, a base shared with the entry) is folded as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Sequence

import onnx_ir as ir

from onnxfold.analysis.constness import OpFacts, plan_graph, runtime_constant_nodes
from onnxfold.ir.graph import subgraphs


def runtime_only_weights(model: ir.Model, runtime_inputs: Sequence[ir.Value], facts: OpFacts,
                         min_bytes: int) -> list[ir.Value]:
    """The initializers of ``model``'s main graph of ``min_bytes`` or more whose every reader,
    following compile-time nodes, is a runtime-constant node (one that reads a runtime input:
    the runtime fold computes it)."""
    graph = model.graph
    plan = plan_graph(graph, model.ir_version, facts=facts)
    runtime = set(runtime_constant_nodes(graph, runtime_inputs, plan.constant, facts=facts))
    foldable = set(plan.foldable)
    return [value for value in graph.initializers.values()
            if value.const_value is not None and value.const_value.nbytes >= min_bytes
            and _only_runtime_reads(value, graph, runtime, foldable)]


def _only_runtime_reads(value: ir.Value, graph: ir.Graph, runtime: Collection[ir.Node],
                        foldable: Collection[ir.Node]) -> bool:
    """Whether every path from ``value`` ends in a runtime-constant node of ``graph``."""
    todo, seen, reached = [value], set(), False
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if current in graph.outputs:
            return False
        for use in current.uses():
            node = use.node
            if node.graph is not graph or subgraphs(node):
                return False  # read inside a subgraph, or by a node with one: left as it is
            if node in runtime:
                reached = True
            elif node in foldable:
                todo.extend(node.outputs)
            else:
                return False  # a dynamic node reads it: the entry needs it
    return reached


@contextlib.contextmanager
def held_as_inputs(model: ir.Model, values: Sequence[ir.Value]) -> Iterator[None]:
    """Within the block, ``values`` (initializers of the main graph) are graph inputs without
    data, so that nothing folds from them; restored as the initializers they were after it."""
    graph = model.graph
    held = []
    for value in values:
        tensor = value.const_value
        assert value.name is not None and tensor is not None  # initializers have both
        graph.initializers.pop(value.name)
        value.const_value = None
        graph.inputs.append(value)
        held.append((value, tensor))
    try:
        yield
    finally:
        for value, tensor in held:
            if value in graph.inputs:
                graph.inputs.remove(value)
            value.const_value = tensor
            graph.register_initializer(value)
