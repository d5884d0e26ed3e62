"""What a model computes, counted by ONNX shape inference at the bound input shapes: the
signature's count where the fold's shapes do not say every shape a costed node reads
(``signature.compute``: a Conv's spatial dims, a TorchScript export's attention shapes left to
Shape, Gather and Concat chains), as it counted every model before issue 66.

The shapes of every value come from ONNX shape inference on the model with its inputs' dims
bound (``analysis.shapes``: weights left out, data propagation bounded); the formula of each
kind is :func:`~onnxfold.signature.compute.formula`'s.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import onnx
import onnx_ir as ir

from onnxfold.analysis.dim_algebra import expression_value
from onnxfold.analysis.expansion import inference_expands_functions
from onnxfold.analysis.shapes import inferred_types, serialize_light
from onnxfold.declare.costs import OpCost
from onnxfold.ir.long_texts import LONG_TEXT
from onnxfold.signature.compute import Compute, formula


def compute(model: ir.Model, inputs: Mapping[str, Sequence[int]],
            costs: Mapping[tuple[str, str], OpCost],
            known: Mapping[str, onnx.TypeProto] | None = None) -> Compute:
    """The main graph's compute with each graph input of ``inputs`` at that shape; ``costs``
    by (domain, op type). ``known``: static types of values of the same name in a model that
    computes the same (the folded model's, for the original: onnx's inference cannot follow
    the shape arithmetic a fold computed, a ``ConstantOfShape`` into a ``Where``)."""
    return compute_light(light_proto(model), inference_expands_functions(model), inputs, costs,
                         known)


def light_proto(model: ir.Model) -> onnx.ModelProto:
    """``model`` serialized without its weights (``analysis.shapes.serialize_light``) and
    without its long texts (:func:`texts_aside`): what ONNX's inference reads."""
    with texts_aside(model):
        return serialize_light(model)


def compute_light(light: onnx.ModelProto, expands: bool, inputs: Mapping[str, Sequence[int]],
                  costs: Mapping[tuple[str, str], OpCost],
                  known: Mapping[str, onnx.TypeProto] | None = None) -> Compute:
    """:func:`compute` of a model already serialized light (``light``, changed here: its
    inputs bound to ``inputs``; ``expands``: whether inference may be given its functions)."""
    named: dict[str, int] = {}  # a dim's name is one size wherever the graph declares it
    for value in light.graph.input:
        if value.name in inputs:
            dims = value.type.tensor_type.shape.dim
            named.update({d.dim_param: n for d, n in zip(dims, inputs[value.name]) if d.dim_param})
            del dims[:]
            for size in inputs[value.name]:
                dims.add().dim_value = size
    for declared in (*light.graph.value_info, *light.graph.output):
        for dim in declared.type.tensor_type.shape.dim:  # a name, or dynamo's "s70 + s88"
            bound = expression_value(dim.dim_param, named)
            if bound is not None:
                dim.dim_value = bound
    made = {name for node in light.graph.node for name in node.output}
    light.graph.value_info.extend(onnx.ValueInfoProto(name=name, type=info) for name, info in
                                  (known or {}).items() if name in made)
    found = Compute()
    infos = {**{v.name: v.type for v in light.graph.input}, **inferred_types(light, expands)}
    for name, info in infos.items():
        dims = info.tensor_type.shape.dim
        if info.tensor_type.HasField("shape") and all(d.HasField("dim_value") and
                                                      d.dim_value >= 0 for d in dims):
            found.types[name] = info
    shapes = {t.name: list(t.dims) for t in light.graph.initializer}
    shapes.update({name: [d.dim_value for d in info.tensor_type.shape.dim]
                   for name, info in found.types.items()})
    for node in light.graph.node:
        cost = costs.get((node.domain if node.domain != "ai.onnx" else "", node.op_type))
        counted = _counted(node, cost, shapes) if cost is not None else None
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        found.add(op, counted, cost is not None)
    return found


@contextmanager
def texts_aside(model: ir.Model) -> Iterator[None]:
    """The doc strings of ``model``, its graph and its nodes, and its nodes' long lists of
    strings (a Constant's ``value_strings``), out of the way while a caller serializes it for
    shape inference, which reads none of them (a 100 MiB doc string was copied thrice); the
    lists keep their length, so shapes stay what they were."""
    holders: list[Any] = [model, model.graph, *model.graph]
    docs = [holder.doc_string for holder in holders]
    lists = {(node, name): attr for node in model.graph for name, attr in node.attributes.items()
             if attr.type == ir.AttributeType.STRINGS and not attr.is_ref()
             and sum(map(len, attr.value)) >= LONG_TEXT}
    try:
        for holder in holders:
            holder.doc_string = None
        for (node, name), attr in lists.items():
            node.attributes[name] = ir.Attr(name, attr.type, [""] * len(attr.value))
        yield
    finally:
        for holder, doc in zip(holders, docs):
            holder.doc_string = doc
        for (node, name), attr in lists.items():
            node.attributes[name] = attr


def _counted(node: onnx.NodeProto, cost: OpCost, shapes: Mapping[str, list[int]]
             ) -> tuple[int, int] | None:
    """(FLOPs, MACs) of ``node``; None where a shape it needs is not static."""
    ins = [shapes.get(name) if name else None for name in node.input]
    out = shapes.get(node.output[0]) if node.output else None
    first = ins[0] if ins else None
    if cost.kind == "contraction":
        transposed = any(a.name == "transA" and a.i for a in node.attribute)
        biased = cost.bias is not None and len(node.input) > cost.bias and \
            bool(node.input[cost.bias])
        return formula(cost, out, first, transposed, biased)
    if cost.kind in ("convolution", "transposed convolution"):
        weights = ins[cost.weights] if len(ins) > cost.weights else None
        return formula(cost, first if cost.kind == "transposed convolution" else out, weights)
    return formula(cost, out if cost.kind == "elementwise" else first, None)
