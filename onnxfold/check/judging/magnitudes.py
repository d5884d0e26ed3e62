"""The magnitude of what was summed to make each element of a value: the scale of its
rounding error, computed in onnxruntime beside the value itself.

Two correct evaluations of ``y = sum_j t_j`` (another order of summation, terms that carry a
few ulps of their own) differ by up to a few units of ``u * sum_j |t_j|``, not of ``u * |y|``:
where the terms cancel (a convolution with standardized weights, terms of ~300 summing to
~0.01) the relative difference of ``y`` is as large as the cancellation. So the check compares
such an element with an allowance that follows ``S``, this module's *magnitude* of the element
(``docs/check.md``, "Tolerances from error analysis"), never with a fixed relative one alone.

``S`` is the original graph with a twin beside each floating-point value, built from the values
it reads (a forward, first-order error analysis written as ONNX nodes and run by the check's own
runner):

- an op that combines many elements of its inputs into each result starts anew from the
  absolute values it reads: a product that sums (MatMul, Gemm, Conv, ConvTranspose, Einsum) is
  the same op on ``|operands|`` (``|x| @ |W|``, plus the twin of an added bias), a reduction or
  average that adds (ReduceSum, ReduceMean, ReduceL1, AveragePool, GlobalAveragePool, CumSum)
  the same op on ``|x|``, a normalization that computes statistics (LayerNormalization,
  training-mode BatchNormalization, InstanceNormalization) ``(S_x + |mean|) / sigma * |scale|
  + S_bias``, its input's twin carried over sigma. An error a product's operands carry is
  spread over its many terms, and the allowance's units cover it in proportion to them
  (``docs/check.md``); a twin carried through every product instead would grow by the worst
  case of each (about the square root of the terms it sums), exponentially in a model's depth,
  and so would a normalization's worst case (its mean's and its deviation's errors aligned
  with every element's: three times per layer);
- an elementwise sum (Add, Sub, Sum, Mean) adds its inputs' twins; an elementwise product or
  quotient carries them to first order (``S_a |b| + |a| S_b``, ``(S_a + |y| S_b) / |b|``); an
  inference-mode BatchNormalization is affine; data movement and selection move them as they
  move the values (Max and Min both take the larger twin, MaxPool and ReduceMax the largest; a
  SplitToSequence splits them, a SequenceAt takes its piece's);
- an elementwise function with a bounded slope ``L`` gives ``L S + |y|`` (Tanh, Sigmoid, Erf,
  Gelu, ...); ``sqrt``, ``exp``, ``log``, ``1/x`` and a constant power their first-order
  derivative times the twin, plus ``|y|``;
- a value read from outside (a graph input, an initializer, a Constant) and the result of any
  other op (Softmax, whose terms are positive; an op of another domain, a subgraph, a
  comparison) is its own magnitude, ``|v|``: the element's own rounding alone.

Every twin is at least the value's magnitude. An element whose twin is not finite (a division
by zero, an overflow in a half type) has none: the dtype's tolerance alone judges it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

from onnxfold.check.running.cones import cone_of
from onnxfold.check.running.models import read_constant
from onnxfold.check.running.runner import Fed, MachineShort, NodesModel, RunFailed, Wanted
from onnxfold.check.running.stage_plan import plan_alone
from onnxfold.check.running.stages import Chain

# prefix of every name this module makes (the original's names are left as they are)
PREFIX = "onnxfold.magnitude/"

# products that sum: their twin is the op on the absolute values of the operands it
# multiplies; the input at an index of the tuple is added (a bias): its twin is carried
PRODUCTS: dict[str, tuple[int, ...]] = {
    "MatMul": (), "Gemm": (2,), "Conv": (2,), "ConvTranspose": (2,), "Einsum": ()}
# ops that move or sum their float inputs at these indices ("*": every input): the same op
# applied to the twins gives a magnitude (each result is one of them, or a sum or average of
# them with non-negative weights); other inputs (indices, shapes, axes) are read as they are
MOVES: dict[str, tuple[int, ...] | str] = {
    **dict.fromkeys((
        "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice",
        "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Split", "DepthToSpace",
        "SpaceToDepth", "Relu", "ReduceMax", "GlobalMaxPool", "Resize", "Upsample", "Trilu",
        "Compress", "ReverseSequence", "Cast"), (0,)),
    **dict.fromkeys(("Concat", "Add", "Sum", "Mean", "Max"), "*"),
    "Where": (1, 2), "Pad": (0, 2), "CastLike": (0,), "ScatterElements": (0, 2),
    "ScatterND": (0, 2), "MaxPool": (0,),
}
# reductions and averages that add: the op on the absolute values of their input 0
SUMS = frozenset({"ReduceSum", "ReduceMean", "ReduceL1", "AveragePool", "GlobalAveragePool",
                  "CumSum"})
# the op applied to the twins instead (the twin of a difference is a sum, of a minimum the
# larger of the twins: an element of a minimum is one of its inputs)
SUBSTITUTES = {"Sub": "Add", "Min": "Max", "ReduceMin": "ReduceMax", "Neg": "Identity",
               "Abs": "Identity", "Dropout": "Identity"}


def _lipschitz(node: ir.Node) -> float | None:
    """The largest slope of an elementwise function (None: not one with a bounded slope)."""
    attrs = node.attributes
    slopes: dict[str, Callable[[], float]] = {
        "Tanh": lambda: 1.0, "Sigmoid": lambda: 0.25, "Erf": lambda: 1.13, "Gelu": lambda: 1.13,
        "Softsign": lambda: 1.0, "Softplus": lambda: 1.0, "Sin": lambda: 1.0, "Cos": lambda: 1.0,
        "Atan": lambda: 1.0, "Celu": lambda: 1.0, "Clip": lambda: 1.0, "HardSwish": lambda: 1.5,
        "Mish": lambda: 1.1,
        "Elu": lambda: max(1.0, attrs.get_float("alpha", 1.0)),
        "LeakyRelu": lambda: max(1.0, abs(attrs.get_float("alpha", 0.01))),
        "HardSigmoid": lambda: abs(attrs.get_float("alpha", 0.2)),
        "Selu": lambda: attrs.get_float("gamma", 1.0507) * max(1.0, attrs.get_float(
            "alpha", 1.6733)),
    }
    slope = slopes.get(node.op_type)
    return slope() if slope is not None else None


def _floating(value: ir.Value | None) -> bool:
    """Whether ``value`` is a tensor of floats."""
    return value is not None and isinstance(value.type, ir.TensorType) and \
        value.dtype is not None and value.dtype.is_floating_point()


def _float_sequence(value: ir.Value | None) -> bool:
    """Whether ``value`` is a sequence of float tensors that a split or a construction of
    float tensors made (GPT-2's Q, K and V; onnx's inference may leave its type out)."""
    if value is None:
        return False
    if isinstance(value.type, ir.SequenceType):
        elem = value.type.elem_type
        return isinstance(elem, ir.TensorType) and elem.dtype.is_floating_point()
    node = value.producer()
    return value.type is None and node is not None and node.domain in ("", "ai.onnx") and \
        node.op_type in ("SplitToSequence", "SequenceConstruct") and \
        all(_floating(v) for v in node.inputs[:1])


class _Twins:
    """The twin nodes of one graph: ``of(value)`` is the name of ``value``'s twin, built (with
    the twins it reads) on first use."""

    def __init__(self, graph: ir.Graph, opset: int) -> None:
        self.graph, self.opset = graph, opset
        self.nodes: list[onnx.NodeProto] = []
        self.names: dict[ir.Value, str] = {}
        self.count = 0

    # -- building blocks -------------------------------------------------------------------
    def fresh(self) -> str:
        self.count += 1
        return f"{PREFIX}{self.count}"

    def op(self, op_type: str, inputs: Sequence[str], attrs: Mapping[str, object] | None = None,
           outputs: int = 1) -> list[str]:
        names = [self.fresh() for _ in range(outputs)]
        plain: dict[str, Any] = _plain(attrs or {})
        self.nodes.append(helper.make_node(op_type, list(inputs), names, **plain))
        return names

    def one(self, op_type: str, *inputs: str, **attrs: object) -> str:
        return self.op(op_type, inputs, attrs)[0]

    def scalar(self, number: float, like: ir.Value) -> str:
        """A constant ``number`` of ``like``'s dtype."""
        assert like.dtype is not None
        array = np.array(number, like.dtype.numpy())
        return self.one("Constant", value=onnx.numpy_helper.from_array(array))

    def absolute(self, value: ir.Value) -> str:
        return self.one("Abs", str(value.name))

    def reduce(self, op_type: str, x: str, axes: Sequence[int]) -> str:
        """``op_type`` (ReduceMean, ReduceMax, ReduceSum) over ``axes``, dims kept, in the
        form the model's opset takes."""
        since = 13 if op_type == "ReduceSum" else 18
        if self.opset >= since:
            given = self.one("Constant", value=onnx.numpy_helper.from_array(
                np.array(list(axes), np.int64)))
            return self.one(op_type, x, given, keepdims=1)
        return self.one(op_type, x, axes=list(axes), keepdims=1)

    def per_channel(self, x: str, rank: int) -> str:
        """A vector of channels ``[C]`` shaped ``[1, C, 1, ...]`` to broadcast over a rank-
        ``rank`` tensor in NCHW."""
        axes = [0, *range(2, rank)]
        if self.opset >= 13:
            given = self.one("Constant", value=onnx.numpy_helper.from_array(
                np.array(axes, np.int64)))
            return self.one("Unsqueeze", x, given)
        return self.one("Unsqueeze", x, axes=axes)

    # -- twins -----------------------------------------------------------------------------
    def of(self, value: ir.Value) -> str:
        """The twin of ``value`` (a float value of this graph, or one it reads)."""
        found = self.names.get(value)
        if found is not None:
            return found
        # iteratively: twins of the producers this value's cone needs, in graph order
        pending = [value]
        order: list[ir.Node] = []
        seen: set[ir.Node] = set()
        while pending:
            current = pending.pop()
            node = current.producer()
            if current in self.names or node is None or node.graph is not self.graph or \
                    node in seen:
                continue
            seen.add(node)
            order.append(node)
            pending.extend(v for v in node.inputs if v is not None and v not in self.names and
                           (_floating(v) or _float_sequence(v)))
        positions = {node: i for i, node in enumerate(self.graph)}
        for node in sorted(order, key=positions.__getitem__):
            self._build(node)
        if value not in self.names:  # read from outside: its own magnitude
            self.names[value] = self.absolute(value)
        return self.names[value]

    def _input(self, node: ir.Node, index: int) -> ir.Value | None:
        return node.inputs[index] if index < len(node.inputs) else None

    def _twin_in(self, node: ir.Node, index: int) -> str:
        value = self._input(node, index)
        if value is None:
            return ""
        if not _floating(value):
            return str(value.name)
        producer = value.producer()
        if value not in self.names and (producer is None or producer.graph is not self.graph):
            self.names[value] = self.absolute(value)
        return self.names[value]

    def _build(self, node: ir.Node) -> None:
        outputs = [v for v in node.outputs if _floating(v)]
        if not outputs:
            return
        made = None
        if node.domain in ("", "ai.onnx"):
            made = self._rule(node)
        first = node.outputs[0]
        if node.op_type == "Split" and node.domain in ("", "ai.onnx"):
            self._split(node)
        elif made is not None and _floating(first):
            # every twin is at least the value's magnitude (a rule's terms may fall short
            # where its own rounding is all there is)
            self.names[first] = self.one("Max", made, self.absolute(first))
        for value in outputs:
            if value not in self.names:
                self.names[value] = self.absolute(value)

    def _rule(self, node: ir.Node) -> str | None:
        """The twin of ``node``'s first output, or None (its own magnitude)."""
        op = node.op_type
        if op in PRODUCTS:
            return self._product(node)
        if op in SUMS:
            x = node.inputs[0]
            assert x is not None
            rest = [str(v.name) if v is not None else "" for v in node.inputs[1:]]
            attrs = {a.name: a.value for a in node.attributes.values()}
            return self.op(op, [self.absolute(x), *rest], attrs)[0]
        op_type = SUBSTITUTES.get(op, op)
        if op_type in MOVES and op != "Split":
            return self._moved(node, op_type)
        slope = _lipschitz(node)
        if slope is not None:
            twin = self._twin_in(node, 0)
            return self.one("Add", self.one("Mul", twin, self.scalar(slope, node.outputs[0])),
                            self.absolute(node.outputs[0]))
        if op == "SequenceAt":
            sequence = self._sequence(node.inputs[0])
            index = node.inputs[1]
            if sequence is None or index is None:
                return None
            return self.one("SequenceAt", sequence, str(index.name))
        special: dict[str, Callable[[ir.Node], str | None]] = {
            "Mul": self._mul, "Div": self._div, "Sqrt": self._sqrt, "Reciprocal": self._recip,
            "Exp": self._exp, "Log": self._log, "Pow": self._pow,
            "LayerNormalization": self._layer_norm, "BatchNormalization": self._batch_norm,
            "InstanceNormalization": self._instance_norm,
        }
        rule = special.get(op)
        return rule(node) if rule is not None else None

    def _sequence(self, value: ir.Value | None) -> str | None:
        """The twin of a sequence of float tensors a split or a construction made (its pieces'
        twins), or None (a sequence made otherwise: what reads it is its own magnitude)."""
        if value is None or not _float_sequence(value):
            return None
        found = self.names.get(value)
        if found is not None:
            return found
        node = value.producer()
        if node is None or node.graph is not self.graph or node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type == "SplitToSequence" and _floating(node.inputs[0]):
            rest = [str(v.name) if v is not None else "" for v in node.inputs[1:]]
            attrs = {a.name: a.value for a in node.attributes.values()}
            made = self.op("SplitToSequence", [self._twin_in(node, 0), *rest], attrs)[0]
        elif node.op_type == "SequenceConstruct" and all(_floating(v) for v in node.inputs):
            made = self.one("SequenceConstruct",
                            *(self._twin_in(node, i) for i in range(len(node.inputs))))
        else:
            return None
        self.names[value] = made
        return made

    def _product(self, node: ir.Node) -> str:
        added = PRODUCTS[node.op_type]
        inputs = []
        for i, value in enumerate(node.inputs):
            if value is None:
                inputs.append("")
            elif i in added:
                inputs.append(self._twin_in(node, i))
            else:
                inputs.append(self.absolute(value) if _floating(value) else str(value.name))
        attrs = {a.name: a.value for a in node.attributes.values()}
        for name in ("alpha", "beta"):
            if name in attrs:
                attrs[name] = abs(float(attrs[name]))
        return self.op(node.op_type, inputs, attrs)[0]

    def _moved(self, node: ir.Node, op_type: str) -> str:
        moved = MOVES[op_type]
        inputs = []
        for i, value in enumerate(node.inputs):
            if value is None:
                inputs.append("")
            elif (moved == "*" or i in moved) and _floating(value):
                inputs.append(self._twin_in(node, i))
            else:
                inputs.append(str(value.name))
        attrs = {a.name: a.value for a in node.attributes.values()}
        if node.op_type == "Dropout":
            inputs, attrs = inputs[:1], {}
        return self.op(op_type, inputs, attrs)[0]

    def _split(self, node: ir.Node) -> None:
        inputs = [self._twin_in(node, 0), *(str(v.name) if v is not None else ""
                                            for v in node.inputs[1:])]
        attrs = {a.name: a.value for a in node.attributes.values()}
        made = self.op("Split", inputs, attrs, len(node.outputs))
        for value, twin in zip(node.outputs, made):
            self.names[value] = self.one("Max", twin, self.absolute(value))

    def _mul(self, node: ir.Node) -> str:
        a, b = node.inputs[0], node.inputs[1]
        assert a is not None and b is not None
        return self.one("Add", self.one("Mul", self._twin_in(node, 0), self.absolute(b)),
                        self.one("Mul", self.absolute(a), self._twin_in(node, 1)))

    def _div(self, node: ir.Node) -> str:
        b, out = node.inputs[1], node.outputs[0]
        assert b is not None
        carried = self.one("Mul", self.absolute(out), self._twin_in(node, 1))
        return self.one("Div", self.one("Add", self._twin_in(node, 0), carried),
                        self.absolute(b))

    def _sqrt(self, node: ir.Node) -> str:
        out = node.outputs[0]
        twice = self.one("Mul", self.absolute(out), self.scalar(2.0, out))
        return self.one("Add", self.one("Div", self._twin_in(node, 0), twice),
                        self.absolute(out))

    def _recip(self, node: ir.Node) -> str:
        out = node.outputs[0]
        square = self.one("Mul", str(out.name), str(out.name))
        return self.one("Add", self.one("Mul", self._twin_in(node, 0), square),
                        self.absolute(out))

    def _exp(self, node: ir.Node) -> str:
        out = node.outputs[0]
        one = self.scalar(1.0, out)
        return self.one("Mul", self.absolute(out), self.one("Add", self._twin_in(node, 0), one))

    def _log(self, node: ir.Node) -> str:
        x = node.inputs[0]
        assert x is not None
        return self.one("Add", self.one("Div", self._twin_in(node, 0), self.absolute(x)),
                        self.absolute(node.outputs[0]))

    def _pow(self, node: ir.Node) -> str | None:
        x, p = node.inputs[0], node.inputs[1]
        if x is None or p is None or not _constant(p) or p.dtype != x.dtype:
            return None  # a power read from the inputs: its own magnitude
        out = node.outputs[0]
        slope = self.one("Mul", self.one("Abs", str(p.name)), self.absolute(out))
        return self.one("Add", self.one("Mul", slope, self.one(
            "Div", self._twin_in(node, 0), self.absolute(x))), self.absolute(out))

    def _normalized(self, node: ir.Node, axes: Sequence[int], epsilon: float) -> tuple[str, str]:
        """(the magnitude of ``n = (x - mean) / sigma`` over ``axes``: its terms, ``(S_x +
        |mean|) / sigma``, ``x``'s twin carried; and ``|n|``)."""
        x = node.inputs[0]
        assert x is not None
        name = str(x.name)
        mean = self.reduce("ReduceMean", name, axes)
        centred = self.one("Sub", name, mean)
        variance = self.reduce("ReduceMean", self.one("Mul", centred, centred), axes)
        sigma = self.one("Sqrt", self.one("Add", variance, self.scalar(epsilon, x)))
        terms = self.one("Add", self._twin_in(node, 0), self.one("Abs", mean))
        return self.one("Div", terms, sigma), self.one("Abs", self.one("Div", centred, sigma))

    def _affine(self, node: ir.Node, normalized: tuple[str, str], rank: int | None) -> str:
        """``n * scale + bias``'s twin from ``n``'s (first order, the scale's and the bias's
        twins carried), scale and bias per channel where ``rank`` is given (NCHW), else
        broadcast as they are."""
        twin, size = normalized
        terms = []
        for index, times in ((1, True), (2, False)):
            value = self._input(node, index)
            if value is None:
                continue
            magnitude, own = self.absolute(value), self._twin_in(node, index)
            if rank is not None:
                magnitude, own = self.per_channel(magnitude, rank), self.per_channel(own, rank)
            if times:
                terms.append(self.one("Add", self.one("Mul", twin, magnitude),
                                      self.one("Mul", size, own)))
            else:
                terms.append(own)
        if not terms:
            return twin
        return terms[0] if len(terms) == 1 else self.one("Add", *terms)

    def _layer_norm(self, node: ir.Node) -> str | None:
        axis = node.attributes.get_int("axis", -1)
        rank = _rank(node.inputs[0])
        if axis < 0:
            axes = list(range(axis, 0))
        elif rank is not None:
            axes = list(range(axis, rank))
        else:
            return None
        epsilon = node.attributes.get_float("epsilon", 1e-5)
        return self._affine(node, self._normalized(node, axes, epsilon), None)

    def _batch_norm(self, node: ir.Node) -> str | None:
        rank = _rank(node.inputs[0])
        epsilon = node.attributes.get_float("epsilon", 1e-5)
        if node.attributes.get_int("training_mode", 0) == 1:
            if rank is None or rank < 2:
                return None
            return self._affine(node, self._normalized(node, [0, *range(2, rank)], epsilon),
                                rank)
        # inference: (x - mean) * scale / sqrt(var + eps) + bias, affine in x and the mean:
        # the op itself on the twins, the mean's negated so that it adds
        inputs = [self._twin_in(node, 0), self.absolute(node.inputs[1]),  # type: ignore[arg-type]
                  self._twin_in(node, 2), self.one("Neg", self._twin_in(node, 3)),
                  str(node.inputs[4].name)]  # type: ignore[union-attr]
        return self.one("BatchNormalization", *inputs, epsilon=epsilon)

    def _instance_norm(self, node: ir.Node) -> str | None:
        rank = _rank(node.inputs[0])
        if rank is None or rank < 3:
            return None
        epsilon = node.attributes.get_float("epsilon", 1e-5)
        return self._affine(node, self._normalized(node, list(range(2, rank)), epsilon), rank)


def _plain(attrs: Mapping[str, object]) -> dict[str, object]:
    """Attribute values as ``helper.make_node`` takes them (graphs and tensors as protos)."""
    plain: dict[str, object] = {}
    for name, value in attrs.items():
        if isinstance(value, ir.TensorProtocol):
            plain[name] = ir.serde.serialize_tensor(value)
        elif isinstance(value, ir.Graph):
            plain[name] = ir.serde.serialize_graph(value)
        elif isinstance(value, tuple):
            plain[name] = list(value)
        else:
            plain[name] = value
    return plain


def _rank(value: ir.Value | None) -> int | None:
    return len(value.shape) if value is not None and value.shape is not None else None


def _constant(value: ir.Value) -> bool:
    """Whether ``value`` is a constant of the graph (an initializer or a Constant's output)."""
    producer = value.producer()
    return value.const_value is not None or (producer is not None and
                                             producer.op_type == "Constant")


def cone(graph: ir.Graph, values: Sequence[ir.Value]) -> list[ir.Node]:
    """The nodes of ``graph`` computing ``values`` (subgraphs' reads included), in order."""
    nodes, _ = cone_of(graph, values)
    return [node for node in graph if node in nodes]


def twin_nodes(model: ir.Model, values: Sequence[ir.Value]) -> tuple[list[onnx.NodeProto],
                                                                     list[str]]:
    """The original's nodes computing ``values`` (serialized), followed by those of their
    twins, and the twins' names (one per value)."""
    graph = model.graph
    opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1))
    twins = _Twins(graph, opset)
    names = [twins.of(value) for value in values]
    original = [ir.serde.serialize_node(node) for node in cone(graph, values)]
    return [*original, *twins.nodes], names


def magnitudes(model: ir.Model, values: Sequence[ir.Value], inputs: Mapping[str, np.ndarray],
               libraries: Sequence[str] = ()) -> list[np.ndarray]:
    """The twins of ``values`` of ``model`` (the check's copy of the original, its types
    inferred) for the graph inputs ``inputs``, as float64. Raises the runner's RunFailed or
    MachineShort."""
    nodes, names = twin_nodes(model, values)
    read = _names_read(nodes)  # (a subgraph's reads of outer values too)
    constants = {str(name): read_constant(value.const_value)
                 for name, value in model.graph.initializers.items()
                 if value.const_value is not None and name not in inputs and name in read}
    wanted = [Wanted(name, value.dtype.numpy() if value.dtype is not None else None)
              for name, value in zip(names, values)]
    built = NodesModel(nodes, wanted, constants=constants,
                       inputs={name: Fed.of(name, array) for name, array in inputs.items()
                               if name in read},
                       opsets=dict(model.opset_imports), ir_version=model.ir_version,
                       prepacking=False,
                       functions=[ir.serde.serialize_function(f)
                                  for f in model.functions.values()])
    arrays = built.run({k: v for k, v in inputs.items() if k in read}, libraries)
    return [np.asarray(a, np.float64) for a in arrays]


def _names_read(nodes: Sequence[onnx.NodeProto]) -> set[str]:
    """Every name ``nodes`` read, their subgraphs' included."""
    found: set[str] = set()
    pending = list(nodes)
    while pending:
        node = pending.pop()
        found.update(node.input)
        for attr in node.attribute:
            for graph in [attr.g] if attr.HasField("g") else list(attr.graphs):
                pending.extend(graph.node)
    return found


def twin_model(model: ir.Model, values: Sequence[ir.Value]) -> ir.Model:
    """The original's nodes computing ``values`` and their twins as a model of their own,
    whose outputs are the twins (in the order of ``values``) and whose initializers are the
    original's own tensors (not copied: a stage reads its weights where the original's are)."""
    nodes, names = twin_nodes(model, values)
    graph = model.graph
    read = _names_read(nodes)
    proto = onnx.GraphProto(name="onnxfold-magnitudes", node=nodes)
    proto.input.extend(ir.serde.serialize_value(v) for v in graph.inputs if v.name in read)
    for name, value in graph.initializers.items():
        tensor = value.const_value
        if name in read and tensor is not None:  # a placeholder, replaced below
            placeholder = onnx.TensorProto(name=name, data_type=tensor.dtype.value,
                                           dims=tensor.shape.numpy(),
                                           data_location=onnx.TensorProto.EXTERNAL)
            for key, text in (("location", "onnxfold-placeholder"), ("offset", "0"),
                              ("length", str(tensor.nbytes))):
                placeholder.external_data.add(key=key, value=text)
            proto.initializer.append(placeholder)
    for name, value in zip(names, values):
        if value.dtype is None:
            raise RunFailed(f"{value.name}: no tensor type to give its magnitudes")
        proto.output.append(helper.make_tensor_value_info(name, value.dtype.value, None))
    built = helper.make_model(proto, opset_imports=[
        helper.make_opsetid(domain, version) for domain, version in model.opset_imports.items()])
    built.ir_version = model.ir_version
    built.functions.extend(ir.serde.serialize_function(f) for f in model.functions.values())
    # the types of the twins (a stage hands on what the next one reads, by its dtype)
    try:
        built = onnx.shape_inference.infer_shapes(built)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as e:
        raise RunFailed(f"the magnitudes' model: {str(e).splitlines()[0][:200]}") from None
    twin = ir.serde.deserialize_model(built)
    for name, value in twin.graph.initializers.items():
        value.const_value = graph.initializers[name].const_value
    return twin


def magnitudes_in_stages(model: ir.Model, values: Sequence[ir.Value],
                         feed_sets: Sequence[Mapping[str, np.ndarray]], budget: int,
                         libraries: Sequence[str] = (), level: str = "all"
                         ) -> list[list[np.ndarray] | Exception]:
    """:func:`magnitudes` for each of ``feed_sets``, the original and its twins run stage by
    stage (at most ``budget`` bytes of weights each: where no session over the whole
    original fits); each set's twins as float64, or what stopped its run (the runner's
    RunFailed or MachineShort)."""
    twin = twin_model(model, values)
    outputs = [str(v.name) for v in twin.graph.outputs]
    chain = Chain(twin, plan_alone(twin, budget), "the original's magnitudes", libraries,
                  level)
    chain.run_all(feed_sets)
    found: list[list[np.ndarray] | Exception] = []
    for feeds in feed_sets:
        try:
            found.append([np.asarray(a, np.float64) for a in chain.run(outputs, feeds)])
        except (RunFailed, MachineShort) as e:
            found.append(e)
    return found
