"""A model's signature before and after a run, as data: its facts (opset, IR version, inputs,
outputs, parameters, files' bytes) and what it computes (FLOPs and MACs per op type) at input
shapes a caller binds.

The run makes it from what it already has (issue 66): the input's facts as it is loaded, its
compute profile right after the fold's first shape inference (:class:`RecordsCosts`, a pass
of the pipeline; where inference left a costed node's shape unknown, with the dims the fold's
walk proves), the optimized model's at the end, from the dims its last walk proved; a shape
the input's profile still lacks is taken from the optimized model's value of the same name.
Where those shapes say every costed node's at the binding, no shape inference, copy or
snapshot of the model is made for it; where they do not (a dim the data of a dynamic dim
decides), the same walk runs on a weightless copy with the inputs at the bound shapes
(:func:`pinned_shapes`; the input's light proto is kept for it). The count is always the
profile's; what no walk sizes is said not counted, never guessed; no second fold is run.
``OptimizeResult.signature`` carries it; ``onnxfold.app.signature`` renders it.
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
from onnxfold.signature.pinned import INT64_MAX, light_proto, pinned_model

__all__ = ["Compute", "RecordsCosts", "Signature", "counted", "facts"]


@dataclass
class Signature:
    """``before``: the input's facts as loaded; ``after``: the optimized model's (its
    ``file_bytes`` None: what a save writes is the saver's to say); the profiles of both.
    The optimized model's side is read when first asked (a library call that never asks pays
    nothing for it), from the model as it then is."""

    before: dict[str, Any]
    before_profile: Profile | None = None  # set after the run's first shape inference
    # where that profile is not complete: the input light (no weights, no texts; the
    # reader's proto as loaded, else serialized then), for the walk at bound shapes, and
    # whether ONNX's inference may expand its functions
    light: onnx.ModelProto | None = field(default=None, repr=False)
    expands: bool = False
    unread: str = ""  # why the input's profile could not be read ("": it was)
    model: ir.Model | None = field(default=None, repr=False)  # the optimized model
    _costs: Mapping[tuple[str, str], OpCost] = field(default_factory=dict, repr=False)
    _steps: ShapeSteps | None = field(default=None, repr=False)
    _after: tuple[dict[str, Any], Profile] | None = field(default=None, repr=False)
    _elsewhere: dict[str, Shape] | None = field(default=None, repr=False)

    def finish(self, model: ir.Model, costs: Mapping[tuple[str, str], OpCost],
               steps: ShapeSteps) -> None:
        """The run ended with ``model``, the optimized one (``steps``: the walk's)."""
        self.model, self._costs, self._steps = model, costs, steps

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
        read: ``unread`` says why). A shape a profile leaves unknown at that binding is the
        one the walk finds on a weightless copy with its inputs at ``shapes``
        (:func:`pinned_shapes`; the input's, from its light proto, after the optimized
        model's of the same name)."""
        after_profile, model = self.after_profile, self.model
        assert model is not None and after_profile is not None, "the run has not ended"
        assert self._steps is not None
        binding = Binding(model, shapes)
        after, fixed = _counted(model, after_profile, binding, shapes, self._steps)
        if self.before_profile is None:
            return Compute(), after
        if self._elsewhere is None and not self.before_profile.complete():
            self._elsewhere = known_shapes(model)  # (what the input's profile lacks)
        elsewhere = {**(self._elsewhere or {}), **fixed}
        before = self.before_profile.at(binding, elsewhere)
        if before.unknown and self.light is not None:
            light = onnx.ModelProto()
            light.CopyFrom(self.light)  # (bound to the shapes: the next binding needs one)
            before = self.before_profile.at(binding, {**elsewhere, **pinned_shapes(
                light, self.expands, shapes, self._steps, _types(model, elsewhere, binding))})
        return before, after


def counted(model: ir.Model, shapes: Mapping[str, Sequence[int]],
            costs: Mapping[tuple[str, str], OpCost], steps: ShapeSteps) -> Compute:
    """What ``model`` (its shapes inferred, as a run leaves them) computes with its graph
    inputs at ``shapes``: its profile, with the dims the walk proves at those shapes where it
    leaves one unknown."""
    return _counted(model, profile(model, costs), Binding(model, shapes), shapes, steps)[0]


def _counted(model: ir.Model, found: Profile, binding: Binding,
             shapes: Mapping[str, Sequence[int]], steps: ShapeSteps
             ) -> tuple[Compute, dict[str, Shape]]:
    """``found`` (``model``'s profile) at ``binding`` (``shapes``), and the static shapes the
    walk at those shapes found where it left a costed node's unknown (else none)."""
    count = found.at(binding)
    if not count.unknown:
        return count, {}
    fixed = pinned_shapes(light_proto(model), inference_expands_functions(model), shapes, steps)
    return found.at(binding, fixed), fixed


def _types(model: ir.Model, shapes: Mapping[str, Shape], binding: Binding
           ) -> dict[str, onnx.TypeProto]:
    """The tensor types of ``model``'s values whose ``shapes`` the ``binding`` sizes."""
    found = {}
    for node in model.graph:
        for value in node.outputs:
            sizes = binding.sizes(shapes.get(str(value.name)))
            if sizes is not None and value.dtype is not None and max(sizes, default=0) <= INT64_MAX:
                found[str(value.name)] = onnx.helper.make_tensor_type_proto(value.dtype.value,
                                                                            sizes)
    return found


def pinned_shapes(light: onnx.ModelProto, expands: bool, shapes: Mapping[str, Sequence[int]],
                  steps: ShapeSteps, known: Mapping[str, onnx.TypeProto] | None = None
                  ) -> dict[str, Shape]:
    """The static shapes of ``light``'s values (a model serialized light, changed here) with
    its inputs at ``shapes``, by name: the fold's walk of the dims (with ``steps``) over it,
    typed by ONNX's inference at those shapes (``pinned.pinned_model``; ``known``: the types
    of values of the same names in a model that computes the same, declared first: the
    optimized model's, for the input, whose constants the fold computed). A dynamic dim leaves
    a TorchScript export's shapes to Shape, Gather and Concat chains; at fixed shapes the walk
    computes every element of them."""
    copy = pinned_model(light, expands, shapes, known)
    shape_values(copy.graph, source_array, frozenset(), steps=steps, complete=lambda _: True)
    return {name: shape for name, shape in known_shapes(copy).items()
            if all(isinstance(d, int) for d in shape or (None,))}


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
