"""ONNX shape inference (with data propagation) merged into an onnx-ir model.

The model is serialized without its large weights (they become typed graph inputs for the
call), so inference costs a few milliseconds even on 400 MiB models. Only tensor types are
merged back: a sequence or optional value keeps its type.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from onnxfold.protos import graph_protos

_BIG = 1024


def _serialize_light(model: ir.Model) -> onnx.ModelProto:
    """The model as a proto whose large initializers are typed graph inputs instead."""
    graph = model.graph
    big = {name: v for name, v in graph.initializers.items()
           if v.const_value is not None and v.const_value.nbytes > _BIG}
    added = []
    for name, value in big.items():
        graph.initializers.pop(name)
        if value.type is None:
            value.type = ir.TensorType(value.const_value.dtype)
        if value.shape is None:
            value.shape = value.const_value.shape
        if value not in graph.inputs:
            graph.inputs.append(value)
            added.append(value)
    try:
        return ir.serde.serialize_model(model)
    finally:
        for value in added:
            graph.inputs.remove(value)
        for value in big.values():
            graph.register_initializer(value)


def _shape_of(type_proto: onnx.TypeProto) -> ir.Shape | None:
    if not type_proto.tensor_type.HasField("shape"):
        return None
    dims: list[int | str | None] = []
    for d in type_proto.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(d.dim_value)
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return ir.Shape(dims)


def infer_shapes(model: ir.Model) -> int:
    """Run ONNX shape inference and merge tensor types/shapes; return how many values changed.

    Never fatal: a model ONNX cannot infer keeps the shapes it has.
    """
    try:
        inferred = onnx.shape_inference.infer_shapes(_serialize_light(model), check_type=False,
                                                     strict_mode=False, data_prop=True)
    except Exception:  # inference is an optimization aid, never a reason to fail
        return 0
    infos: dict[str, onnx.TypeProto] = {}
    for g in graph_protos(inferred.graph):
        for vi in list(g.value_info) + list(g.output):
            if vi.type.HasField("tensor_type"):
                infos[vi.name] = vi.type
    changed = 0
    for graph in model.graphs():
        for node in graph:
            for value in node.outputs:
                info = infos.get(value.name or "")
                if info is None or not (value.type is None
                                        or isinstance(value.type, ir.TensorType)):
                    continue
                if value.type is None and info.tensor_type.elem_type:
                    value.type = ir.TensorType(ir.DataType(info.tensor_type.elem_type))
                    changed += 1
                shape = _shape_of(info)
                if shape is not None and (value.shape is None or (
                        not value.shape.is_static() and shape.is_static())):
                    value.shape = shape
                    changed += 1
    return changed
