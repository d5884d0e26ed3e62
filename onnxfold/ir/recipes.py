"""The recipe format: how a folded tensor a rewrite made was computed, as the fold saves it on
the tensor (``provenance.RECIPE``) and a check reads it back.

A recipe is the nodes between the tensor and the constants (or the static shapes of runtime
values) they read; its leaves are names, each a tensor the original holds or computes, a
runtime value's static shape, or a small constant kept in the recipe itself. Saved as a small
ONNX graph in base64: the writer is ``onnxfold.fold.recipes.capture`` then :func:`encode`, the
reader :func:`decode`; this module is pure data, so the check reads a recipe without any of
the fold's code.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

MAX_RECIPE_NODES = 256


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


def encode(recipe: Recipe) -> str:
    """``recipe`` as the text saved on its tensor: an ONNX graph (its nodes; the shape leaves
    as typed inputs; the small constants as initializers; the other constants as value infos
    holding only their names), serialized and in base64."""
    graph = onnx.GraphProto(name="recipe", node=list(recipe.nodes))
    for leaf in recipe.leaves:
        if not leaf.constant:
            assert leaf.shape is not None
            graph.input.append(onnx.helper.make_tensor_value_info(leaf.name, leaf.dtype,
                                                                  list(leaf.shape)))
        elif leaf.value is not None:
            graph.initializer.append(numpy_helper.from_array(leaf.value, leaf.name))
        else:
            graph.value_info.append(onnx.ValueInfoProto(name=leaf.name))
    graph.output.append(onnx.ValueInfoProto(name=recipe.output))
    return base64.b64encode(graph.SerializeToString()).decode("ascii")


def decode(text: str) -> Recipe | None:
    """The recipe :func:`encode` wrote (None: text that is not one; a model is untrusted)."""
    try:
        graph = onnx.GraphProto.FromString(base64.b64decode(text, validate=True))
        leaves = [Leaf(i.name, tuple(d.dim_value for d in i.type.tensor_type.shape.dim),
                       i.type.tensor_type.elem_type, False) for i in graph.input]
        leaves += [Leaf(t.name, value=numpy_helper.to_array(t)) for t in graph.initializer]
        leaves += [Leaf(v.name) for v in graph.value_info]
        if len(graph.output) != 1 or len(graph.node) > MAX_RECIPE_NODES:
            return None
        return Recipe(graph.output[0].name, tuple(graph.node), tuple(leaves))
    except Exception:  # not base64, not a graph (protobuf's DecodeError), a bad tensor
        return None
