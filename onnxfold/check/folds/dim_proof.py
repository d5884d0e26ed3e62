"""Whether a value of the original is the same for every value of its graph inputs' dynamic
dims: shown, not sampled.

A value computed from input shapes (``Shape(x)``, a broadcast) is constant over the dims when
every way the dims reach it passes through a value known constant: a shape value that
onnxfold's symbolic dims compute as ints for every value of the dims
(:func:`onnxfold.analysis.symbolic.shape_values`), or a value whose shape onnx's shape
inference shows static where only its shape is read. Both run on the check's own copy of the
original (its intermediate shapes inferred again from its inputs, ``cones.reinferred``), not on
what the fold saw; and the check re-derives such a value at every binding of the dims it runs
besides, so that a mistake of the analysis shows as a difference rather than as a proof.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import onnx_ir as ir

from onnxfold.analysis.dim_algebra import Known
from onnxfold.analysis.step_inputs import ShapeSteps, shared_dim_names
from onnxfold.analysis.symbolic import shape_values
from onnxfold.check.running.input_reads import SHAPE_FROM_VALUES, SHAPE_ONLY_READS, TYPE_ONLY_READS
from onnxfold.ir.constants import constant_array
from onnxfold.ir.graph import captured_values, static_shape


class DimProof:
    """Shows values of ``model`` constant over its dynamic dims. ``fed``: its graph inputs
    (their dims are the dynamic ones where not static)."""

    def __init__(self, model: ir.Model, fed: Collection[ir.Value], steps: ShapeSteps) -> None:
        self.model, self.fed, self.steps = model, set(fed), steps
        self._known: dict[ir.Value, Known] | None = None

    def _shape_values(self) -> dict[ir.Value, Known]:
        if self._known is None:
            try:
                self._known = shape_values(self.model.graph, constant_array,
                                           shared_dim_names(self.model), steps=self.steps)
            except Exception:  # an aid: what it cannot read, it does not prove
                self._known = {}
        return self._known

    def constant(self, value: ir.Value) -> np.ndarray | None:
        """The array the symbolic dims show ``value`` to be for every value of the dims."""
        known = self._shape_values().get(value)
        return known.array() if known is not None and known.is_constant else None

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
            if not shape_only and self.constant(current) is not None:
                continue
            producer = current.producer()
            if current in self.fed or producer is None or producer.graph is not self.model.graph:
                return False  # a dynamic dim (or an outer value) reached with nothing known
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
