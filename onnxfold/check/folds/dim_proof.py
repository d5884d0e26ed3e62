"""Whether a value of the original is the same for every value of its graph inputs' dynamic
dims: shown, not sampled, by the check's own reading of the graph.

A value computed from input shapes (``Shape(x)``, a broadcast) is constant over the dims when
every way the dims reach it passes through a value shown constant. What is shown constant is
decided here, element by element, by a forward pass over the original (:class:`_Constancy`):
an element of ``Shape(x)`` is constant where onnx's shape inference of the check's own copy
(``cones.reinferred``: its intermediate shapes inferred again from its inputs) gives that dim
as a number; ``Gather``, ``Slice`` (step 1), ``Concat``, reshapes and elementwise ops with
constant positions carry each element's constancy to where it goes; any other deterministic
op of the default domain is constant where everything it reads is. Nothing here asks the
fold's symbolic dims or the rules' shape steps (``onnxfold.analysis``, ``rules/shape_*``):
a fault in the fold's shape code is not confirmed by the same code
(``tests/unit/test_import_layers.py`` holds the imports apart). The check re-derives such a
value at every binding of the dims it runs besides, so a proof only decides whether a match
holds "for every input".
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import onnx_ir as ir

from onnxfold.check.running.op_reads import SHAPE_FROM_VALUES, SHAPE_ONLY_READS, TYPE_ONLY_READS
from onnxfold.ir.constants import constant_array
from onnxfold.ir.graph import captured_values, is_default_op, static_shape, subgraphs

# ops whose result is not decided by what they read: never shown constant
_NOT_DETERMINED = frozenset({
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
    "Bernoulli", "Dropout"})
# ops computing each output element from the elements at the same position of their inputs
# (numpy broadcasting): a constant element stays one where every input's is
_ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Neg", "Abs", "Cast", "Equal", "Less",
    "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor", "Where", "Sign",
    "Ceil", "Floor", "Round", "Sqrt", "Reciprocal"})
# ops that keep the elements in their order and only give them another shape
_RESHAPES = frozenset({"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity"})
_MASKED_ELEMENTS = 4096  # values with more elements are tracked whole (a shape value is short)

# a value's constancy: True (all of it), False (not shown), or one bool per element (C order)
Constancy = bool | np.ndarray


class DimProof:
    """Shows values of ``model`` constant over its dynamic dims. ``fed``: its graph inputs
    (their dims are the dynamic ones where not static)."""

    def __init__(self, model: ir.Model, fed: Collection[ir.Value]) -> None:
        self.model, self.fed = model, set(fed)
        self._shown: dict[ir.Value, Constancy] | None = None

    def constant(self, value: ir.Value) -> bool:
        """Whether the forward pass shows every element of ``value`` constant over the dims."""
        if self._shown is None:
            self._shown = _Constancy(self.model.graph, self.fed).run()
        return self._shown.get(value, False) is True

    def proved(self, value: ir.Value) -> bool:
        """Whether every path from the dims to ``value`` passes through a value shown
        constant (see module)."""
        seen: set[tuple[ir.Value, bool]] = set()
        stack: list[tuple[ir.Value, bool]] = [(value, False)]  # (value, only its shape read)
        while stack:
            current, shape_only = stack.pop()
            if (current, shape_only) in seen or (current, False) in seen:
                continue
            seen.add((current, shape_only))
            if current.const_value is not None and current not in self.fed:
                continue
            if shape_only and static_shape(current) is not None:
                continue
            if not shape_only and self.constant(current):
                continue
            producer = current.producer()
            if current in self.fed or producer is None or producer.graph is not self.model.graph:
                return False  # a dynamic dim (or an outer value) reached with nothing known
            if producer.op_type in _NOT_DETERMINED or not _determined(producer):
                return False  # no path from the dims, and still no constant
            stack.extend(self._reads(producer, shape_only))
        return True

    @staticmethod
    def _reads(node: ir.Node, shape_only: bool) -> list[tuple[ir.Value, bool]]:
        """What of ``node``'s inputs decides its outputs' values (``shape_only`` False) or
        their shape: each input, and whether only its shape counts."""
        default = node.domain in ("", "ai.onnx")
        by_values = SHAPE_FROM_VALUES.get(node.op_type, ()) if default else "*"
        reads = []
        for i, value in enumerate(node.inputs):
            if value is None or (default and (node.op_type, i) in TYPE_ONLY_READS):
                continue
            if not shape_only:
                reads.append((value, default and (node.op_type, i) in SHAPE_ONLY_READS))
            else:
                reads.append((value, not (by_values == "*" or
                                          (isinstance(by_values, tuple) and i in by_values))))
        reads += [(v, False) for v in captured_values(node)]
        return reads


class _Constancy:
    """One forward pass over ``graph`` in node order: each value's :data:`Constancy`."""

    def __init__(self, graph: ir.Graph, fed: Collection[ir.Value]) -> None:
        self.graph, self.fed = graph, fed
        self.shown: dict[ir.Value, Constancy] = {}

    def run(self) -> dict[ir.Value, Constancy]:
        for value in self.graph.initializers.values():
            self.shown[value] = value not in self.fed
        for node in self.graph:
            try:
                found = self._node(node)
            except (ValueError, IndexError, TypeError):  # what it cannot read, it does not show
                found = [False] * len(node.outputs)
            for out, constancy in zip(node.outputs, found):
                self.shown[out] = _normal(constancy, out)
        return self.shown

    def of(self, value: ir.Value | None) -> Constancy:
        return True if value is None else self.shown.get(value, False)

    def _node(self, node: ir.Node) -> list[Constancy]:
        outs = len(node.outputs)
        if not is_default_op(node) or node.op_type in _NOT_DETERMINED:
            return [False] * outs
        op, reads = node.op_type, [self.of(v) for v in node.inputs]
        if op == "Constant":
            return [True]
        if any(self.of(v) is not True for v in captured_values(node)) or \
                not _determined(node):
            return [False] * outs
        if op in ("Shape", "Size", "EyeLike"):
            return [self._shape_of(node)]
        if op == "Gather" and len(reads) == 2:
            return [self._gathered(node, reads)]
        if op == "Slice" and len(reads) >= 3:
            return [self._sliced(node, reads)]
        if op == "Concat":
            return [self._concatenated(node, reads)]
        if op in _RESHAPES and reads and isinstance(reads[0], np.ndarray) and \
                all(r is True for r in reads[1:]):
            return [reads[0]]  # the same elements in the same order (sizes checked by _normal)
        if op in _ELEMENTWISE and outs == 1:
            return [_elementwise(node, reads)]
        return [all(r is True for r in reads)] * outs

    def _shape_of(self, node: ir.Node) -> Constancy:
        """``Shape(x)`` (with its ``start``/``end``): constant where x's dim is a number;
        ``Size``, ``EyeLike``: where all of them are."""
        shape = node.inputs[0].shape if node.inputs[0] is not None else None
        if shape is None:
            return False
        dims = np.array([isinstance(d, int) and d >= 0 for d in shape.dims], bool)
        if node.op_type != "Shape":
            return bool(dims.all())
        rank = len(dims)
        start = node.attributes.get_int("start", 0)
        end = node.attributes.get_int("end", rank)
        start, end = (max(0, min(rank, k + rank if k < 0 else k)) for k in (start, end))
        return dims[start:end]

    def _gathered(self, node: ir.Node, reads: list[Constancy]) -> Constancy:
        data, indices = reads
        known = self._array(node.inputs[1])
        if isinstance(data, np.ndarray) and data.ndim == 1 and known is not None and \
                node.attributes.get_int("axis", 0) in (0, -1) and known.dtype.kind in "iu":
            size = data.shape[0]
            if ((known < -size) | (known >= size)).any():
                return False  # onnxruntime refuses it: nothing to show
            return data[np.where(known < 0, known + size, known)]
        return data is True and indices is True

    def _sliced(self, node: ir.Node, reads: list[Constancy]) -> Constancy:
        data = reads[0]
        if isinstance(data, np.ndarray) and data.ndim == 1:
            starts, ends = self._array(node.inputs[1]), self._array(node.inputs[2])
            axes = self._array(node.inputs[3]) if len(node.inputs) > 3 else None
            steps = self._array(node.inputs[4]) if len(node.inputs) > 4 else None
            if starts is not None and ends is not None and starts.size == ends.size == 1 and \
                    (axes is None or int(axes.reshape(-1)[0]) in (0, -1)) and \
                    (steps is None or int(steps.reshape(-1)[0]) == 1):
                # step 1: onnx's clamping of start and end is Python's
                return data[int(starts.reshape(-1)[0]):int(ends.reshape(-1)[0])]
        return all(r is True for r in reads)

    def _concatenated(self, node: ir.Node, reads: list[Constancy]) -> Constancy:
        if all(r is True for r in reads):
            return True
        if node.attributes.get_int("axis", 0) not in (0, -1):
            return False
        parts = []
        for value, constancy in zip(node.inputs, reads):
            shape = static_shape(value) if value is not None else None
            if shape is None or len(shape) != 1:
                return False
            parts.append(constancy if isinstance(constancy, np.ndarray) else
                         np.full(shape[0], bool(constancy)))
        return np.concatenate(parts) if parts else True

    def _array(self, value: ir.Value | None) -> np.ndarray | None:
        """The values of an initializer no caller overrides, or of a Constant node's output;
        None for anything else (a value only known to be constant gives no positions)."""
        return None if value is None or value in self.fed else constant_array(value)

def _determined(node: ir.Node) -> bool:
    """Whether nothing inside ``node``'s subgraphs is another domain's op or one whose result
    its inputs do not decide."""
    return not any(not is_default_op(inner) or inner.op_type in _NOT_DETERMINED
                   for graph in subgraphs(node)
                   for inner in ir.traversal.RecursiveGraphIterator(graph))


def _elementwise(node: ir.Node, reads: list[Constancy]) -> Constancy:
    """Each output element constant where the inputs' elements at its position are: exact
    where every partly constant input has the output's static shape, else all or nothing."""
    out = static_shape(node.outputs[0])
    masks = [r for r in reads if isinstance(r, np.ndarray)]
    if not masks:
        return all(r is True for r in reads)
    if out is None or any(m.size != int(np.prod(out)) for m in masks) or \
            any(v is not None and isinstance(r, np.ndarray) and static_shape(v) != out
                for v, r in zip(node.inputs, reads)):
        return False
    found = np.ones(int(np.prod(out)), bool)
    for r in reads:
        found &= r if isinstance(r, np.ndarray) else bool(r)
    return found


def _normal(constancy: Constancy, value: ir.Value) -> Constancy:
    """``constancy`` as held: True where every element is; an element mask only where it
    matches ``value``'s static number of elements (else all or nothing)."""
    if not isinstance(constancy, np.ndarray):
        return bool(constancy)
    flat = constancy.reshape(-1)
    if flat.all():
        return True
    shape = static_shape(value)
    if shape is None or int(np.prod(shape)) != flat.size or flat.size > _MASKED_ELEMENTS:
        return False
    return flat.reshape(shape) if len(shape) == 1 else flat
