"""How each folded initializer was computed, kept so that a check can compute it again.

A folded tensor whose value has a name in the original model is verified against the original
(``onnxfold.check.fold_verification``). One made from nodes a rewrite inserted (a batch-norm
folded into a Conv's weight, a merged Q/K/V weight) has no original value to compare with; its
*recipe* is what the fold evaluated: the nodes between it and the constants (or the static
shapes of runtime values) they read, as the graph stood when the fold ran. A check re-runs the
recipe in onnxruntime from those leaves and compares the bits, so a wrong evaluation of a
rewrite-made tensor is caught as surely as one of an original value (whether the rewrite itself
was right is the comparison on inputs' job).

Recipes are small (serialized nodes, leaf names, small leaves' bytes) and live only in memory,
in the model's ``meta`` under :data:`RECIPES_KEY`, and only when a caller asked for them
(:func:`keep_recipes`, as ``--check`` does: capturing them costs a few percent of a fold of
many small tensors); a saved model does not carry them. A cone larger than
:data:`MAX_RECIPE_NODES` nodes or with large attributes gets none.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.ir.constants import source_array
from onnxfold.ir.graph import is_default_op, static_shape

RECIPES_KEY = "onnxfold.recipes"
MAX_RECIPE_NODES = 256
MAX_RECIPE_BYTES = 1 << 20  # the serialized nodes (a Constant's big attribute: no recipe)
INLINE_BYTES = 4096  # a constant leaf this small is kept in the recipe


def keep_recipes(model: ir.Model) -> None:
    """Ask every later fold of ``model`` to record its recipes (in ``model.meta``)."""
    model.meta.setdefault(RECIPES_KEY, {})


@dataclass(frozen=True)
class Leaf:
    """A value a recipe reads: a constant (by name) or a runtime value's static shape."""

    name: str
    shape: tuple[int, ...] | None = None  # a runtime value read only for its shape
    dtype: int = 0  # its ONNX element type, for the zeros that stand in for it
    constant: bool = True
    # a small constant's own bytes (a rewrite's constant that neither model may hold later)
    value: np.ndarray | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Recipe:
    """The nodes that computed ``output`` (in order) and the leaves they read."""

    output: str
    nodes: tuple[onnx.NodeProto, ...]
    leaves: tuple[Leaf, ...]


def capture(value: ir.Value, evaluated: Collection[ir.Node]) -> Recipe | None:
    """``value``'s recipe: the ``evaluated`` nodes it was computed by, back to constants and
    runtime values (None: too large, or a leaf without a name or a static shape)."""
    ordered: list[ir.Node] = []  # post-order: every node after the nodes it reads
    leaves: dict[str, Leaf] = {}
    done: set[ir.Node] = set()
    seen: set[ir.Value] = set()
    stack: list[tuple[ir.Value, bool]] = [(value, False)]
    while stack:
        current, expanded = stack.pop()
        producer = current.producer()
        if expanded:
            assert producer is not None
            if producer not in done:
                done.add(producer)
                ordered.append(producer)
            continue
        if current in seen:
            continue
        seen.add(current)
        if current.const_value is None and producer is not None and producer in evaluated:
            if producer.graph is not value.graph or len(seen) > 4 * MAX_RECIPE_NODES:
                return None
            stack.append((current, True))
            stack.extend((v, False) for v in producer.inputs if v is not None)
            continue
        leaf = _leaf(current)
        if leaf is None:
            return None
        leaves[leaf.name] = leaf
    if len(ordered) > MAX_RECIPE_NODES or not value.name:
        return None
    protos = tuple(ir.serde.serialize_node(n) for n in ordered)
    if sum(p.ByteSize() for p in protos) > MAX_RECIPE_BYTES:
        return None
    return Recipe(value.name, protos, tuple(leaves.values()))


def _leaf(value: ir.Value) -> Leaf | None:
    if not value.name:
        return None
    producer = value.producer()
    if value.const_value is not None or (producer is not None and
                                         is_default_op(producer, "Constant")):
        array = source_array(value)  # an initializer's or a Constant node's
        small = array is not None and array.nbytes <= INLINE_BYTES
        return Leaf(value.name, value=np.array(array, copy=True) if small else None)
    shape = static_shape(value)
    if shape is None or value.dtype is None:
        return None
    return Leaf(value.name, shape, value.dtype.value, False)
