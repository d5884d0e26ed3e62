"""Nodes whose form at the target opset is the form they have: kept out of onnx's converter.

onnx's version converter has no adapter for some steps down even where a node means at the
older opset exactly what it means now: a Pad without ``axes`` (Pad 18 added the input, 19 the
``wrap`` mode) is a Pad of opset 13; a Split given its sizes as an input is a Split of opset
13 (Split 18 added ``num_outputs``, which a static dim turns into the sizes). The converter
stops there ("No Adapter To Version $17 for Pad"). Such a node is put in a private domain while
the converter runs (it passes a domain it does not know through untouched) and back into the
default domain after it; the conversion's check then holds it against its schema at the
target, as every other node.

Each rule says when a node keeps its meaning from one opset to an older one, and may first
rewrite it into a form that means the same at both (Split's sizes as a constant input).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.ir.graph import all_graphs
from onnxfold.pipeline.function_ops import since

KEPT_DOMAIN = "onnxfold.kept"


@dataclass(frozen=True)
class KeptForm:
    """``op`` from opset ``since`` keeps its meaning down to opset ``oldest`` where ``keeps``
    holds (after it rewrote the node, in place, into a form valid at both)."""

    op: str
    since: int
    oldest: int
    keeps: Callable[[ir.Node, Callable[[str], str]], bool]


def _pad_keeps(node: ir.Node, fresh: Callable[[str], str]) -> bool:
    """A Pad without ``axes`` and without the ``wrap`` mode is a Pad of opset 13."""
    mode = node.attributes.get("mode")
    return (len(node.inputs) < 4 or node.inputs[3] is None) and \
        (mode is None or mode.value != "wrap")


def _split_keeps(node: ir.Node, fresh: Callable[[str], str]) -> bool:
    """A Split given its sizes as an input is a Split of opset 13; ``num_outputs`` becomes the
    sizes where the split dim is static (Split 18's chunks: all of ceil(dim / n) but the
    last)."""
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        return "num_outputs" not in node.attributes
    count = node.attributes.get("num_outputs")
    source = node.inputs[0]
    if count is None or source is None or source.shape is None:
        return False
    axis = node.attributes["axis"].value if "axis" in node.attributes else 0
    dim = source.shape[axis] if -source.shape.rank() <= axis < source.shape.rank() else None
    if not isinstance(dim, int):
        return False
    n = count.value
    chunk = -(-dim // n)
    sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
    if min(sizes) < 0 or len(node.outputs) != n:
        return False
    constant = ir.Node("", "Constant", [], attributes=[ir.AttrTensor(
        "value", ir.tensor(np.array(sizes, np.int64), name=fresh("split_sizes")))],
        name=fresh(f"{node.name or 'Split'}/sizes"))
    constant.outputs[0].name = fresh("split_sizes")
    assert node.graph is not None
    node.graph.insert_before(node, constant)
    del node.attributes["num_outputs"]
    node.resize_inputs(2)
    node.replace_input_with(1, constant.outputs[0])
    return True


RULES = (KeptForm("Pad", 18, 13, _pad_keeps), KeptForm("Split", 18, 13, _split_keeps))


def keep_forms(model: ir.Model, current: int, target: int, fresh: Callable[[str], str]) -> int:
    """Put every node of the main graph and its subgraphs that a rule keeps from ``current``
    down to ``target`` in :data:`KEPT_DOMAIN`; the number put there."""
    kept = 0
    for graph in all_graphs(model):
        for node in list(graph):
            if node.domain not in ("", "ai.onnx"):
                continue
            rule = next((r for r in RULES if r.op == node.op_type), None)
            form = since(node.op_type, current)
            if rule is None or form is None or not rule.since <= form or target < rule.oldest \
                    or since(node.op_type, target) is None:
                continue
            if form > rule.since and not _same_schemas(node.op_type, rule.since, form):
                continue
            if rule.keeps(node, fresh):
                node.domain = KEPT_DOMAIN
                kept += 1
    if kept:
        model.opset_imports[KEPT_DOMAIN] = 1
    return kept


def restore_kept(model: onnx.ModelProto) -> None:
    """Put the nodes :func:`keep_forms` set aside back into the default domain."""
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        for node in graph.node:
            if node.domain == KEPT_DOMAIN:
                node.domain = ""
            for attr in node.attribute:
                if attr.HasField("g"):
                    stack.append(attr.g)
                stack.extend(attr.graphs)
    kept = [o for o in model.opset_import if o.domain == KEPT_DOMAIN]
    for entry in kept:
        model.opset_import.remove(entry)


def _same_schemas(op: str, older: int, newer: int) -> bool:
    """Whether ``op``'s forms from ``older`` to ``newer`` differ in their types only: the same
    attributes and inputs (Pad 21 and later added types; 19 added a mode, checked apart)."""
    first = onnx.defs.get_schema(op, older, "")
    last = onnx.defs.get_schema(op, newer, "")
    return set(first.attributes) == set(last.attributes) and \
        [i.name for i in first.inputs] == [i.name for i in last.inputs]
