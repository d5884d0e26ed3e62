"""The signature's count by ONNX's shape inference at bound input shapes, as onnxfold counted
every model before issue 66 (and, until issue 83, where its profile left a shape unknown):
the reference its tests hold the profile's count to, each value's shape from inference, not
from the fold's walk. The formula of each kind is the product's
(``onnxfold.signature.compute.formula``): what this checks is the shapes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx
import onnx_ir as ir

from onnxfold.analysis.expansion import inference_expands_functions
from onnxfold.declare.costs import OpCost
from onnxfold.signature.compute import Compute, formula
from onnxfold.signature.pinned import bound_types, light_proto


def compute(model: ir.Model, inputs: Mapping[str, Sequence[int]],
            costs: Mapping[tuple[str, str], OpCost],
            known: Mapping[str, onnx.TypeProto] | None = None) -> Compute:
    """The main graph's compute with each graph input of ``inputs`` at that shape; ``costs``
    by (domain, op type). ``known``: static types of values of the same name in a model that
    computes the same (the folded model's, for the original: onnx's inference cannot follow
    the shape arithmetic a fold computed, a ``ConstantOfShape`` into a ``Where``)."""
    return compute_light(light_proto(model), inference_expands_functions(model), inputs, costs,
                         known)


def compute_light(light: onnx.ModelProto, expands: bool, inputs: Mapping[str, Sequence[int]],
                  costs: Mapping[tuple[str, str], OpCost],
                  known: Mapping[str, onnx.TypeProto] | None = None) -> Compute:
    """:func:`compute` of a model already serialized light (``light``, changed here: its
    inputs bound to ``inputs``; ``expands``: whether inference may be given its functions)."""
    found = Compute()
    found.types = {name: info for name, info in bound_types(light, inputs, expands, known).items()
                   if all(d.HasField("dim_value") and d.dim_value >= 0
                          for d in info.tensor_type.shape.dim)}
    shapes = {t.name: list(t.dims) for t in light.graph.initializer}
    shapes.update({name: [d.dim_value for d in info.tensor_type.shape.dim]
                   for name, info in found.types.items()})
    for node in light.graph.node:
        cost = costs.get((node.domain if node.domain != "ai.onnx" else "", node.op_type))
        counted = _counted(node, cost, shapes) if cost is not None else None
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        found.add(op, counted, cost is not None)
    return found


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
