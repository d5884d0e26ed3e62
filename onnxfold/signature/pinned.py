"""A model's weightless copy with its inputs fixed at static shapes, for the signature's count
where the fold's walk leaves a costed node's shape unknown at a binding (a dim the data of a
dynamic dim decides: a TorchScript export's attention left to Shape, Gather and Concat
chains, a Slice whose start is minus a sequence length): ``signature.pinned_shapes`` walks it
again.

The copy is the model serialized light (``analysis.shapes``: weights left out, data
propagation bounded; its long texts set aside, :func:`texts_aside`) with every type ONNX's
inference finds at those shapes written on its values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import onnx
import onnx_ir as ir

from onnxfold.analysis.dim_algebra import expression_value
from onnxfold.analysis.shapes import inferred_types, serialize_light
from onnxfold.host.logs import quiet
from onnxfold.ir.long_texts import LONG_TEXT

INT64_MAX = 2**63 - 1  # the largest dim a proto holds


def light_proto(model: ir.Model) -> onnx.ModelProto:
    """``model`` serialized without its weights (``analysis.shapes.serialize_light``) and
    without its long texts (:func:`texts_aside`): what ONNX's inference reads."""
    with texts_aside(model):
        return serialize_light(model)


def bound_types(light: onnx.ModelProto, inputs: Mapping[str, Sequence[int]], expands: bool,
                known: Mapping[str, onnx.TypeProto] | None = None
                ) -> dict[str, onnx.TypeProto]:
    """Every tensor type with a shape ONNX's inference finds in ``light`` with its inputs bound
    (in place) to ``inputs``, the dims declared with their names too, and ``known``'s types
    (of values of the same names elsewhere) declared first; by value name, the inputs'
    included."""
    named: dict[str, int] = {}  # a dim's name is one size wherever the graph declares it
    for value in light.graph.input:
        if value.name in inputs and all(0 <= n <= INT64_MAX for n in inputs[value.name]):
            dims = value.type.tensor_type.shape.dim
            named.update({d.dim_param: n for d, n in zip(dims, inputs[value.name]) if d.dim_param})
            del dims[:]
            for size in inputs[value.name]:
                dims.add().dim_value = size
    for declared in (*light.graph.value_info, *light.graph.output):
        for dim in declared.type.tensor_type.shape.dim:  # a name, or dynamo's "s70 + s88"
            bound = expression_value(dim.dim_param, named)
            if bound is not None and 0 <= bound <= INT64_MAX:  # (else no size a proto holds)
                dim.dim_value = bound
    made = {name for node in light.graph.node for name in node.output}
    light.graph.value_info.extend(onnx.ValueInfoProto(name=name, type=info) for name, info in
                                  (known or {}).items() if name in made)
    infos = {**{v.name: v.type for v in light.graph.input}, **inferred_types(light, expands)}
    return {name: info for name, info in infos.items() if info.tensor_type.HasField("shape")}


def pinned_model(light: onnx.ModelProto, expands: bool, inputs: Mapping[str, Sequence[int]],
                 known: Mapping[str, onnx.TypeProto] | None = None) -> ir.Model:
    """``light`` (changed here) with its inputs bound to ``inputs`` and every type inference
    finds written on its values (``known``: types of values of the same names in a model
    that computes the same, declared before inference), as a model of its own (no
    weights)."""
    types = bound_types(light, inputs, expands, known)
    made = {name for node in light.graph.node for name in node.output}
    del light.graph.value_info[:]
    light.graph.value_info.extend(onnx.ValueInfoProto(name=name, type=info)
                                  for name, info in types.items() if name in made)
    with quiet("onnx_ir"):
        return ir.serde.deserialize_model(light)


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
