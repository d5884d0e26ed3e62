"""One name per value in the whole model, where ONNX scopes names per graph.

ONNX lets a subgraph define a name that another graph defines too, where the other does not
see it: sibling If branches each define ``logits``, and optimum's merged decoders name an If's
outputs and its branches' values alike (``present.0.decoder.key``); a subgraph's input or
initializer may shadow any outer name. onnxruntime resolves each name in its own graph, and so
does onnx-ir, which reads every reference as the value it means, but for one case
(:func:`outer_values_over_fed_initializers`): a subgraph's initializer named as a value of the
enclosing scopes that any subgraph of its node reads. onnxfold's passes key what
they learn by name across the whole model (shape inference's results, provenance, the rewrite
log), where two values of one name would take each other's facts: the constant
``[0, 4, 1, 16]`` of a merged decoder's with-past branch became the declared shape of the
other branch's computed ``present.0.encoder.key``.

So, once the model is read, a value of a subgraph whose name an enclosing graph, or a graph
read before it, already uses is renamed with the allocator's suffix (``__onnxfoldN``): every
reference follows, since onnx-ir holds values, not names. A subgraph's inputs and outputs bind
by position, and the main graph keeps every name, so nothing a runtime or a client reads
changes; a model without such a name is left as it was.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxfold.ir.edits import names_for
from onnxfold.ir.graph import all_graphs, captured_values, subgraphs


def outer_values_over_fed_initializers(model: ir.Model) -> int:
    """Make each subgraph initializer that onnxruntime does not read, read as it does; how
    many.

    onnxruntime runs a node's subgraph with every value of the enclosing scopes that any of
    the node's subgraphs reads (the node's implicit inputs) fed by name, and a value fed takes
    the place of an initializer of its name: an If whose else branch reads the main graph's
    ``k`` runs a then branch holding an initializer ``k`` of its own with the main graph's
    ``k`` (measured at levels disable and all; without the else branch's read, the then
    branch reads its own). Such an initializer's readers read the outer value instead, and it
    goes, where the two have one type and shape as far as the outer value's are known (else it
    is left, and renamed apart below).
    """
    bound = 0
    for graph in all_graphs(model):
        for node in graph:
            inner = subgraphs(node)
            if not inner:
                continue
            fed = {str(v.name): v for v in captured_values(node) if v.name}
            for sub in inner:
                for name in [n for n in sub.initializers if n in fed]:
                    own, outer = sub.initializers[name], fed[name]
                    if own.is_graph_input() or outer.type not in (None, own.type) or \
                            outer.shape not in (None, own.shape):
                        continue
                    own.replace_all_uses_with(outer, replace_graph_outputs=True)
                    sub.initializers.pop(name)
                    bound += 1
    return bound


def rename_shadowing_values(model: ir.Model) -> int:
    """Give each value of ``model``'s subgraphs that shares a name with a value of the main
    graph or of a subgraph before it (in :func:`all_graphs`' order) a fresh name; how many
    were renamed."""
    graphs = all_graphs(model)
    if len(graphs) == 1:
        return 0
    seen: set[str] = set()
    renamed = 0
    for graph in graphs:
        mine: dict[str, ir.Value] = {}
        for value in (*graph.inputs, *graph.initializers.values(),
                      *(v for node in graph for v in node.outputs)):
            if value.name:
                mine.setdefault(value.name, value)
        for name, value in mine.items():
            if name in seen:
                name = value.name = names_for(model).fresh(name)
                renamed += 1
            seen.add(name)
    return renamed


__all__ = ["outer_values_over_fed_initializers", "rename_shadowing_values"]
