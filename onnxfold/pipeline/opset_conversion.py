"""``--target-opset N``: the model converted to opset N of the default domain before folding.

onnx's version converter (``onnx.version_converter``) does the conversion: its adapters turn
each op into its form at the target opset (an attribute that became an input, an op that was
split or renamed) and fail where an op has no form there. It works on a ``ModelProto``; the
weights do not go through it as bytes: onnx-ir serializes a memory-mapped weight as a reference
to its file, the converter passes references through, and after it each initializer that kept
its name, dtype and shape gets its original tensor object back (the checked, memory-mapped
view), so a multi-GB model converts in about the memory of its graph.

Around the converter:

- **Function ops first.** An op newer than the target that the ONNX spec defines by a function
  body (Gelu, LayerNormalization, Mish, ...) is expanded into that body before the converter
  runs (``function_ops.py``), in the main graph, its subgraphs and the local functions; so is
  an op the converter has no adapter for, when it has a body.
- **Local functions kept.** The converter converts the main graph only and drops the model's
  local functions; each function's body is converted here on its own (as the graph of a model
  of its own) and put back. A body that reads its call's attributes (``ref_attr_name``: the
  converter would write zeros in their place) or that the converter cannot convert alone
  (an adapter needs the types of the function's inputs) is inlined into its callers first.
- **What the converter has no adapter for, though nothing changes.** A Pad without ``axes``,
  a Split given its sizes (``kept_forms.py``) are kept out of the converter: their form at
  the target is the one they have.
- **What the converter leaves.** Reduce ops taken below opset 18 keep their
  ``noop_with_empty_axes`` (onnx 1.23): it is dropped where it changes nothing and the node
  becomes an Identity where it made one. Then every node of every graph and function is checked
  against its schema at the target, and every call against the model's functions, so that a
  model onnxruntime cannot load is never written, whatever its size or ``--no-verify``.

A failure is one line naming the op, its node and the next step (:class:`InputError`): the
conversion is what the user asked for, not a step to skip.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx.version_converter
import onnx_ir as ir

from onnxfold.analysis.expansion import EXPANSION_BUDGET, describe, expanded_size
from onnxfold.errors import InputError
from onnxfold.io import map_types
from onnxfold.ir.edits import names_for
from onnxfold.ir.graph import all_graphs
from onnxfold.pipeline.converter import convert_function, converter_reason
from onnxfold.pipeline.function_ops import (
    DEFAULT_DOMAINS,
    Unexpandable,
    expand,
    first_opsets,
    since,
    sites,
)
from onnxfold.pipeline.inlining import inline_calls
from onnxfold.pipeline.kept_forms import keep_forms, restore_kept

CONVERSION_KEY = "onnxfold.opset_conversion"  # meta of the converted model: what was done
MAX_ATTEMPTS = 16  # conversions tried, each after expanding an op or inlining a function
REDUCE_NOOP = "noop_with_empty_axes"
CONSTANT_INPUT = "No initializer or constant input"  # the converter's words


def default_opset(model: ir.Model) -> int | None:
    """The model's opset of the default domain (None: it imports none)."""
    for domain in DEFAULT_DOMAINS:
        if domain in model.opset_imports:
            return model.opset_imports[domain]
    return None


def convert_opset(model: ir.Model, target: int, label: str = "model",
                  fold: Callable[[ir.Model], ir.Model] | None = None) -> ir.Model:
    """``model`` at opset ``target`` of the default domain: itself when it is there already,
    else a new ``ir.Model`` converted by onnx's version converter (function ops expanded,
    local functions converted), its weights the original tensor objects. InputError, one line
    naming the op, its node and the next step, where it cannot be converted. The new model's
    ``meta[CONVERSION_KEY]`` says what was done (:meth:`Conversion.to_dict`).

    ``fold``: where the converter needs an input as a constant that the graph computes (Reduce
    axes from a Shape, dynamo's exports without their optimizer), the model folded at its own
    opset by ``fold`` (in place) is converted instead (:class:`NeedsConstants` without it)."""
    current = default_opset(model)
    newest = onnx.defs.onnx_opset_version()
    if not 1 <= target <= newest:
        raise InputError(f"--target-opset {target}: onnx {onnx.__version__} knows opsets 1 to "
                         f"{newest}")
    if current is None:
        raise InputError(f"--target-opset {target}: {label} imports no opset of the default "
                         "domain, so there is nothing to convert")
    if current == target:
        return model
    conversion = Conversion(current, target)
    try:
        converted = _Conversion(_light_copy(model), conversion, label).run()
    except NeedsConstants:
        if fold is None:
            raise
        model = fold(model)
        conversion = Conversion(current, target, folded_first=True)
        converted = _Conversion(_light_copy(model), conversion, label).run()
    aside = map_types.set_aside(converted)  # the converter writes the types it infers
    result = ir.serde.deserialize_model(converted)
    _reattach_weights(model, result)
    result.meta.update(model.meta)
    if aside:
        result.meta[map_types.MAP_TYPES_KEY] = {**aside,
                                                **model.meta.get(map_types.MAP_TYPES_KEY, {})}
    result.meta[CONVERSION_KEY] = conversion.to_dict()
    return result


class NeedsConstants(InputError):
    """The converter needs an input as a constant (Reduce axes, a Split's sizes) that the
    graph computes: folding first gives it one."""


PLACEHOLDER_BYTES = 1024  # in-memory weights above this go to the converter as references


def _light_copy(model: ir.Model) -> ir.Model:
    """A copy of ``model`` whose weights are references: a memory-mapped weight serializes as
    one to its file, an in-memory weight over :data:`PLACEHOLDER_BYTES` (folded, or from a
    proto) is swapped, for the serialization, for one to no file. Nothing reads them (the
    converter reads small constants only: axes, sizes, shapes); the result gets each original
    back by name (:func:`_reattach_weights`)."""
    swapped: list[tuple[ir.Value, ir.TensorProtocol]] = []
    for graph in all_graphs(model):
        for value in graph.initializers.values():
            tensor = value.const_value
            if tensor is not None and not isinstance(tensor, ir.ExternalTensor) and \
                    tensor.dtype != ir.DataType.STRING and tensor.nbytes > PLACEHOLDER_BYTES:
                swapped.append((value, tensor))
                value.const_value = ir.ExternalTensor(
                    "onnxfold-not-read", 0, tensor.nbytes, tensor.dtype,
                    shape=ir.Shape(tensor.shape.numpy()),
                    name=value.name or "")
    try:
        return ir.serde.deserialize_model(ir.serde.serialize_model(model))
    finally:
        for value, tensor in swapped:
            value.const_value = tensor


@dataclass
class Conversion:
    """What a conversion did besides the converter's adapters: the nodes of each op expanded
    into its ONNX function body, the local functions inlined into their callers, and whether
    the model was folded at its own opset first (the converter needed constants)."""

    source: int
    target: int
    expanded: Counter = field(default_factory=Counter)
    inlined: list[str] = field(default_factory=list)
    folded_first: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The report's ``conversion`` (docs/report-json.md)."""
        return {"from": self.source, "to": self.target, "expanded": dict(self.expanded),
                "inlined_functions": list(self.inlined), "folded_first": self.folded_first}


@dataclass
class _Failed(Exception):
    """One conversion attempt's failure: the op it names (if any), the local function it
    was in (None: the main graph), and the converter's or the check's words."""

    reason: str
    op: str | None = None
    function: ir.OperatorIdentifier | None = None
    node: str | None = None  # the node, where the check named it


class _Conversion:
    """The attempts at converting ``work`` (a copy of the model, changed in place) from opset
    ``current`` to ``target``."""

    def __init__(self, work: ir.Model, done: Conversion, label: str) -> None:
        self.work, self.done, self.label = work, done, label
        self.current, self.target = done.source, done.target

    def run(self) -> onnx.ModelProto:
        """The converted model as a proto (InputError where it cannot be)."""
        for _ in range(MAX_ATTEMPTS):  # a body may hold newer function ops (SwiGLU: Swish)
            newer = {op for op in _ops(self.work) if first_opsets().get(op, 0) > self.target}
            if not self._expand(newer):
                break
        self._inline(self._reading_call_attributes())
        keep_forms(self.work, self.current, self.target, names_for(self.work).fresh)
        for _ in range(MAX_ATTEMPTS):
            try:
                return self._convert(ir.serde.serialize_model(self.work))
            except _Failed as failure:
                if not self._recover(failure):
                    error = NeedsConstants if CONSTANT_INPUT in failure.reason and \
                        not self.done.folded_first else InputError
                    raise error(self._line(failure)) from None
        raise InputError(f"--target-opset {self.target}: {self.label} did not convert after "
                         f"{MAX_ATTEMPTS} attempts (each expanded an op or inlined a function)")

    def _recover(self, failure: _Failed) -> bool:
        """Expand the op the converter failed on where it has a body, else inline the function
        whose body failed alone; whether there is a next attempt."""
        if failure.op is not None and failure.node is None:
            try:
                if self._expand({failure.op}, quiet=True):
                    return True
            except _NoBody:
                pass
        if failure.function is not None and failure.function in self.work.functions:
            self._inline({failure.function})
            return True
        return False

    def _expand(self, ops: set[str], quiet: bool = False) -> int:
        """Expand the nodes of ``ops`` into their bodies (InputError naming the first that has
        none; with ``quiet``, :class:`_NoBody` instead)."""
        if not ops:
            return 0
        found = sites(self.work, ops)
        names = [site.node.op_type for site in found]  # (each node becomes a call)
        try:
            expanded = expand(self.work, found)
        except Unexpandable as e:
            if quiet:
                raise _NoBody from None
            op = next(iter(sorted(ops)))
            first = first_opsets().get(op, self.target)
            raise InputError(f"--target-opset {self.target}: {e}, and it is newer than opset "
                             f"{self.target}; next step: {self._next(first)}") from None
        self.done.expanded.update(names)
        return expanded

    def _reading_call_attributes(self) -> set[ir.OperatorIdentifier]:
        """The local functions to convert whose bodies read their call's attributes."""
        return {key for key, function in self.work.functions.items()
                if _function_opset(function, self.current) != self.target
                and any(_reads_call_attributes(node) for node in _nodes(function))}

    def _inline(self, functions: set[ir.OperatorIdentifier]) -> None:
        """Inline every call of ``functions`` (InputError where the graph would grow over the
        expansion budget)."""
        if not functions:
            return
        size = expanded_size(self.work, EXPANSION_BUDGET)
        names = ", ".join(sorted(f"{d}.{n}" if d else n for d, n, _ in functions))
        if size > EXPANSION_BUDGET:
            raise InputError(
                f"--target-opset {self.target}: the local function {names} must be inlined to "
                f"be converted (its body reads its call's attributes, or converts only with "
                f"its callers' types), and the graph would grow to "
                f"{describe(size, EXPANSION_BUDGET)} nodes; next step: {self._next(self.current)}")
        inline_calls(self.work, lambda function: function.identifier() in functions)
        self.done.inlined.extend(sorted(f"{d}.{n}" if d else n for d, n, _ in functions))

    def _convert(self, proto: onnx.ModelProto) -> onnx.ModelProto:
        """One attempt: the main graph by the converter, each function's body alone, the
        converter's leftovers repaired, every node checked."""
        functions = list(proto.functions)
        try:
            converted = onnx.version_converter.convert_version(proto, self.target)
        except Exception as e:  # the converter's C++ assertions arrive as RuntimeError
            raise _failure(e) from None
        restore_kept(converted)
        _restore_metadata(proto, converted)
        del converted.functions[:]
        for function in functions:
            converted.functions.append(self._convert_function(function, proto.ir_version))
        for node, _ in _all_nodes(converted):
            _repair(node, self.target)
        _check(converted, self.target, {(f.domain, f.name, f.overload) for f in functions})
        return converted

    def _convert_function(self, function: onnx.FunctionProto, ir_version: int
                          ) -> onnx.FunctionProto:
        """``function`` with its body converted to the target, its nodes' metadata kept."""
        if _proto_opset(function.opset_import) in (None, self.target):
            return function
        try:
            result = convert_function(function, self.target, ir_version)
        except Exception as e:  # the converter's C++ assertions arrive as RuntimeError
            failure = _failure(e)
            failure.function = (function.domain, function.name, function.overload)
            raise failure from None
        _restore_node_metadata(_by_name(function.node), result.node)
        return result

    def _line(self, failure: _Failed) -> str:
        """The one line of a failure the attempts could not get past."""
        where = f" from opset {self.current}"
        computed = _computed_attribute_inputs(self.work, self.target) \
            if failure.op is None and CONSTANT_INPUT in failure.reason else []
        if computed:  # name the node the converter does not: one whose input it needs constant
            first = computed[0]
            more = f", and {len(computed) - 1} more" if len(computed) > 1 else ""
            form = since(first.op_type, self.current) or self.current
            return (f"--target-opset {self.target}: onnx's version converter cannot convert "
                    f"{first.op_type} (node {first.name or first.op_type}{more}) of {self.label}"
                    f"{where}: at opset {self.target} an input it reads (its axes, sizes or "
                    "pads) must be an attribute, and even folded it depends on the model's "
                    "inputs; next step: fix those dims (--input-shape) where it depends on "
                    f"dims, so that it folds, or {self._next(form)}")
        if failure.op is None:
            return (f"--target-opset {self.target}: onnx's version converter cannot convert "
                    f"{self.label}{where}: {_hint(failure.reason)}")
        nodes = [s.node for s in sites(self.work, [failure.op])]
        node = failure.node or (nodes[0].name or nodes[0].op_type if nodes else "?")
        more = f", and {len(nodes) - 1} more" if len(nodes) > 1 else ""
        form = since(failure.op, self.current) or self.current
        return (f"--target-opset {self.target}: onnx's version converter cannot convert "
                f"{failure.op} (node {node}{more}) of {self.label}{where}: {failure.reason}; "
                f"next step: {self._next(form)}")

    def _next(self, opset: int) -> str:
        """What to do instead: convert to ``opset`` (the lowest the op's form reaches), or
        export the model at the target."""
        later = f"--target-opset {opset} or later, or " if self.target < opset else ""
        return (f"{later}export the model at opset {self.target} (TorchScript: "
                f"torch.onnx.export(..., dynamo=False, opset_version={self.target}))")


class _NoBody(Exception):
    """An op the converter failed on has no body to expand."""


def _failure(error: Exception) -> _Failed:
    """The converter's error as a failure naming its op where it names one."""
    reason = converter_reason(error)
    match = re.search(r"No Previous Version of (\w+) exists|No Adapter (?:From|To) Version "
                      r"\$?\d+ for (\w+)|of operator '(\w+)'", reason)
    op = next((g for g in match.groups() if g), None) if match else None
    return _Failed(reason, op)


def _hint(reason: str) -> str:
    """``reason`` with the next step where the converter names none."""
    if CONSTANT_INPUT in reason:
        reason += (" (the converter needs that input as a constant, and the graph computes "
                   "it: fold first, `onnxfold optimize IN -o FOLDED`, then convert the folded "
                   "model)")
    return reason


def _ops(model: ir.Model) -> set[str]:
    """The default-domain op types of the model's graphs and functions."""
    found = set()
    graphs: list[ir.Graph | ir.Function] = [*all_graphs(model), *model.functions.values()]
    for graph in graphs:
        for node in _nodes(graph):
            if node.domain in DEFAULT_DOMAINS:
                found.add(node.op_type)
    return found


def _nodes(graph: ir.Graph | ir.Function) -> Iterator[ir.Node]:
    """Every node of ``graph`` and of the subgraphs inside it."""
    stack: list[ir.Graph | ir.Function] = [graph]
    while stack:
        for node in stack.pop():
            yield node
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    stack.append(attr.as_graph())
                elif attr.type == ir.AttributeType.GRAPHS:
                    stack.extend(attr.as_graphs())


def _computed_attribute_inputs(model: ir.Model, target: int) -> list[ir.Node]:
    """The default-domain nodes of the main graph with an input beyond what their op takes at
    ``target`` (an input that became an attribute there: Reduce axes, Split sizes, Unsqueeze
    axes, Pad's pads) that is a graph input or computed by a node other than a Constant: the
    converter needs such an input constant."""
    found = []
    for node in model.graph:
        if node.domain not in DEFAULT_DOMAINS:
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, target, "")
        except onnx.defs.SchemaError:
            continue
        extra = node.inputs[len(schema.inputs):] if not _variadic(schema) else []
        if any(v is not None and not v.is_initializer() and
               ((p := v.producer()) is None or p.op_type != "Constant") for v in extra):
            found.append(node)
    return found


def _variadic(schema: onnx.defs.OpSchema) -> bool:
    return any(i.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
               for i in schema.inputs)


def _reads_call_attributes(node: ir.Node) -> bool:
    return any(attr.is_ref() for attr in node.attributes.values())


def _function_opset(function: ir.Function, fallback: int) -> int:
    for domain in DEFAULT_DOMAINS:
        if domain in function.opset_imports:
            return function.opset_imports[domain]
    return fallback


def _proto_opset(imports: Iterable[onnx.OperatorSetIdProto]) -> int | None:
    return next((e.version for e in imports if e.domain in DEFAULT_DOMAINS), None)


def _all_nodes(model: onnx.ModelProto) -> Iterator[tuple[onnx.NodeProto, str]]:
    """Every node of the model's graphs and functions, with where it is."""
    stack: list[tuple[onnx.GraphProto | onnx.FunctionProto, str]] = [(model.graph, "")]
    stack += [(f, f" in function {f.name}") for f in model.functions]
    while stack:
        graph, where = stack.pop()
        for node in graph.node:
            yield node, where
            for attr in node.attribute:
                stack.extend((g, where) for g in ([attr.g] if attr.HasField("g") else []))
                stack.extend((g, where) for g in attr.graphs)


def _restore_metadata(before: onnx.ModelProto, after: onnx.ModelProto) -> None:
    """Give the converted graph the metadata the converter drops (onnx 1.23 keeps the model's
    only): each node's (the exporter's module path and source line, which the report groups
    by) from the node of the same name, the main graph's, and its values' by name."""
    originals = _by_name(node for node, _ in _all_nodes(before))  # a name twice: neither
    _restore_node_metadata(originals, (node for node, _ in _all_nodes(after)))
    after.graph.metadata_props.extend(before.graph.metadata_props)
    values = {v.name: v for v in [*before.graph.input, *before.graph.output,
                                  *before.graph.value_info]}
    for value in [*after.graph.input, *after.graph.output, *after.graph.value_info]:
        old = values.get(value.name)
        if old is not None and not value.metadata_props:
            value.metadata_props.extend(old.metadata_props)


def _by_name(nodes: Iterable[onnx.NodeProto]) -> dict[str, onnx.NodeProto | None]:
    found: dict[str, onnx.NodeProto | None] = {}
    for node in nodes:
        if node.name:
            found[node.name] = None if node.name in found else node
    return found


def _restore_node_metadata(originals: dict[str, onnx.NodeProto | None],
                           nodes: Iterable[onnx.NodeProto]) -> None:
    """Each of ``nodes`` without metadata takes that of the original of its name."""
    for node in nodes:
        old = originals.get(node.name) if node.name else None
        if old is not None and not node.metadata_props:
            node.metadata_props.extend(old.metadata_props)


def _repair(node: onnx.NodeProto, target: int) -> None:
    """A Reduce node the converter took below the opset where ``axes`` became an input keeps
    ``noop_with_empty_axes``, which its schema there does not have: it changes nothing where
    it is 0 or axes are given (drop it), and makes the node an Identity where it is 1 with no
    axes (the op's form at 18 returns its input then)."""
    if node.domain not in DEFAULT_DOMAINS or not node.op_type.startswith("Reduce"):
        return
    noop = next((a for a in node.attribute if a.name == REDUCE_NOOP), None)
    schema_attributes = _schema_attributes(node.op_type, target)
    if noop is None or schema_attributes is None or REDUCE_NOOP in schema_attributes:
        return
    axes = next((list(a.ints) for a in node.attribute if a.name == "axes"), [])
    if noop.i and not axes and len(node.input) < 2:
        del node.attribute[:]
        node.op_type = "Identity"
        del node.input[1:]
        return
    node.attribute.remove(noop)


def _schema_attributes(op: str, opset: int) -> set[str] | None:
    try:
        return set(onnx.defs.get_schema(op, opset, "").attributes)
    except onnx.defs.SchemaError:
        return None


def _check(model: onnx.ModelProto, target: int, local: set[tuple[str, str, str]]) -> None:
    """Every default-domain node of every graph and function against its schema at
    ``target`` (a node with a subgraph by the nodes inside it), every call of a function of
    ``local`` (the model's before conversion) against the functions ``model`` holds: _Failed
    naming the first that is wrong. Node by node: the whole checker would look for the
    weights' files, which the proto only references."""
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = model.ir_version
    ctx.opset_imports = {o.domain: o.version for o in model.opset_import}
    held = {(f.domain, f.name, f.overload) for f in model.functions}
    for node, where in _all_nodes(model):
        label = f"{node.name or node.op_type}{where}"
        if node.domain not in DEFAULT_DOMAINS:
            call = (node.domain, node.op_type, node.overload)
            if call in local and call not in held:
                raise _Failed("it calls a local function the converted model lost",
                              node.op_type, node=label)
            continue
        if where or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                        or a.ref_attr_name for a in node.attribute):
            _check_schema(node, target, label)  # alone, a subgraph's outer reads look undefined
            continue
        try:
            onnx.checker.check_node(node, ctx)
        except Exception as e:  # the checker's ValidationError
            raise _Failed(converter_reason(e), node.op_type, node=label) from None


def _check_schema(node: onnx.NodeProto, target: int, label: str) -> None:
    """A node that the checker cannot check alone: its op exists at ``target`` and knows
    its attributes."""
    attributes = _schema_attributes(node.op_type, target)
    if attributes is None:
        raise _Failed(f"no {node.op_type} exists at opset {target}", node.op_type, node=label)
    unknown = sorted({a.name for a in node.attribute} - attributes)
    if unknown:
        raise _Failed(f"attribute {unknown[0]} is not one of {node.op_type}'s at opset "
                      f"{target}", node.op_type, node=label)


def _reattach_weights(original: ir.Model, converted: ir.Model) -> None:
    """Give each initializer of ``converted`` the tensor object of the initializer of
    ``original`` with the same name (unique in the model), where dtype and shape agree: the
    converter copied references, and the original objects are the checked, memory-mapped
    views."""
    by_name: dict[str, ir.TensorProtocol | None] = {}
    for graph in all_graphs(original):
        for name, value in graph.initializers.items():
            by_name[name] = None if name in by_name else value.const_value  # ambiguous: none
    for graph in all_graphs(converted):
        for name, value in graph.initializers.items():
            old, new = by_name.get(name), value.const_value
            if old is not None and new is not None and old.dtype == new.dtype and \
                    tuple(old.shape) == tuple(new.shape):
                value.const_value = old
