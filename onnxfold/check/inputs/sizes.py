"""How large each value of the original is at given input shapes, by onnx's shape inference
on the check's own copy of the graph (its weights' bytes left out, initializers and large
``Constant`` nodes alike: ``shapes.without_large_constants``): a binding whose values
would not fit in the memory left is not run, and the values a check holds at once are sized
before they are computed."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.analysis.shapes import serialize_light, without_large_constants

Shapes = Mapping[str, tuple[int, ...]]


class Sizes:
    """The original ``model``'s values sized at input shapes (``at``), and the model bound to
    them (``bound``) for a caller's own inference."""

    def __init__(self, model: ir.Model) -> None:
        self.model = model
        self._light: onnx.ModelProto | None = None
        self._typed_inputs: set[str] = set()  # large Constants' outputs, inputs in ``_light``
        self._known: dict[tuple, dict[str, int]] = {}

    def at(self, shapes: Shapes) -> dict[str, int]:
        """Bytes per value name, for every value onnx's shape inference sizes at ``shapes``
        (none where it cannot infer the graph)."""
        key = tuple(sorted((name, tuple(shape)) for name, shape in shapes.items()))
        if key not in self._known:
            try:
                inferred = onnx.shape_inference.infer_shapes(self.bound(shapes), data_prop=True)
            except Exception:  # an aid: a graph onnx cannot infer is run and seen
                self._known[key] = {}
            else:
                infos = [*inferred.graph.value_info, *(info for info in inferred.graph.input
                                                       if info.name in self._typed_inputs)]
                self._known[key] = {info.name: n for info in infos
                                    if (n := _bytes(info)) is not None}
        return self._known[key]

    def largest(self, shapes: Shapes) -> int:
        """The bytes of the largest value sized at ``shapes`` (0: none is)."""
        return max(self.at(shapes).values(), default=0)

    def bound(self, shapes: Shapes) -> onnx.ModelProto:
        """The original without its weights' bytes, its inputs of ``shapes``, its declared
        intermediate and output shapes left out (a declared ``-1`` is no error of the run)."""
        if self._light is None:
            light = serialize_light(self.model)
            given = len(light.graph.input)
            self._light = without_large_constants(light)
            del light  # (a model of Constant weights: their data, held by no proto here)
            self._typed_inputs = {i.name for i in self._light.graph.input[given:]}
            del self._light.graph.value_info[:]
            for output in self._light.graph.output:
                if output.type.HasField("tensor_type"):
                    output.type.tensor_type.ClearField("shape")
        proto = onnx.ModelProto()
        proto.CopyFrom(self._light)
        for value in proto.graph.input:
            shape = shapes.get(value.name)
            if shape is None or not value.type.HasField("tensor_type"):
                continue
            dims = value.type.tensor_type.shape
            dims.ClearField("dim")
            for size in shape:
                dims.dim.add().dim_value = size
        return proto


def _bytes(info: onnx.ValueInfoProto) -> int | None:
    """A tensor value's bytes where its type and every dim are known."""
    tensor = info.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
    if not tensor.elem_type or (dims and min(dims) < 0) or not tensor.HasField("shape"):
        return None
    try:
        size = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).itemsize
    except (KeyError, TypeError, ValueError):
        return None
    return int(np.prod(dims, dtype=np.int64)) * size
