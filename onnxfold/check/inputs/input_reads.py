"""How each value of a model depends on its graph inputs: on their values, or only on their
shapes (their dims).

A fold computes a value once, for every input the model will be given: it is right only if the
value does not depend on the inputs' values, and depends on their dims only where they are
static (or where it is shown constant over them). This follows every value of the main graph
from its inputs, in graph order, with five sets of inputs each (bitmasks):

- ``values_direct``: inputs whose values reach the value's values as values (a fold of it
  baked them);
- ``values_via_shapes``: inputs whose values reach its values only through a shape (``Shape``
  of a tokenizer's output: data-dependent, yet often read only at a static axis);
- ``values_of_shape``: inputs whose values reach its shape (a Reshape to a shape read from an
  input's values, a NonZero);
- ``shapes_of_values``: inputs whose shapes reach its values (``Shape(x)``, a broadcast);
- ``shapes_of_shape``: inputs whose shapes reach its shape.

What an op reads of its inputs comes from the ONNX spec (``running.op_reads``, the check's own
facts): inputs whose shape alone it reads, whose element type alone, and whose values decide
its output shape (every other input of a default-domain op decides it by its shape alone).
An op of another domain, a function call or an op with subgraphs is taken to read everything
and to shape its outputs by everything: the analysis never misses a read, it may only see one
that is not there, but that an input declared empty (an axis of size 0) has no values, and
a ``Where`` whose constant condition picks one branch everywhere reads the other's shape
alone. An ``If`` is read output by output: each reads its condition and what its
own cone reads in either branch (a fold of an output whose cones read only constants, beside
one that reads an input, was called a fold of an input's values). Which input values reach a
value only through an op read whole is kept apart (``values_shown`` holds the others): such a
read may not be there, so a fold of it is compared on the input sets, never failed unrun.

This is the check's own reading of the original model: it shares nothing with the analyses
the fold ran (``onnxfold.analysis``), so that a wrong fold cannot be confirmed by the same
mistake.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import onnx_ir as ir

from onnxfold.check.running.op_reads import SHAPE_FROM_VALUES, SHAPE_ONLY_READS, TYPE_ONLY_READS
from onnxfold.ir.constants import constant_array
from onnxfold.ir.graph import captured_values, static_shape, subgraphs

_PICKED_MAX = 1 << 16  # elements of a Where's constant condition read to see what it picks


@dataclass(frozen=True)
class Reads:
    """The sets of a value (bitmasks of graph inputs, see module)."""

    values_direct: int = 0  # inputs whose values reach its values as values
    values_via_shapes: int = 0  # ... through a shape (a Shape of a value they decide)
    values_of_shape: int = 0
    shapes_of_values: int = 0
    shapes_of_shape: int = 0
    # of ``values_direct``, those reaching it by a path of ops whose reads the spec gives
    # (none read whole: an op of another domain, a function call, an op with subgraphs, which
    # may read an input without its value deciding this one)
    values_shown: int = 0

    @property
    def values(self) -> int:
        """Inputs whose values reach this value (its values or its shape), by any path."""
        return self.values_direct | self.values_via_shapes | self.values_of_shape

    @property
    def shapes(self) -> int:
        """Inputs whose shapes reach this value (its values or its shape)."""
        return self.shapes_of_values | self.shapes_of_shape


NONE = Reads()


class InputReads:
    """The :class:`Reads` of every value of ``model``'s main graph. ``inputs``: the graph
    inputs that are fed (an initializer that is also an input and is not fed keeps its
    value: a constant)."""

    def __init__(self, model: ir.Model, inputs: list[ir.Value]) -> None:
        self.inputs = list(inputs)
        self._bit = {value: 1 << i for i, value in enumerate(self.inputs)}
        self.reads: dict[ir.Value, Reads] = {}
        self.where: dict[tuple[ir.Value, int], ir.Node] = {}  # (value, input bit) -> reader
        for value in self.inputs:
            bit = self._bit[value]
            values = 0 if _empty(value) else bit  # (an empty tensor has no values to read)
            self.reads[value] = Reads(values_direct=values, shapes_of_shape=bit,
                                      values_shown=values)
        for node in model.graph:
            self._visit(node)

    def of(self, value: ir.Value) -> Reads:
        """``value``'s reads (none for a constant, or a value of another graph)."""
        return self.reads.get(value, NONE)

    def names(self, mask: int) -> list[str]:
        """The inputs of a bitmask, by name."""
        return [str(v.name) for v in self.inputs if mask & self._bit[v]]

    def reader(self, value: ir.Value, mask: int) -> ir.Node | None:
        """The first node that reads the values of an input of ``mask`` on the way to
        ``value`` (where a fold of ``value`` would have read an input), if known."""
        for v in self.inputs:
            if mask & self._bit[v]:
                node = self.where.get((value, self._bit[v]))
                if node is not None:
                    return node
        return None

    def _visit(self, node: ir.Node) -> None:
        default = node.domain in ("", "ai.onnx")
        reads = [(i, v) for i, v in enumerate(node.inputs) if v is not None]
        if default and node.op_type == "If":  # each output: its condition, and what its
            for k, out in enumerate(node.outputs):  # own cone in either branch reads
                self._record(node, [*reads, *((-1, v) for v in _branch_reads(node, k))],
                             [out])
            return
        reads += [(-1, v) for v in captured_values(node)]  # an outer value a subgraph reads
        self._record(node, reads, node.outputs, self._unpicked(node) if default else ())

    def _unpicked(self, node: ir.Node) -> tuple[int, ...]:
        """The branch of a ``Where`` whose constant condition never picks it (its shape alone
        is read: a broadcast), else none."""
        cond = node.inputs[0] if node.op_type == "Where" and len(node.inputs) == 3 else None
        if cond is None or cond in self._bit:
            return ()
        shape = static_shape(cond)
        if shape is None or math.prod(shape) > _PICKED_MAX:
            return ()
        picks = constant_array(cond)
        if picks is None or picks.size == 0:
            return ()
        return (2,) if picks.all() else (1,) if not picks.any() else ()

    def _record(self, node: ir.Node, reads: list[tuple[int, ir.Value]],
                outputs: Sequence[ir.Value], shape_only: Collection[int] = ()) -> None:
        """The :class:`Reads` of ``outputs`` of ``node``, computed from what it reads
        (``reads``: input index and value; -1: an outer value a subgraph reads;
        ``shape_only``: inputs whose shape alone it reads here)."""
        default = node.domain in ("", "ai.onnx")
        by_values = SHAPE_FROM_VALUES.get(node.op_type, ()) if default else "*"
        whole = not default or bool(subgraphs(node))
        direct = via = values_shape = shapes = shapes_shape = shown = 0
        found: dict[int, ir.Node] = {}
        for i, value in reads:
            if default and (node.op_type, i) in TYPE_ONLY_READS:
                continue
            r = self.of(value)
            if default and ((node.op_type, i) in SHAPE_ONLY_READS or i in shape_only):
                via |= r.values_of_shape  # its shape, with what decides it
                shapes |= r.shapes_of_shape
            else:
                direct |= r.values_direct
                shown |= 0 if whole else r.values_shown
                via |= r.values_via_shapes | r.values_of_shape  # (a broadcast reads shapes)
                shapes |= r.shapes_of_values | r.shapes_of_shape
                for bit in _bits(r.values_direct):  # where an input's values are read
                    found.setdefault(bit, self.where.get((value, bit), node))
            if by_values == "*" or i == -1 or (isinstance(by_values, tuple) and i in by_values):
                values_shape |= r.values
                shapes_shape |= r.shapes_of_values | r.shapes_of_shape
            else:
                values_shape |= r.values_of_shape
                shapes_shape |= r.shapes_of_shape
        if not (direct | via | values_shape | shapes | shapes_shape):
            return
        result = Reads(direct, via, values_shape, shapes, shapes_shape, shown)
        for out in outputs:
            self.reads[out] = result
            for bit, reader in found.items():
                self.where[(out, bit)] = reader


def _empty(value: ir.Value) -> bool:
    """Whether ``value`` is declared with an axis of size 0 (no elements, whatever its other
    dims)."""
    return value.shape is not None and any(d == 0 for d in value.shape if isinstance(d, int))


def _branch_reads(node: ir.Node, k: int) -> list[ir.Value]:
    """The outer values that output ``k`` of an If reads in either branch: those its own cone
    in the branch reaches (what a branch computes for its other outputs does not reach it;
    a node of the cone with subgraphs reads all they capture)."""
    found: list[ir.Value] = []
    seen: set[ir.Value] = set()
    for branch in subgraphs(node):
        inner = {*branch.inputs, *branch.initializers.values()}
        stack = list(branch.outputs[k:k + 1])
        while stack:
            value = stack.pop()
            if value in seen or value in inner:
                continue
            seen.add(value)
            producer = value.producer()
            if producer is None or producer.graph is not branch:
                found.append(value)  # a value of an enclosing scope
                continue
            stack += [v for v in producer.inputs if v is not None]
            stack += captured_values(producer)
    return found


def _bits(mask: int) -> list[int]:
    """The single bits of ``mask``."""
    bits = []
    while mask:
        low = mask & -mask
        bits.append(low)
        mask ^= low
    return bits
