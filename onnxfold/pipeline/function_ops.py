"""Function ops of the ONNX spec expanded into the ops their bodies are made of.

Many ops (Gelu, LayerNormalization, GroupNormalization, Mish, HardSwish, ...) are defined in
the ONNX spec with a *function body*: the same computation in older ops. onnx's version
converter cannot take a model below the opset that introduced such an op ("No Previous Version
of Gelu exists"), though the body says exactly what the op computes there. Expanding each node
of such an op into its body first lets the converter convert the rest.

A node's body comes from its schema at the opset of the graph it is in: a static body, or one
the schema builds from the node's attributes and input types (a *context-dependent* function,
as Gelu's and LayerNormalization's are; the input types are the graph's, or onnx's shape
inference's where the graph does not declare them). The body of the highest opset not above
the graph's is taken and brought to the graph's opset: as it is where each of its ops has the
same form at both, else converted up by onnx's version converter. Only the outputs the node has
are kept (a body built for a node may name optional outputs it does not compute). Each node
becomes a model-local function of a private domain, inlined by onnx-ir's inliner
(``inlining.py``): the new nodes carry the node's metadata (the exporter's module path and
source line) and names that start with the node's.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import onnx
import onnx.defs
import onnx.shape_inference
import onnx_ir as ir

from onnxfold.ir.graph import subgraphs
from onnxfold.pipeline.converter import convert_function, converter_reason
from onnxfold.pipeline.inlining import inline_calls

PRIVATE_DOMAIN = "onnxfold.expanded"  # the functions made here, gone once inlined
DEFAULT_DOMAINS = ("", "ai.onnx")


@functools.cache
def first_opsets() -> Mapping[str, int]:
    """The opset at which each op of the default domain appeared."""
    first: dict[str, int] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain in DEFAULT_DOMAINS:
            first[schema.name] = min(first.get(schema.name, schema.since_version),
                                     schema.since_version)
    return first


def since(op: str, opset: int) -> int | None:
    """The opset of ``op``'s form at ``opset`` (its schema's since_version; None: none)."""
    try:
        return int(onnx.defs.get_schema(op, opset, "").since_version)
    except onnx.defs.SchemaError:
        return None


class Unexpandable(Exception):
    """A node whose op has no body to expand it into (or none that means the same at its
    graph's opset, or whose body needs input types nothing knows)."""


@dataclass(frozen=True)
class Site:
    """A node to expand, and the default-domain opset of the graph it is in."""

    node: ir.Node
    opset: int


def sites(model: ir.Model, ops: Iterable[str]) -> list[Site]:
    """Every node of the default domain whose op is one of ``ops``, in the main graph, its
    subgraphs and the bodies of the model's local functions."""
    wanted = frozenset(ops)
    model_opset = _default_opset(model.opset_imports)
    found: list[Site] = []
    graphs: list[tuple[ir.Graph | ir.Function, int | None]] = [(model.graph, model_opset)]
    graphs += [(f, _default_opset(f.opset_imports) or model_opset)
               for f in model.functions.values() if f.domain != PRIVATE_DOMAIN]
    for graph, opset in graphs:
        if opset is None:
            continue
        stack: list[ir.Graph | ir.Function] = [graph]
        while stack:
            for node in stack.pop():
                if node.domain in DEFAULT_DOMAINS and node.op_type in wanted:
                    found.append(Site(node, opset))
                stack.extend(subgraphs(node))
    return found


def expand(model: ir.Model, found: list[Site]) -> int:
    """Expand every node of ``found`` into its op's body, in place; the number expanded.
    Raises :class:`Unexpandable` naming the first node that has no usable body (nothing is
    changed then)."""
    if not found:
        return 0
    types = _Types(model)
    bodies = [(site, _body(site, types)) for site in found]
    for i, (site, body) in enumerate(bodies):
        _as_call(model, site.node, body, i)
    inline_calls(model, lambda function: function.domain == PRIVATE_DOMAIN)
    return len(found)


def _default_opset(imports: Mapping[str, int]) -> int | None:
    for domain in DEFAULT_DOMAINS:
        if domain in imports:
            return imports[domain]
    return None


class _Types:
    """The ONNX type of a value by name: the graph's own, else onnx's shape inference's (run
    once, on the model as it is, its weights not read)."""

    def __init__(self, model: ir.Model) -> None:
        self.model = model
        self._inferred: dict[str, onnx.TypeProto] | None = None

    def of(self, value: ir.Value | None) -> onnx.TypeProto:
        if value is None:
            return onnx.TypeProto()
        if value.type is not None:  # with its shape: a body may depend on the rank
            return ir.serde.serialize_value(value).type
        return self._infer().get(value.name or "", onnx.TypeProto())

    def _infer(self) -> dict[str, onnx.TypeProto]:
        if self._inferred is None:
            proto = ir.serde.serialize_model(self.model)
            try:
                proto = onnx.shape_inference.infer_shapes(proto)
            except Exception:  # inference is a best effort here: none leaves the types unknown
                self._inferred = {}
                return self._inferred
            graph = proto.graph
            self._inferred = {v.name: v.type for v in
                              [*graph.input, *graph.value_info, *graph.output]}
        return self._inferred


def _body(site: Site, types: _Types) -> onnx.FunctionProto:
    """The body of ``site``'s node at its graph's opset, rebased to that opset."""
    node = site.node
    label = _label(node)
    try:
        schema = onnx.defs.get_schema(node.op_type, site.opset, "")
    except onnx.defs.SchemaError:
        raise Unexpandable(f"{node.op_type} (node {label}) has no schema at opset "
                           f"{site.opset}") from None
    # (onnx's stubs lack the per-opset function API: its own backend tests ignore it too)
    if subgraphs(node):
        raise Unexpandable(f"{node.op_type} (node {label}) takes a graph attribute, which "
                           "a function body cannot be inlined with")
    static = [v for v in schema.function_opset_versions  # type: ignore[attr-defined]
              if v <= site.opset]
    dependent = [v for v in schema.context_dependent_function_opset_versions  # type: ignore[attr-defined]
                 if v <= site.opset]
    if not static and not dependent:
        raise Unexpandable(f"{node.op_type} (node {label}) has no function body in ONNX to "
                           "expand it into older ops")
    body = onnx.FunctionProto()
    proto = ir.serde.serialize_node(node)
    _defaults_into(proto, schema)
    if static and (not dependent or max(static) >= max(dependent)):
        version = max(static)
        body.ParseFromString(
            schema.get_function_with_opset_version(version))  # type: ignore[attr-defined]
    else:
        version = max(dependent)
        body.ParseFromString(schema.get_context_dependent_function_with_opset_version(  # type: ignore[attr-defined]
            version, proto.SerializeToString(),
            [types.of(v).SerializeToString() for v in node.inputs]))
        if not body.node:
            raise Unexpandable(f"{node.op_type} (node {label}): its body depends on its input "
                               "types, and they are not known")
    _only_used_outputs(body, node, label)
    _instantiate(body.node, {a.name: a for a in proto.attribute})
    del body.attribute[:], body.attribute_proto[:]
    _rebase(body, version, site.opset, label)
    return body


def _instantiate(nodes: Iterable[onnx.NodeProto], given: Mapping[str, onnx.AttributeProto]
                 ) -> None:
    """Replace each attribute of ``nodes`` that refers to the call's (``ref_attr_name``) by
    the call's value, ``given`` (subgraphs too); one the call does not give is left out, as
    ONNX means it. The body then reads nothing of its call (onnx's converter would write zeros
    in place of such references)."""
    for inner in nodes:
        kept = []
        for attribute in inner.attribute:
            if attribute.ref_attr_name:
                value = given.get(attribute.ref_attr_name)
                if value is None:
                    continue
                resolved = onnx.AttributeProto()
                resolved.CopyFrom(value)
                resolved.name = attribute.name
                attribute = resolved
            if attribute.HasField("g"):
                _instantiate(attribute.g.node, given)
            for graph in attribute.graphs:
                _instantiate(graph.node, given)
            kept.append(attribute)
        del inner.attribute[:]
        inner.attribute.extend(kept)


def _only_used_outputs(body: onnx.FunctionProto, node: ir.Node, label: str) -> None:
    """Keep the body's outputs the node has (a body built for a node leaves out the optional
    outputs the node does not ask for: SoftmaxCrossEntropyLoss's log_prob); each must be
    computed."""
    del body.output[len(node.outputs):]
    made = {name for inner in body.node for name in inner.output} | set(body.input)
    missing = [name for name in body.output if name not in made]
    if missing:  # (an unused output before a used one: a function's outputs are positional)
        raise Unexpandable(f"{node.op_type} (node {label}): the body ONNX builds for it does "
                           f"not compute its output {missing[0]}")


def _rebase(body: onnx.FunctionProto, version: int, opset: int, label: str) -> None:
    """Make ``body`` (written at opset ``version``) import ``opset``: as it is where each of
    its ops has the same form at both, else converted by onnx's version converter."""
    if all(since(inner.op_type, version) == since(inner.op_type, opset)
           for inner in body.node if inner.domain in DEFAULT_DOMAINS):
        for entry in body.opset_import:
            if entry.domain in DEFAULT_DOMAINS:
                entry.version = opset
        return
    try:
        converted = convert_function(body, opset, onnx.IR_VERSION)
    except Exception as e:  # the converter's C++ assertions arrive as RuntimeError
        raise Unexpandable(f"{body.name} (node {label}): its body, written at opset "
                           f"{version}, does not convert to opset {opset} "
                           f"({converter_reason(e)})") from None
    del body.node[:]
    body.node.extend(converted.node)
    del body.opset_import[:]
    body.opset_import.extend(converted.opset_import)


def _defaults_into(node: onnx.NodeProto, schema: onnx.defs.OpSchema) -> None:
    """Set each attribute the schema gives a default and ``node`` leaves out (a body reads
    the attributes by reference, and knows no defaults of its own)."""
    given = {a.name for a in node.attribute}
    for name, attribute in schema.attributes.items():
        default = attribute.default_value
        if name not in given and default is not None and \
                default.type != onnx.AttributeProto.UNDEFINED:
            added = node.attribute.add()
            added.CopyFrom(default)
            added.name = name


def _as_call(model: ir.Model, node: ir.Node, body: onnx.FunctionProto, index: int) -> None:
    """Make ``node`` a call of ``body`` as a local function of the private domain, its nodes
    and values named after ``node``."""
    prefix = _label(node)
    body.domain, body.name = PRIVATE_DOMAIN, f"{node.op_type}_{index}"
    for inner in body.node:  # (values keep their names: the inliner makes them unique)
        inner.name = f"{prefix}/{inner.name or inner.op_type}"
    function = ir.serde.deserialize_function(body)
    model.functions[function.identifier()] = function
    node.domain, node.op_type, node.overload = PRIVATE_DOMAIN, body.name, ""


def _label(node: ir.Node) -> str:
    return node.name or node.op_type
