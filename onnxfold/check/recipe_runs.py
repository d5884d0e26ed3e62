"""Re-run the recipe of a rewrite-made folded tensor in onnxruntime (``onnxfold.fold.recipes``).

A recipe's leaves are names: each is found, in this order, as an initializer of the original
(its weights, unchanged), an initializer of the optimized model, a value the original computes
from its constants (its cone, :mod:`onnxfold.check.fold_verification`), or the output of
another recipe (an intermediate of an earlier round); a leaf read only for its shape is zeros
of the static shape it had; a small constant a rewrite made and no model holds any more is the
copy the recipe kept. Constant leaves are handed over as initializers, as the fold's
onnxruntime session saw them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnx_ir as ir

from onnxfold.fold.fallback import run_node_protos
from onnxfold.fold.fallback_session import Wanted, is_raw_dtype
from onnxfold.fold.recipes import Recipe
from onnxfold.ir.dtypes import onnx_type


class Unresolved(Exception):
    """A recipe cannot be re-run; the message says why (a reason for the report)."""


class RecipeRunner:
    """Arrays of recipe outputs, each computed once."""

    def __init__(self, original: ir.Model, optimized: ir.Model, recipes: Mapping[str, Recipe],
                 from_original: Callable[[str], np.ndarray | None]) -> None:
        self.original, self.optimized, self.recipes = original, optimized, recipes
        self.from_original = from_original  # a value the original computes, by name
        self.opsets = {**dict(original.opset_imports), **dict(optimized.opset_imports)}
        self.ir_version = max(original.ir_version, optimized.ir_version)
        self.done: dict[str, np.ndarray] = {}
        self.running: set[str] = set()

    def derive(self, name: str) -> np.ndarray:
        """The array recipe ``name`` computes (Unresolved: why not)."""
        if name in self.done:
            return self.done[name]
        recipe = self.recipes.get(name)
        if recipe is None or name in self.running:
            raise Unresolved(f"no recipe computes {name}")
        self.running.add(name)
        try:
            handed: dict[str, np.ndarray] = {}
            inputs: dict[str, np.ndarray] = {}
            for leaf in recipe.leaves:
                if not leaf.constant:
                    assert leaf.shape is not None
                    dtype = ir.DataType(leaf.dtype).numpy()
                    inputs[leaf.name] = np.zeros(leaf.shape, dtype)
                else:
                    handed[leaf.name] = self._leaf(leaf.name, leaf.value)
            for n in [n for n, a in handed.items() if is_raw_dtype(a.dtype) or
                      a.dtype.kind in "OSU"]:  # what cannot be handed over without a copy
                inputs[n] = handed.pop(n)
            wanted = self._wanted(name)
            from onnxfold.fold.fallback import FallbackError

            try:
                (array,) = run_node_protos(recipe.nodes, handed, inputs, [wanted], self.opsets,
                                           self.ir_version)
            except FallbackError as e:
                raise Unresolved(f"onnxruntime cannot run its recipe: {str(e)[:160]}") from None
        finally:
            self.running.discard(name)
        self.done[name] = array
        return array

    def _wanted(self, name: str) -> Wanted:
        """How the session hands over output ``name`` (typed as the folded tensor is)."""
        folded = self.optimized.graph.initializers.get(name)
        if folded is None or folded.const_value is None:
            return Wanted(name, None, None, False, False)
        dtype = folded.const_value.dtype.numpy()
        return Wanted(name, onnx_type(dtype), None, is_raw_dtype(dtype), False)

    def _leaf(self, name: str, own: np.ndarray | None) -> np.ndarray:
        for graph in (self.original.graph, self.optimized.graph):
            value = graph.initializers.get(name)
            if value is not None and value.const_value is not None:
                return value.const_value.numpy()
        computed = self.from_original(name)
        if computed is not None:
            return computed
        if name in self.recipes:
            return self.derive(name)
        if own is not None:  # a small constant a rewrite made, as the fold read it
            return own
        raise Unresolved(f"its recipe reads {name}, which neither model holds")
