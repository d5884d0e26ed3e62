"""Re-run the recipe of a rewrite-made folded tensor in onnxruntime (``onnxfold.ir.recipes``).

A recipe is saved on its tensor (``provenance.RECIPE``). Its leaves are names: each is found,
in this order, as an initializer of the original (its weights, unchanged), an initializer of
the optimized model (verified on its own), a value the original computes from its constants
(its cone, at the check's first binding of the dims), or a small constant the recipe kept (a
parameter of the rewrite: the rewrite validation's to judge); a leaf read only for its shape is
zeros of the static shape it had. Constant leaves are handed over as initializers, as the
fold's onnxruntime session saw them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from onnxfold.check.running.models import read_constant
from onnxfold.check.running.runner import MachineShort, RunFailed, Wanted, run_nodes
from onnxfold.ir.recipes import Recipe


def reads_itself(name: str, recipe: Recipe) -> bool:
    """Whether ``recipe`` (of the initializer ``name``) reads the tensor it makes."""
    return any(leaf.name in (name, recipe.output) for leaf in recipe.leaves)


class Unresolved(Exception):
    """A recipe cannot be re-run; the message says why (a reason for the report)."""


@dataclass
class Derived:
    """A recipe's array, and what its leaves rest on that is less than a proof: values the
    original computes from dynamic dims not shown constant, shapes the original does not show
    static (each a short text for the report)."""

    array: np.ndarray
    sampled: list[str] = field(default_factory=list)


class RecipeRunner:
    """Arrays of recipe outputs. ``original`` and ``optimized``: the two models;
    ``from_original(name)``: the array the original computes for its value ``name`` and what
    it rests on (None: no such value it can compute); ``shape_in_original(name)``: the static
    shape the original shows for its value ``name`` (None: none)."""

    def __init__(self, original: ir.Model, optimized: ir.Model,
                 from_original: Callable[[str], Derived | None],
                 shape_in_original: Callable[[str], tuple[int, ...] | None],
                 libraries: Sequence[str] = ()) -> None:
        self.original, self.optimized = original, optimized
        self.from_original = from_original
        self.shape_in_original = shape_in_original
        self.opsets = {**dict(original.opset_imports), **dict(optimized.opset_imports)}
        self.ir_version = max(original.ir_version, optimized.ir_version)
        self.libraries = tuple(libraries)

    def derive(self, name: str, recipe: Recipe) -> Derived:
        """The array ``recipe`` computes for the optimized model's initializer ``name``
        (Unresolved: why not)."""
        handed: dict[str, np.ndarray] = {}
        inputs: dict[str, np.ndarray] = {}
        sampled: list[str] = []
        if reads_itself(name, recipe):
            raise Unresolved("its recipe reads the tensor it makes")
        for leaf in recipe.leaves:
            if not leaf.constant:
                assert leaf.shape is not None
                shown = self.shape_in_original(leaf.name)
                if shown != tuple(leaf.shape):
                    sampled.append(f"reads the shape {list(leaf.shape)} of {leaf.name}, which "
                                   "the original does not show static")
                inputs[leaf.name] = np.zeros(leaf.shape, ir.DataType(leaf.dtype).numpy())
            else:
                found = self._leaf(leaf.name, leaf.value)
                handed[leaf.name] = found.array
                sampled += found.sampled
        try:
            (array,) = run_nodes(recipe.nodes, [self._wanted(name, recipe.output)],
                                 constants=handed, inputs=inputs, opsets=self.opsets,
                                 ir_version=self.ir_version, libraries=self.libraries)
        except MachineShort as e:
            raise Unresolved(f"the machine ran short running its recipe ({e}): not run"
                             ) from None
        except RunFailed as e:
            raise Unresolved(f"onnxruntime cannot run its recipe: {str(e)[:160]}") from None
        return Derived(array, sampled)

    def _wanted(self, name: str, output: str) -> Wanted:
        """How the session hands over the recipe's ``output`` (typed as the folded tensor
        ``name`` is)."""
        folded = self.optimized.graph.initializers.get(name)
        if folded is None or folded.const_value is None or \
                folded.const_value.dtype == ir.DataType.STRING:
            return Wanted(output)
        return Wanted(output, folded.const_value.dtype.numpy())

    def _leaf(self, name: str, own: np.ndarray | None) -> Derived:
        for graph in (self.original.graph, self.optimized.graph):
            value = graph.initializers.get(name)
            if value is not None and value.const_value is not None:
                return Derived(read_constant(value.const_value))
        computed = self.from_original(name)
        if computed is not None:
            return computed
        if own is not None:  # a small constant the rewrite made, as the fold read it
            return Derived(own)
        raise Unresolved(f"its recipe reads {name}, which neither model holds")
