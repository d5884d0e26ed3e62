"""A model's facts for its signature: opset and IR version, each input and output (dtype, shape
with its symbolic dims named), the parameters (elements and bytes) and its files' bytes."""

from __future__ import annotations

import os
from typing import Any

import onnx_ir as ir

from onnxfold.io.writer import input_files
from onnxfold.ir.constants import constant_data_size
from onnxfold.ir.graph import is_default_op


def facts(model: ir.Model) -> dict[str, Any]:
    """The facts of ``model`` as it is now (its files' bytes: those it was read from)."""
    sizes = {(info.st_dev, info.st_ino): info.st_size for info in
             (os.stat(p) for p in input_files(model) if os.path.isfile(p))}
    return {"opset": model.opset_imports.get("", model.opset_imports.get("ai.onnx")),
            "ir_version": model.ir_version, "inputs": _inputs(model),
            "outputs": [_value(v) for v in model.graph.outputs], "parameters": _params(model),
            "file_bytes": sum(sizes.values())}


def _inputs(model: ir.Model) -> list[dict[str, Any]]:
    """``{name, dtype, shape}`` of each graph input that is no initializer."""
    return [_value(v) for v in model.graph.inputs if v.name not in model.graph.initializers]


def ort_type(value: ir.Value) -> str:
    """``float``, ``int64``: as onnxruntime names a tensor's element type; another type
    (a sequence, an optional) as onnx-ir names it."""
    if value.type is not None and not isinstance(value.type, ir.TensorType):
        return str(value.type)
    return value.dtype.name.lower() if value.dtype is not None else "?"


def _value(value: ir.Value) -> dict[str, Any]:
    """``{name, dtype, shape}`` (``float32``, as the check names it): a dim an int, its
    name, or ``?``."""
    try:
        dtype = str(value.dtype.numpy()) if isinstance(value.type, ir.TensorType) and \
            value.dtype is not None else ort_type(value)
    except TypeError:  # a type numpy has no name for (a 4-bit integer)
        dtype = ort_type(value)
    return {"name": value.name, "dtype": dtype, "shape": None if value.shape is None else [
        d if isinstance(d, int) else getattr(d, "value", None) or "?" for d in value.shape]}


def _params(model: ir.Model) -> dict[str, int]:
    """The main graph's constant data, elements and bytes: its initializers and its Constant
    nodes' values (strings not counted; a fold makes initializers of Constant nodes, so the
    count before and after is of the same thing)."""
    tensors = [v.const_value for v in model.graph.initializers.values()
               if v.const_value is not None and v.const_value.dtype != ir.DataType.STRING]
    constants = [constant_data_size(node) for node in model.graph
                 if is_default_op(node, "Constant")]
    return {"count": sum(t.size for t in tensors) + sum(n for n, _ in constants),
            "bytes": sum(t.nbytes for t in tensors) + sum(b for _, b in constants)}
