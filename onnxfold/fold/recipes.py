"""How each folded tensor a rewrite made was computed, saved with it so that any check can
compute it again.

A folded tensor whose value has a name in the original model is verified against the original
(``onnxfold.check.folds.verification``). One made from nodes a rewrite built (a batch-norm
folded into a Conv's weight, a merged Q/K/V weight: their values carry
``provenance.MADE_BY``) has no original value to compare with; its *recipe* is what the fold
evaluated: the nodes between it and the constants (or the static shapes of runtime values)
they read, as the graph stood when the fold ran. A leaf that an earlier round folded from a
rewrite's nodes is replaced by that leaf's own recipe, so that a recipe's leaves are tensors
the original holds or computes (or small constants, kept in the recipe itself). A check re-runs
the recipe in onnxruntime from those leaves and compares the bits, so a wrong evaluation of a
rewrite-made tensor is caught as surely as one of an original value (whether the rewrite
itself was right is the rewrite validation's and the comparison on inputs' job).

A recipe is saved on its tensor (``provenance.RECIPE``: a small ONNX graph, base64, in the
format of ``onnxfold.ir.recipes``) by its ``encode``; a cone larger than
:data:`MAX_RECIPE_NODES` nodes or with large attributes gets none.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.ir import provenance
from onnxfold.ir.constants import source_array
from onnxfold.ir.graph import is_default_op, static_shape
from onnxfold.ir.recipes import MAX_RECIPE_NODES, Leaf, Recipe, decode

MAX_RECIPE_BYTES = 1 << 20  # the serialized nodes (a Constant's big attribute: no recipe)
INLINE_BYTES = 4096  # a constant leaf this small is kept in the recipe


def capture(value: ir.Value, evaluated: Collection[ir.Node]) -> Recipe | None:
    """``value``'s recipe: the ``evaluated`` nodes it was computed by, back to constants and
    runtime values (None: too large, or a leaf without a name or a static shape)."""
    ordered: list[ir.Node] = []  # post-order: every node after the nodes it reads
    leaves: dict[str, Leaf] = {}
    nested: list[Recipe] = []  # the recipes of leaves an earlier round folded from a rewrite
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
        earlier = _saved(current)
        if earlier is not None:
            nested.append(earlier)
            continue
        leaf = _leaf(current)
        if leaf is None:
            return None
        leaves[leaf.name] = leaf
    if not value.name:
        return None
    return _joined(value.name, nested, tuple(ir.serde.serialize_node(n) for n in ordered),
                   leaves)


def _joined(output: str, nested: list[Recipe], nodes: tuple[onnx.NodeProto, ...],
            leaves: dict[str, Leaf]) -> Recipe | None:
    """A recipe of ``nodes`` after the nodes of the ``nested`` recipes (its leaves' own),
    within the size bounds (None: beyond them)."""
    all_nodes: list[onnx.NodeProto] = []
    made: set[str] = set()
    for earlier in nested:
        for node in earlier.nodes:
            if not set(node.output) & made:  # a leaf two nested recipes share: once
                all_nodes.append(node)
                made.update(node.output)
        for leaf in earlier.leaves:
            leaves.setdefault(leaf.name, leaf)
    all_nodes.extend(nodes)
    for name in made:
        leaves.pop(name, None)
    if len(all_nodes) > MAX_RECIPE_NODES or \
            sum(p.ByteSize() for p in all_nodes) > MAX_RECIPE_BYTES:
        return None
    return Recipe(output, tuple(all_nodes), tuple(leaves.values()))


def _saved(value: ir.Value) -> Recipe | None:
    """The recipe saved on ``value``'s tensor by an earlier round (None: none). A small
    constant's too: its bytes alone would be a number of the recipe's own, which a check of
    a file does not take on trust (``check/folds/recipe_forms.py``)."""
    tensor = value.const_value
    if tensor is None or provenance.RECIPE not in tensor.metadata_props:
        return None
    return decode(tensor.metadata_props[provenance.RECIPE])


def _made(value: ir.Value) -> bool:
    """Whether onnxfold made ``value`` (a rewrite built it, or a fold stored it): such a
    constant has no name in the original, so a recipe keeps its bytes; an original constant
    is named only (the original holds it: a recipe never copies a model's weights)."""
    tensor = value.const_value
    return provenance.MADE_BY in value.meta or (tensor is not None and any(
        key in tensor.metadata_props for key in provenance.TENSOR_KEYS))


def _leaf(value: ir.Value) -> Leaf | None:
    if not value.name:
        return None
    producer = value.producer()
    if value.const_value is not None or (producer is not None and
                                         is_default_op(producer, "Constant")):
        # an initializer's or a Constant node's data, read only where it is the fold's own (a
        # caller's proto copies a tensor's bytes at every read)
        array = source_array(value) if _made(value) else None
        small = array is not None and array.nbytes <= INLINE_BYTES
        return Leaf(value.name, value=np.array(array, copy=True) if small else None)
    shape = static_shape(value)
    if shape is None or value.dtype is None:
        return None
    return Leaf(value.name, shape, value.dtype.value, False)
