"""Shape values updated after edits (what the rewrite driver asks between sweeps): only the
changed nodes, and the readers of values that changed in turn, are computed again."""

from __future__ import annotations

import onnx_ir as ir

from onnxfold.analysis.dim_algebra import Dim, Known
from onnxfold.analysis.step_inputs import REFINED_KEY, Arrays, ShapeSteps
from onnxfold.analysis.symbolic import Completing, KnownValues, ShapeWalk, shape_values
from onnxfold.ir.graph import DEFAULT_DOMAINS


def updated_shape_values(graph: ir.Graph, previous: dict[ir.Value, Known],
                         changed_nodes: set[ir.Node], arrays: Arrays,
                         ambiguous: frozenset[str] = frozenset(), *, steps: ShapeSteps,
                         complete: Completing = None
                         ) -> tuple[dict[ir.Value, Known], set[ir.Value]]:
    """:func:`shape_values` of ``graph`` after edits at ``changed_nodes`` (added, rewired or
    reading rerouted values), from what it was before (``previous``, for the same arrays,
    ``ambiguous``, steps and ``complete``), and the values whose shape value or refined dims
    changed, or that were given a shape.

    Only the changed nodes, and the readers of values that changed in turn, are computed
    again; the others keep their results. When a node computed again names a dim that others
    may share a symbol with (``symbolic._refined_dims``' placeholders), everything is computed
    again."""
    if isinstance(previous, KnownValues):
        previous.reading(arrays)  # (kept without the arrays of its own walk)
    old_placeholders = getattr(previous, "placeholders", None)
    if old_placeholders is None:
        return _recomputed(graph, previous, arrays, ambiguous, steps, complete)
    known = KnownValues(arrays)
    walk = ShapeWalk(graph, known, arrays, ambiguous, steps, complete)
    changed: set[ir.Value] = set()
    for node in graph:
        if node.domain not in DEFAULT_DOMAINS:
            continue
        if node not in changed_nodes and not any(v in changed for v in node.inputs):
            walk.keep(node, previous)
            continue
        if _names_placeholder(node, ambiguous, walk.inputs_dims, old_placeholders):
            return _recomputed(graph, previous, arrays, ambiguous, steps, complete, changed)
        before = [(v, v.meta.data.get(REFINED_KEY), previous.get(v), v.shape is None)
                  for v in node.outputs]
        walk.visit(node)
        changed.update(v for v, refined, value, shapeless in before
                       if v.meta.data.get(REFINED_KEY) != refined or known.get(v) != value
                       or (shapeless and v.shape is not None))
    if walk.placeholders != old_placeholders:
        return _recomputed(graph, previous, arrays, ambiguous, steps, complete, changed)
    known.placeholders = walk.placeholders
    return known, changed


def _recomputed(graph: ir.Graph, previous: dict[ir.Value, Known], arrays: Arrays,
                ambiguous: frozenset[str], steps: ShapeSteps, complete: Completing,
                changed_before: set[ir.Value] | None = None
                ) -> tuple[dict[ir.Value, Known], set[ir.Value]]:
    """:func:`shape_values` computed whole, and the values whose result changed (with
    ``changed_before``, those a partial walk changed before it gave up: a shape it gave is
    not given again)."""
    refined = {v: (v.meta.data.get(REFINED_KEY), v.shape is None)
               for node in graph for v in node.outputs}
    known = shape_values(graph, arrays, ambiguous, steps=steps, complete=complete)
    changed = {v for v, (dims, shapeless) in refined.items()
               if v.meta.data.get(REFINED_KEY) != dims or (shapeless and v.shape is not None)}
    changed.update(v for v in dict.keys(known) | dict.keys(previous)
                   if known.get(v) != previous.get(v))
    changed.update(changed_before or ())
    return known, changed


def _names_placeholder(node: ir.Node, ambiguous: frozenset[str], inputs_dims: frozenset[str],
                       placeholders: dict[str, Dim]) -> bool:
    """Whether an output of ``node`` declares a dim whose name has a placeholder symbol."""
    for out in node.outputs:
        for dim in out.shape or ():
            name = getattr(dim, "value", None)
            if isinstance(name, str) and name in placeholders and name not in inputs_dims \
                    and name not in ambiguous:
                return True
    return False
