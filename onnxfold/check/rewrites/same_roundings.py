"""Whether a rewrite's replacement rounds the same values the same way as the window it
replaced: the check's own reading of the two windows, never the rule's word.

A rewrite that only moves data (a reshape or a transpose moved across an elementwise op, a
selection reordered) leaves every rounding of a float as it was, and its replacement must give
the replaced window's bits; one that merges, reorders or reassociates float arithmetic
(``(x * k) * c -> x * (k * c)``, a sum regrouped) rounds other values, and is judged within a
tolerance. The rule that made a rewrite declares which it does (``rounds_differently``); were
the check to read that, a rule that declared wrongly would loosen the check on its own
rewrites (issue 63). So the check reads the windows: every value is the *expression* that
computes it from the window's leaves (a leaf by the original's name of it, a constant by its
bytes), with data movement and selection (the ``exact_ops`` that round no float) seen
through and a commutative op's operands unordered. A replacement must give the replaced
window's bits where every node of both windows is exact and each replaced value has its
replacement's expression.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.check.judging import exact_ops
from onnxfold.rewrite.log import RewriteRecord, Window

# ops whose float result is rounded (a window holding one may compute it in another order):
# the nodes an expression is made of
ROUNDING = frozenset({"Add", "Sub", "Mul", "Div", "Sqrt", "Reciprocal", "Cast", "CastLike",
                      "DequantizeLinear"})
# whose operands may be swapped without changing a bit (IEEE + and * are commutative)
_COMMUTATIVE = frozenset({"Add", "Mul"})
# the input of each data movement op whose elements it moves (the others say where)
_MOVED = {"Where": (1, 2), "Concat": None, "Max": None, "Min": None}  # None: every input


class Roundings:
    """The check's reading of rewrites against one original graph (``original``: None, leaves
    by their names alone): :meth:`same` for each record."""

    def __init__(self, original: ir.Graph | None = None) -> None:
        self.leaves = _Leaves(original)

    def same(self, record: RewriteRecord) -> bool:
        """Whether ``record``'s replacement must give the bits of the window it replaced:
        every node of both is exact (``exact_ops``), and each replaced value is computed from
        the same leaves by the same roundings as its replacement (see the module), the
        original's data movement seen through too (a rewrite that merges two reshapes reads
        the first one's input where the window it replaced read its output)."""
        before, after = record.before, record.after
        if before is None or after is None or len(before.outputs) != len(after.outputs):
            return False
        if not all(exact_ops.exact(n) for w in (before, after) for n in w.nodes):
            return False
        old, new = _Expressions(before, self.leaves), _Expressions(after, self.leaves)
        return all(old.of(a) == new.of(b) for a, b in zip(before.outputs, after.outputs))


class _Leaves:
    """The expression of an original's value a window reads: its name, or, where the original
    moves it from another value or leaves it as another is (``x * 1``), that value's
    (``original``: None, its name alone)."""

    def __init__(self, original: ir.Graph | None) -> None:
        self.values: dict[str, ir.Value] = {}
        self.fed: set[str] = set()  # graph inputs (an initializer among them may be fed)
        if original is not None:
            self.fed = {str(v.name) for v in original.inputs}
            self.values = {str(v.name): v for v in [*original.inputs,
                                                     *original.initializers.values()]}
            self.values.update((str(o.name), o) for node in original for o in node.outputs
                               if o.name)
        self.known: dict[str, object] = {}

    def dtype(self, name: str) -> int | None:
        """The onnx dtype of the original's value ``name`` (None: unknown)."""
        value = self.values.get(name)
        return None if value is None or value.dtype is None else int(value.dtype)

    def of(self, name: str) -> object:
        if name not in self.known:
            self.known[name] = self._expression(name)
        return self.known[name]

    def _expression(self, name: str) -> object:
        value = self.values.get(name)
        node = value.producer() if value is not None else None
        if node is None or not exact_ops.exact(node):
            return ("leaf", name)
        inputs = [str(v.name) if v is not None else "" for v in node.inputs]
        kept = _neutral(node.op_type, inputs, self._constant)
        if kept is not None:
            return self.of(inputs[kept])
        if node.op_type in ROUNDING:
            return ("leaf", name)
        moved = _moved_inputs(node.op_type, inputs)
        if not moved:
            return ("leaf", name)
        return self.of(moved[0]) if len(moved) == 1 else \
            ("moved", tuple(sorted(repr(self.of(m)) for m in moved)))

    def _constant(self, name: str) -> np.ndarray | None:
        """The original's initializer ``name`` (None: not one, or one a caller may feed)."""
        value = self.values.get(name)
        tensor = value.const_value if value is not None and value.producer() is None and \
            name not in self.fed else None
        return None if tensor is None else tensor.numpy()


def _moved_inputs(op_type: str, inputs: list[str]) -> list[str]:
    """The inputs of a data movement or selection op whose elements it hands on."""
    moved = _MOVED.get(op_type, (0,))
    chosen = inputs if moved is None else [inputs[k] for k in moved if k < len(inputs)]
    return [name for name in chosen if name]


class _Expressions:
    """The expression of each value of one window (see the module)."""

    def __init__(self, window: Window, leaves: _Leaves) -> None:
        self.window, self.leaves = window, leaves
        self.made: Mapping[str, tuple[onnx.NodeProto, int]] = {
            out: (node, i) for node in window.nodes for i, out in enumerate(node.output) if out}
        self.known: dict[str, object] = {}

    def _constant(self, name: str) -> np.ndarray | None:
        """The window's constant ``name`` (None: not one of its constants)."""
        found = self.window.constants.get(name)
        return None if found is None else _array(found)

    def of(self, name: str) -> object:
        """The expression of the value ``name``."""
        if name not in self.known:
            self.known[name] = self._expression(name)
        return self.known[name]

    def _expression(self, name: str) -> object:
        if name not in self.made:
            if name in self.window.constants:
                array = _array(self.window.constants[name])
                return ("constant", str(array.dtype), tuple(array.shape),
                        hashlib.sha256(array.tobytes()).hexdigest())
            return self.leaves.of(self.window.originals.get(name, name))
        node, _ = self.made[name]
        if node.op_type not in ROUNDING:  # data moved or selected: its elements' expressions
            chosen = [self.of(i) for i in _moved_inputs(node.op_type, list(node.input))]
            return chosen[0] if len(chosen) == 1 else ("moved", tuple(sorted(map(repr, chosen))))
        inputs = [self.of(i) if i else None for i in node.input]
        kept = _neutral(node.op_type, list(node.input), self._constant)
        if kept is not None:  # x * 1, x / 1, x + 0, x - 0: x, bit for bit
            return inputs[kept]
        if node.op_type == "Cast" and self.leaves.dtype(self.window.originals.get(
                node.input[0], "")) == _cast_to(node):  # a cast to the dtype it has
            return inputs[0]
        attributes = tuple(sorted((a.name, a.SerializeToString()) for a in node.attribute))
        operands = tuple(sorted(map(repr, inputs))) if node.op_type in _COMMUTATIVE else \
            tuple(map(repr, inputs))
        return (node.domain, node.op_type, attributes, operands)


# (op, the inputs a constant may be, its value): x * 1, x / 1, x + 0, x - 0 are x (the check
# holds -0 and +0 equal: ``x + +0`` makes a -0 a +0, and passes as the same)
_NEUTRAL = {"Mul": ((0, 1), 1.0), "Div": ((1,), 1.0), "Add": ((0, 1), 0.0), "Sub": ((1,), 0.0)}


def _neutral(op_type: str, inputs: list[str],
             constant: Callable[[str], np.ndarray | None]) -> int | None:
    """The input an op of ``op_type`` over ``inputs`` hands on unchanged, where another is a
    constant (``constant(name)``; None: not one) every element of which leaves a float as it
    is (``x * 1``, ``x / 1``, ``x + 0``, ``x - 0``: see ``_NEUTRAL``); None where there is
    none."""
    if op_type not in _NEUTRAL or len(inputs) != 2:
        return None
    positions, value = _NEUTRAL[op_type]
    for k in positions:
        array = constant(inputs[k])
        if array is not None and array.dtype.kind == "f" and array.size and \
                bool(np.all(array == value)):
            return 1 - k
    return None


def _cast_to(node: onnx.NodeProto) -> int | None:
    """The dtype a Cast makes."""
    return next((a.i for a in node.attribute if a.name == "to"), None)


def _array(constant: object) -> np.ndarray:
    """A window's constant as numpy (a window found in a file holds the file's tensors)."""
    return constant if isinstance(constant, np.ndarray) else np.asarray(
        constant.numpy() if hasattr(constant, "numpy") else constant)
