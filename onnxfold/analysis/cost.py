"""What a model computes: FLOPs and multiply-accumulates (MACs) per op type, at given input
shapes (the report's signature: the same shapes before and after a run).

The shapes of every value come from ONNX shape inference on the model with its inputs' dims
bound (``analysis.shapes``: weights left out, data propagation bounded). What each op costs is
declared per op in ``rules/op_costs.py`` as an :class:`OpCost` of a *kind*, whose formula is
here: ``contraction`` (MatMul, Gemm: each output element a dot product of ``K`` terms),
``convolution`` (each output element the weights' ``C/group x kernel`` terms; transposed: each
input element scattered through them), ``elementwise`` (``factor`` FLOPs per output element),
``reduction`` (``factor`` per input element: a Softmax, a normalization), ``free`` (data
movement). A MAC is one multiply and one add: 2 FLOPs. A node of an op no rule declares (a
custom op, a control-flow node, a function call), or whose shapes inference cannot make
static, is counted apart, not guessed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx_ir as ir

from onnxfold.analysis.dim_algebra import parse_expression
from onnxfold.analysis.expansion import inference_expands_functions
from onnxfold.analysis.shapes import inferred_types, serialize_light
from onnxfold.ir.long_texts import LONG_TEXT

KINDS = ("contraction", "convolution", "transposed convolution", "elementwise", "reduction",
         "free")


@dataclass(frozen=True)
class OpCost:
    """What one node of ``op_type`` computes (``rules/op_costs.py``): its ``kind`` (one of
    :data:`KINDS`), ``factor`` FLOPs per element where the kind counts elements, ``weights``:
    the input holding a convolution's weights (QLinearConv's is 3), ``bias``: an input added
    to each output element of a contraction where given (Gemm's C: one FLOP each)."""

    op_type: str
    kind: str
    factor: int = 1
    weights: int = 1
    bias: int | None = None
    domain: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind {self.kind!r} is none of {KINDS}")

    @property
    def name(self) -> str:
        """``cost.<op>``, for listings."""
        return f"cost.{self.op_type}"


@dataclass
class Compute:
    """Per op type: ``[nodes, FLOPs, MACs]`` counted, and the nodes not counted (no declared
    cost, or shapes not static at the bound dims); ``types``: every static tensor type found,
    by value name."""

    ops: dict[str, list[int]] = field(default_factory=dict)
    uncounted: dict[str, int] = field(default_factory=dict)
    types: dict[str, onnx.TypeProto] = field(default_factory=dict, repr=False)


def compute(model: ir.Model, inputs: Mapping[str, Sequence[int]],
            costs: Mapping[tuple[str, str], OpCost],
            known: Mapping[str, onnx.TypeProto] | None = None) -> Compute:
    """The main graph's compute with each graph input of ``inputs`` at that shape; ``costs``
    by (domain, op type). ``known``: static types of values of the same name in a model that
    computes the same (the folded model's, for the original: onnx's inference cannot follow
    the shape arithmetic a fold computed, a ``ConstantOfShape`` into a ``Where``)."""
    with texts_aside(model):
        light = serialize_light(model)
    return compute_light(light, inference_expands_functions(model), inputs, costs, known)


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
            form = parse_expression(dim.dim_param) if dim.dim_param else None
            if form and set(form) - {""} <= named.keys():
                dim.dim_value = sum(c * (named[k] if k else 1) for k, c in form.items())
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
        if counted is None:
            found.uncounted[op] = found.uncounted.get(op, 0) + 1
            continue
        row = found.ops.setdefault(op, [0, 0, 0])
        row[0] += 1
        row[1] += counted[0]
        row[2] += counted[1]
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
    if cost.kind == "free":
        return 0, 0
    ins = [shapes.get(name) if name else None for name in node.input]
    out = shapes.get(node.output[0]) if node.output else None
    if cost.kind == "contraction":
        left = ins[0] if ins else None
        if left is None or out is None or not left:
            return None
        transposed = any(a.name == "transA" and a.i for a in node.attribute)
        macs = math.prod(out) * left[0 if transposed and len(left) == 2 else -1]
        added = cost.bias is not None and len(node.input) > cost.bias and node.input[cost.bias]
        return 2 * macs + (math.prod(out) if added else 0), macs
    if cost.kind in ("convolution", "transposed convolution"):
        weights = ins[cost.weights] if len(ins) > cost.weights else None
        scattered = ins[0] if cost.kind == "transposed convolution" else out
        if weights is None or scattered is None:
            return None
        macs = math.prod(scattered) * math.prod(weights[1:])
        return 2 * macs, macs
    counted = out if cost.kind == "elementwise" else (ins[0] if ins else None)
    return None if counted is None else (cost.factor * math.prod(counted), 0)
