"""A model's signature before and after a run, as data: its facts (opset, IR version, inputs,
outputs, parameters, files' bytes) and what it computes (FLOPs and MACs per op type) at input
shapes a caller binds.

The run makes it from what it already has (issue 66): the input's facts as it is loaded, its
compute profile right after the fold's first shape inference (:class:`RecordsCosts`, a pass
of the pipeline; where inference left a costed node's shape unknown, with the dims the fold's
walk proves), the optimized model's at the end, from the dims its last walk proved; a shape
the input's profile still lacks is taken from the optimized model's value of the same name.
Where those shapes say every costed node's, no shape inference, copy or snapshot of the model
is made for it; where they do not, the input's light proto is kept (the reader's, else
serialized once) for ``app/signature.py`` to count both models by inference at the bound
shapes. ``OptimizeResult.signature`` carries it; ``onnxfold.app.signature`` renders it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx_ir as ir
from onnx_ir.passes import InPlacePass, PassResult

from onnxfold.analysis.dim_algebra import expression_of
from onnxfold.analysis.expansion import inference_expands_functions
from onnxfold.analysis.step_inputs import REFINED_KEY, ShapeSteps, shared_dim_names
from onnxfold.analysis.symbolic import shape_values
from onnxfold.declare.costs import OpCost
from onnxfold.errors import one_line
from onnxfold.ir.constants import source_array
from onnxfold.signature.compute import (
    Binding,
    Compute,
    Profile,
    Shape,
    input_dim_names,
    known_shapes,
    profile,
)
from onnxfold.signature.facts import facts
from onnxfold.signature.inferred import light_proto

__all__ = ["Compute", "RecordsCosts", "Signature", "facts"]


@dataclass
class Signature:
    """``before``: the input's facts as loaded; ``after``: the optimized model's (its
    ``file_bytes`` None: what a save writes is the saver's to say); the profiles of both.
    The optimized model's side is read when first asked (a library call that never asks pays
    nothing for it), from the model as it then is."""

    before: dict[str, Any]
    before_profile: Profile | None = None  # set after the run's first shape inference
    # where that profile is not complete: the input light (no weights, no texts; the
    # reader's proto as loaded, else serialized then), for ONNX's inference at bound shapes,
    # and whether inference may expand its functions
    light: onnx.ModelProto | None = field(default=None, repr=False)
    expands: bool = False
    unread: str = ""  # why the input's profile could not be read ("": it was)
    model: ir.Model | None = field(default=None, repr=False)  # the optimized model
    _costs: Mapping[tuple[str, str], OpCost] = field(default_factory=dict, repr=False)
    _after: tuple[dict[str, Any], Profile] | None = field(default=None, repr=False)
    _elsewhere: dict[str, Shape] | None = field(default=None, repr=False)

    def finish(self, model: ir.Model, costs: Mapping[tuple[str, str], OpCost]) -> None:
        """The run ended with ``model``, the optimized one."""
        self.model, self._costs = model, costs

    @property
    def after(self) -> dict[str, Any] | None:
        """The optimized model's facts (None before the run ended)."""
        side = self._after_side()
        return None if side is None else side[0]

    @property
    def after_profile(self) -> Profile | None:
        """The optimized model's compute profile (None before the run ended)."""
        side = self._after_side()
        return None if side is None else side[1]

    def _after_side(self) -> tuple[dict[str, Any], Profile] | None:
        if self._after is None and self.model is not None:
            self._after = ({**facts(self.model), "file_bytes": None},
                           profile(self.model, self._costs))
        return self._after

    def compute(self, shapes: Mapping[str, Sequence[int]]) -> tuple[Compute, Compute]:
        """What the input and the optimized model compute with the graph inputs at ``shapes``
        (by name): before and after (before empty where the input's profile could not be
        read: ``unread`` says why)."""
        after = self.after_profile
        assert self.model is not None and after is not None, "the run has not ended"
        binding = Binding(self.model, shapes)
        if self.before_profile is None:
            return Compute(), after.at(binding)
        if self._elsewhere is None and not self.before_profile.complete():
            self._elsewhere = known_shapes(self.model)  # (what the input's profile lacks)
        return self.before_profile.at(binding, self._elsewhere), after.at(binding)


class RecordsCosts(InPlacePass):
    """The pipeline's reading of the input's compute profile, after its first shape inference
    and before any pass changes a node; it changes nothing. Where inference left a costed
    node's shape unknown (a TorchScript export's attention, a Conv's spatial dims), the fold's
    own walk of the dims (``analysis.symbolic``, with ``steps``) proves what it can first, and
    its records are taken off again: the fold's first sweep walks the graph as it always has.
    """

    name = "signature"

    def __init__(self, signature: Signature, costs: Mapping[tuple[str, str], OpCost],
                 steps: ShapeSteps, named_dims_equal: bool = False,
                 light: onnx.ModelProto | None = None) -> None:
        self.signature, self.costs, self.steps = signature, costs, steps
        self.named_dims_equal = named_dims_equal
        self.light = light  # the reader's proto of the input, where it describes it as loaded

    def call(self, model: ir.Model) -> PassResult:
        """Record the profile (and where it is not complete, a light proto); unmodified. A
        failure here is said by the signature, never the end of the run."""
        signature, light, self.light = self.signature, self.light, None
        try:
            found = profile(model, self.costs)
            if not found.complete():
                found = self._walked(model)
            if not found.complete():  # (the reader's: inference reads it and leaves it)
                signature.light = light if light is not None else _light(model)
                signature.expands = inference_expands_functions(model)
            signature.before_profile = found
        except Exception as e:  # a report's count: never a reason to fail the fold
            signature.before_profile, signature.light = None, None
            signature.unread = one_line(e) or type(e).__name__
        return PassResult(model, False)

    def _walked(self, model: ir.Model) -> Profile:
        """The profile with the dims the walk proves (and the shapes it gives values
        inference left shapeless: an opset-13 export's attention), the walk's records and
        those shapes taken off again after."""
        graph = model.graph
        shapeless = [value for node in graph for value in node.outputs if value.shape is None]
        try:
            shape_values(graph, source_array, shared_dim_names(model, self.named_dims_equal),
                         steps=self.steps, complete=lambda _: True)
            return profile(model, self.costs)
        finally:
            for node in graph:
                for value in node.outputs:
                    value.meta.data.pop(REFINED_KEY, None)
            for value in shapeless:
                value.shape = None


def _light(model: ir.Model) -> onnx.ModelProto:
    """``model`` serialized without its weights and texts, its dims that are no input's (the
    names the first inference made up, ``unk__3``) cleared: an inference at bound shapes
    gives them again."""
    names = input_dim_names(model)
    light = light_proto(model)
    for info in light.graph.value_info:
        for dim in info.type.tensor_type.shape.dim:
            if dim.dim_param and not expression_of(dim.dim_param, names):
                dim.Clear()
    return light
