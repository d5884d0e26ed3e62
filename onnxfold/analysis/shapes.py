"""ONNX shape inference (with data propagation) merged into an onnx-ir model.

The model is serialized without its large weights (they become typed graph inputs for the
call), so inference costs a few milliseconds even on 400 MiB models. Only tensor types are
merged back: a sequence or optional value keeps its type.

Data propagation computes the values of 1-D tensors element by element (about 150 B each),
so a model declaring a long 1-D input, a ``Range`` of constant bounds or a chain of
``Concat`` could make it allocate gigabytes; such models are inferred without it
(:func:`_data_prop_is_bounded`).

Inferred types are for the optimizer, not for the output: the first inference marks the values
the model declared a type for (:func:`mark_declared`), and the writer keeps ``value_info`` only
for those (:func:`declared_names`), so an optimized file never grows by inferred entries.

Inference expands every call of a model-local function (once per call, callees included, each
time copying the table of functions): when that work exceeds the bounds of ``expansion.py``,
the model is inferred without its functions, their calls left opaque (their outputs keep the
types the model declares), so that inference stays linear in the model's size.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import cast

import onnx
import onnx_ir as ir

from onnxfold.analysis.expansion import inference_expands_functions
from onnxfold.ir.graph import all_graphs, static_shape
from onnxfold.ir.long_texts import texts_set_aside
from onnxfold.ir.protos import SMALL_TENSOR_BYTES, copy_field, graph_protos, tensor_nbytes

DATA_PROP_MAX = 1 << 16  # elements of a 1-D value data propagation may have to hold
# onnx-ir 0.2 (the declared minimum) serializes a graph without the model's IR version
_GRAPHS_KNOW_THE_IR_VERSION = "model_ir_version" in inspect.signature(
    ir.serde.serialize_graph_into).parameters


def serialize_light(model: ir.Model) -> onnx.ModelProto:
    """The model as a proto whose large initializers are typed graph inputs instead, and whose
    long string attributes are empty (``onnxfold.ir.long_texts``)."""
    graph = model.graph
    big = {name: v for name, v in graph.initializers.items()
           if v.const_value is not None and v.const_value.nbytes > SMALL_TENSOR_BYTES}
    order = list(graph.initializers) if big else []
    added = []
    inputs = set(graph.inputs)  # a set: 20,000 weights made a list's search quadratic
    for name, value in big.items():
        graph.initializers.pop(name)
        assert value.const_value is not None  # big holds only constants
        if value.type is None:
            value.type = ir.TensorType(value.const_value.dtype)
        if value.shape is None:
            value.shape = cast(ir.Shape, value.const_value.shape)  # onnx-ir tensors: an ir.Shape
        if value not in inputs:
            added.append(value)
    graph.inputs.extend(added)
    try:
        with texts_set_aside(model):  # no inference reads a custom op's 256 MiB payload
            return ir.serde.serialize_model(model)
    finally:
        # onnx-ir's GraphInputs keeps a removed input's count (0), and with it the value and
        # its weight for the graph's life: a weight folded away later would never be freed
        counts = getattr(graph.inputs, "_ref_counter", {})
        for value in reversed(added):  # the last ones: popped, not searched for
            popped = graph.inputs.pop()
            assert popped is value, "the graph's inputs changed while it was serialized"
            if counts.get(value) == 0:
                del counts[value]
        for name in order:  # back in the file's order, not the large ones last
            graph.register_initializer(big[name] if name in big else
                                       graph.initializers.pop(name))


def lighten(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` (the reader's, external weights already typed inputs) made what
    :func:`serialize_light` gives: its other large initializers become typed inputs too (in
    place), so inference sees exactly the same model either way."""
    graph = proto.graph
    names = {i.name for i in graph.input}
    kept = []
    for tensor in graph.initializer:
        nbytes = tensor_nbytes(tensor)
        if nbytes is None or nbytes <= SMALL_TENSOR_BYTES:
            kept.append(tensor)
        elif tensor.name not in names:
            graph.input.append(onnx.helper.make_tensor_value_info(
                tensor.name, tensor.data_type, tensor.dims))
    del graph.initializer[:]
    graph.initializer.extend(kept)
    for sub in graph_protos(graph):  # the reader typed initializers by their data: so here
        constants = {t.name for t in sub.initializer} | (names if sub is graph else set())
        claims = [vi for vi in sub.value_info if vi.name not in constants]
        del sub.value_info[:]
        sub.value_info.extend(claims)
    return proto


def _dims_of(type_proto: onnx.TypeProto) -> list[int | str | None] | None:
    """The dims a tensor type proto declares (ints, names, None for unknown), as
    ``ir.Shape`` takes them; None when it has no shape."""
    if not type_proto.tensor_type.HasField("shape"):
        return None
    dims: list[int | str | None] = []
    for d in type_proto.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(d.dim_value)
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return dims


def _static_1d_length(type_proto: onnx.TypeProto) -> int:
    shape = type_proto.tensor_type.shape
    if not type_proto.tensor_type.HasField("shape") or len(shape.dim) != 1:
        return 0
    return shape.dim[0].dim_value


def _range_length(node: onnx.NodeProto, constants: dict[str, onnx.TensorProto]) -> int:
    """Elements of ``Range`` with constant bounds (0 when they are not all constant)."""

    from onnx import numpy_helper

    try:
        start, limit, delta = (float(numpy_helper.to_array(constants[n]).reshape(-1)[0])
                               for n in node.input[:3])
        return max(math.ceil((limit - start) / delta), 0)
    except (KeyError, IndexError, ValueError, ZeroDivisionError, OverflowError):
        return 0  # not all constant: nothing for data propagation to compute


_SAME_AS_FIRST = frozenset({"Identity", "Cast", "Slice", "Squeeze", "Unsqueeze", "Reshape",
                            "CastLike", "Neg", "Abs"})
_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Where", "Equal",
                          "Less", "Greater", "And", "Or", "Not", "Expand"})


class _Lengths(dict[str, int]):
    """The length of each 1-D value by name: what propagation gives it, else its declared
    type's (read the first time it is asked for: most values are never asked about)."""

    def __init__(self, declared: dict[str, onnx.TypeProto]) -> None:
        super().__init__()
        self.declared = declared

    def __missing__(self, name: str) -> int:
        typed = self.declared.get(name)
        found = self[name] = 0 if typed is None else _static_1d_length(typed)
        return found


_PROPAGATING = frozenset({"Concat", "Range", "Gather"}) | _SAME_AS_FIRST | _ELEMENTWISE


def _propagated_length(node: onnx.NodeProto, ins: list[int],
                       constants: dict[str, onnx.TensorProto]) -> int:
    """How long a 1-D value data propagation may make of ``node``'s output, from its inputs'
    lengths: ``Concat`` adds them, ``Gather`` takes its indices', ``Range`` its own count, ops
    that pass data through take their first input's, elementwise ops their longest; other ops
    produce no propagated data."""
    op = node.op_type
    if op == "Concat":
        return sum(ins)
    if op == "Range":
        return _range_length(node, constants)
    if op == "Gather":
        return ins[1] if len(ins) > 1 else 0
    if op in _SAME_AS_FIRST:
        return ins[0] if ins else 0
    if op in _ELEMENTWISE:
        return max(ins, default=0)
    return 0


def _huge_step(node: onnx.NodeProto, constants: dict[str, onnx.TensorProto]) -> bool:
    """Whether a Slice has a constant step beyond 32 bits: onnx's data propagation then
    allocates without bound (a step of 2**40 takes gigabytes for a 2-node model)."""
    from onnx import numpy_helper

    if len(node.input) < 5 or node.input[4] not in constants:
        return False
    try:
        steps = numpy_helper.to_array(constants[node.input[4]]).reshape(-1)
    except (ValueError, TypeError):
        return True  # unreadable: not worth the risk
    return any(abs(int(step)) > 2**31 - 1 for step in steps.tolist())


def _data_prop_is_bounded(proto: onnx.ModelProto) -> bool:
    """Whether data propagation holds no 1-D value longer than ``DATA_PROP_MAX``.

    The lengths of 1-D values are followed through the graph the way data propagation grows
    them (:func:`_propagated_length`): a chain of 20 ``Concat(x, x)`` of a short constant would
    otherwise make inference allocate tens of gigabytes.
    """
    for graph in graph_protos(proto.graph):
        declared = {vi.name: vi.type for vi in (*graph.input, *graph.value_info)}
        lengths = _Lengths(declared)
        constants = {t.name: t for t in graph.initializer}
        constants.update({n.output[0]: a.t for n in graph.node if n.op_type == "Constant"
                          for a in n.attribute if a.name == "value"})
        for name, t in constants.items():
            lengths[name] = t.dims[0] if len(t.dims) == 1 else 0
        worst = 0  # what propagation computes: inputs and constants cost nothing unused
        for node in graph.node:
            op = node.op_type
            if op not in _PROPAGATING:
                continue  # its outputs' length stays what they declare (0 propagated)
            if op == "Slice" and _huge_step(node, constants):
                return False
            out = _propagated_length(node, [lengths[name] for name in node.input], constants)
            worst = max(worst, out)
            for name in node.output:
                lengths[name] = max(lengths[name], out)
        if worst > DATA_PROP_MAX:
            return False
    return True


DECLARED_KEY = "onnxfold.declared_type"  # Value.meta: typed before any inference
MARKED_KEY = "onnxfold.declared_marked"  # Model.meta: the values above have been marked


def mark_declared(model: ir.Model) -> None:
    """Mark the values typed before any inference (the model's own ``value_info``, inputs,
    outputs and initializers); done once per model, by its first inference."""
    if model.meta.get(MARKED_KEY):
        return
    model.meta[MARKED_KEY] = True
    for graph in all_graphs(model):
        for node in graph:
            for value in node.outputs:
                if value.type is not None or value.shape is not None:
                    value.meta[DECLARED_KEY] = True


def declared_names(model: ir.Model) -> set[str] | None:
    """Names of the values whose ``value_info`` the output keeps; None when the model was
    never inferred (everything it holds was declared)."""
    if not model.meta.get(MARKED_KEY):
        return None
    return {value.name for graph in all_graphs(model) for node in graph
            for value in node.outputs if value.name and value.meta.get(DECLARED_KEY)}


def infer_shapes(model: ir.Model, light: onnx.ModelProto | None = None) -> int:
    """Run ONNX shape inference and merge tensor types/shapes; return how many values changed.

    ``light``: the model as :func:`serialize_light` would give it (the reader's proto of a
    model not changed since). Never fatal: a model ONNX cannot infer keeps the shapes it has.
    """
    mark_declared(model)
    try:
        light = light if light is not None else serialize_light(model)
        expands = inference_expands_functions(model)
    except Exception:  # inference is an optimization aid, never a reason to fail
        return 0
    outputs = (value for graph in all_graphs(model) for node in graph for value in node.outputs)
    return _merge(inferred_types(light, expands), outputs)


def refinable_by(node: ir.Node, new: Collection[ir.Value]) -> bool:
    """Whether inference can now say more of ``node``'s outputs than it did before the
    constants ``new`` appeared: it reads one, and an output's shape is not static yet."""
    return any(v in new for v in node.inputs) and \
        any(static_shape(v) is None for v in node.outputs)


def infer_shapes_upstream(model: ir.Model, values: Collection[ir.Value],
                          new: Collection[ir.Value]) -> int:
    """:func:`infer_shapes` for ``values`` alone, after the constants ``new`` appeared: inference
    runs on the nodes ``values`` depend on, if one of them reads a constant of ``new`` and has
    an output whose shape is not static (else it would find what it found before). Shapes and,
    by data propagation, values flow only downstream, so these nodes alone infer ``values`` and
    everything upstream of them exactly as the whole model would; only their outputs are
    merged. For a model without subgraphs (``values`` in its main graph); returns how many
    values changed."""
    nodes = _upstream(model.graph, values)
    if not any(refinable_by(node, new) for node in nodes):
        return 0
    mark_declared(model)
    try:
        proto = _serialize_nodes(model, nodes, values)
        expands = inference_expands_functions(model)
    except Exception:  # inference is an optimization aid, never a reason to fail
        return 0
    return _merge(inferred_types(proto, expands), (v for node in nodes for v in node.outputs))


def _upstream(graph: ir.Graph, values: Collection[ir.Value]) -> list[ir.Node]:
    """The nodes of ``graph`` ``values`` depend on, in graph order."""
    found: set[ir.Node] = set()
    stack = [v.producer() for v in values]
    while stack:
        node = stack.pop()
        if node is None or node in found:
            continue
        found.add(node)
        stack.extend(v.producer() for v in node.inputs if v is not None)
    return [node for node in graph if node in found]


def _serialize_nodes(model: ir.Model, nodes: list[ir.Node], outputs: Collection[ir.Value]
                     ) -> onnx.ModelProto:
    """``nodes`` (closed upstream) as a model of their own, as :func:`serialize_light` gives a
    whole one: the values they read from outside (graph inputs, initializers) its inputs, the
    initializers up to ``SMALL_TENSOR_BYTES`` kept as initializers."""
    graph = model.graph
    produced = {v for node in nodes for v in node.outputs}
    read = {v: None for node in nodes for v in node.inputs if v is not None and v not in produced}
    small = {v: None for v in read if v.const_value is not None
             and graph.initializers.get(v.name or "") is v
             and v.const_value.nbytes <= SMALL_TENSOR_BYTES}
    declared = set(graph.inputs)  # an overridable initializer stays an input too
    inputs = [v for v in read if v not in small or v in declared]
    for value in inputs:  # a large weight: typed by its data, as serialize_light types it
        if value.const_value is not None:
            if value.type is None:
                value.type = ir.TensorType(value.const_value.dtype)
            if value.shape is None:
                value.shape = cast(ir.Shape, value.const_value.shape)
    view = ir.GraphView(inputs, list(outputs), nodes=nodes, initializers=list(small),
                        name=graph.name)
    proto = onnx.ModelProto(ir_version=model.ir_version)
    for domain, version in model.opset_imports.items():
        proto.opset_import.add(domain=domain, version=version)
    # onnx-ir's GraphView is a GraphViewProtocol but for settable meta (never set here)
    serialize: Callable = ir.serde.serialize_graph_into
    if _GRAPHS_KNOW_THE_IR_VERSION:
        serialize = functools.partial(serialize, model_ir_version=model.ir_version)
    serialize(proto.graph, view)
    proto.functions.extend(ir.serde.serialize_function(f) for f in model.functions.values())
    return proto


def inferred_types(light: onnx.ModelProto, expands: bool) -> dict[str, onnx.TypeProto]:
    """Run ONNX shape inference on ``light`` (a model serialized; ``expands``: whether
    inference may be given its functions, ``inference_expands_functions``): the tensor types it
    gives, by value name; none when inference fails."""
    try:
        if not expands:
            del light.functions[:]  # the calls stay opaque: their outputs keep declared types
        _clear_negative_dims(light)
        given = without_large_constants(light)
        inferred = onnx.shape_inference.infer_shapes(given, check_type=False, strict_mode=False,
                                                     data_prop=_data_prop_is_bounded(given))
    except Exception:  # inference is an optimization aid, never a reason to fail
        return {}
    infos: dict[str, onnx.TypeProto] = {}
    for g in graph_protos(inferred.graph):
        for vi in list(g.value_info) + list(g.output):
            if vi.type.HasField("tensor_type"):
                infos[vi.name] = vi.type
    if given is not light:  # each large Constant's output: the type inference gives it
        for vi in inferred.graph.input[len(light.graph.input):]:
            infos.setdefault(vi.name, vi.type)
    return infos


def _clear_negative_dims(light: onnx.ModelProto) -> None:
    """Make every declared dim of ``light`` below 0 (Paddle's ``-1``: a dim of any size) a dim
    of no known size: ONNX's inference computes with it as a number (``Pad(x, 1 each side)``
    of a ``-1`` axis made it 1, a Conv's made it 0, and the fold folded ``Shape`` to that)."""
    for graph in graph_protos(light.graph):
        for info in (*graph.input, *graph.value_info, *graph.output):
            for dim in info.type.tensor_type.shape.dim:
                if dim.HasField("dim_value") and dim.dim_value < 0:
                    dim.Clear()


def without_large_constants(light: onnx.ModelProto) -> onnx.ModelProto:
    """``light`` itself, or where its main graph has ``Constant`` nodes of more than
    ``SMALL_TENSOR_BYTES`` (an exporter's weights, as Paddle's are), a copy without them whose
    inputs declare their outputs' types instead, as :func:`serialize_light` does for large
    initializers: inference reads no such data, and would otherwise serialize and parse it four
    times (a 100 MB model of Constant weights peaked at 4.5x its size). The fold turns them
    into initializers, so this is the first inference's case. The reader's checker is given
    it too: such a node is well formed by what makes it one (one ``value`` tensor, no input),
    and its data is checked where every tensor's is (``io/trust.check_tensor_data``)."""
    graph = light.graph
    large = [node for node in graph.node if _large_constant(node)]
    if not large:
        return light
    given = onnx.ModelProto()
    for desc, value in light.ListFields():
        if desc.name != "graph":
            copy_field(given, desc, value)
    for desc, value in graph.ListFields():
        if desc.name == "node":
            given.graph.node.extend(node for node in value if not _large_constant(node))
        else:
            copy_field(given.graph, desc, value)
    for node in large:
        tensor = node.attribute[0].t
        given.graph.input.append(onnx.helper.make_tensor_value_info(
            node.output[0], tensor.data_type, tensor.dims))
    return given


def _large_constant(node: onnx.NodeProto) -> bool:
    """Whether ``node`` is a ``Constant`` of the default domain, without inputs, whose one
    attribute is a ``value`` tensor of more than ``SMALL_TENSOR_BYTES`` held in ``raw_data``
    alone (what exporters write; any other form goes to onnx's checker as it is)."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or node.input or \
            len(node.attribute) != 1 or len(node.output) != 1:
        return False
    attribute = node.attribute[0]
    if attribute.name != "value" or attribute.type != onnx.AttributeProto.TENSOR:
        return False
    tensor = attribute.t  # its data in raw_data alone, as onnx's checker asks of a tensor
    if not tensor.HasField("raw_data") or tensor.HasField("segment") or tensor.external_data \
            or tensor.data_location != onnx.TensorProto.DEFAULT or \
            any(len(getattr(tensor, field)) for field in _TYPED_DATA):
        return False
    nbytes = tensor_nbytes(tensor)
    return nbytes is not None and nbytes > SMALL_TENSOR_BYTES


_TYPED_DATA = ("float_data", "int32_data", "string_data", "int64_data", "double_data",
               "uint64_data")  # a TensorProto's data fields but raw_data


def _merge(infos: dict[str, onnx.TypeProto], values: Iterable[ir.Value]) -> int:
    """Merge the inferred ``infos`` into ``values``: a type where there was none, a shape
    where there was none, and each static dim inference found where the shape had a dynamic
    one; how many values changed."""
    changed = 0
    for value in values:
        if value.type is not None and value.shape is not None and value.shape.is_static():
            continue  # nothing inference could add (the common case, at once)
        info = infos.get(value.name or "")
        if info is None or not (value.type is None or isinstance(value.type, ir.TensorType)):
            continue
        if value.type is None and info.tensor_type.elem_type:
            value.type = ir.TensorType(ir.DataType(info.tensor_type.elem_type))
            changed += 1
        dims = _dims_of(info)  # an ir.Shape is made only of what is kept (most are not)
        merged = (None if dims is None else ir.Shape(dims)) if value.shape is None else \
            _more_static(value.shape, dims)
        if merged is not None:
            value.shape = merged
            changed += 1
    return changed


def _more_static(declared: ir.Shape, inferred: Sequence[int | str | None] | None
                 ) -> ir.Shape | None:
    """``declared`` with the dims ``inferred`` makes static (a TopK's ``[unk__59, unk__60]``
    inferred ``[unk__19, 2]`` is ``[unk__59, 2]``: its dynamic dims keep their names); None
    when it makes none static, or the two disagree (another rank, another static dim)."""
    if inferred is None or len(inferred) != len(declared):
        return None
    dims: list[int | ir.SymbolicDim] = []
    gained = False
    for mine, found in zip(declared, inferred):
        if isinstance(mine, int):
            if isinstance(found, int) and found != mine:
                return None
            dims.append(mine)
        elif isinstance(found, int):
            dims.append(found)
            gained = True
        else:
            dims.append(mine)
    return ir.Shape(dims) if gained else None


Interface = list[tuple[str | None, ir.TypeProtocol | None, ir.Shape | None]]


def interface_of(graph: ir.Graph) -> Interface:
    """The name, type and shape each output of ``graph`` is declared with."""
    return [(value.name, value.type, value.shape) for value in graph.outputs]


def keep_interface(graph: ir.Graph, declared: Interface) -> None:
    """Give each output of ``graph`` still named as ``declared`` its declared type and dims
    back where a rewrite put a value typed by inference in its place (MobileBERT's
    ``out [batch, seq, 64]`` became ``[unk__17, unk__18, 64]``): a consumer reads from the
    names which outputs share the inputs' dims. A dim the run made static (``--input-shape``)
    stays static; a declared dim without a name takes what the run found."""
    for value, (name, type_, shape) in zip(graph.outputs, declared):
        if value.name != name:
            continue
        if type_ is not None:
            value.type = type_
        if shape is None:
            continue
        if value.shape is None or len(value.shape) != len(shape):
            value.shape = shape
            continue
        value.shape = ir.Shape([now if isinstance(now, int) or
                                (isinstance(mine, ir.SymbolicDim) and mine.value is None)
                                else mine for now, mine in zip(value.shape, shape)])
