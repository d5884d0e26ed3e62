"""Constant data: the arrays of initializers and Constant nodes, as folder and rules read them."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxfold.ir.graph import is_default_op, tensor_of

_ARRAY_KEY = "onnxfold.array"  # Node.meta: a Constant node's array, read once


def _constant_value(node: ir.Node) -> np.ndarray | None:
    """The array of a Constant node, or None for sparse/string constants (read once: onnx-ir's
    attribute access is slow enough to matter on graphs with thousands of Constants)."""
    if _ARRAY_KEY not in node.meta:
        node.meta[_ARRAY_KEY] = _read_constant(node)
    return node.meta[_ARRAY_KEY]


_A = ir.AttributeType
# each value attribute of a Constant, by the type its schema gives it: of another type only in
# an opset no schema judged (``io/attribute_types.py``), where it is read as no value
_VALUE_TYPES = {"value": _A.TENSOR, "value_float": _A.FLOAT, "value_int": _A.INT,
                "value_floats": _A.FLOATS, "value_ints": _A.INTS}


def _read_constant(node: ir.Node) -> np.ndarray | None:
    for name, attr in node.attributes.items():
        if _VALUE_TYPES.get(name, attr.type) != attr.type:
            return None
        if name == "value":
            arr = tensor_of(attr).numpy()
            return None if arr.dtype.kind in "OSU" else arr
        if name in ("value_float", "value_int"):
            return np.asarray(attr.value, np.float32 if name == "value_float" else np.int64)
        if name in ("value_floats", "value_ints"):
            return np.asarray(list(attr.value),
                              np.float32 if name == "value_floats" else np.int64)
    return None


def constant_array(value: ir.Value) -> np.ndarray | None:
    """The data of an initializer or of a Constant node's output; None for anything else."""
    if value.const_value is not None:
        return value.const_value.numpy()
    producer = value.producer()
    if producer is not None and is_default_op(producer, "Constant"):
        return _constant_value(producer)
    return None


def constant_data_size(node: ir.Node) -> tuple[int, int]:
    """The elements and bytes of a Constant node's value, as a weight's count (strings and
    sparse values: none), from its shape and dtype (its data is not read)."""
    for name, attr in node.attributes.items():
        if _VALUE_TYPES.get(name, attr.type) != attr.type:
            return 0, 0
        if name == "value":
            tensor = tensor_of(attr)
            if tensor.dtype == ir.DataType.STRING:
                return 0, 0
            return tensor.size, tensor.nbytes
        if name in ("value_float", "value_int"):
            return 1, 4 if name == "value_float" else 8
        if name in ("value_floats", "value_ints"):
            return len(attr.value), len(attr.value) * (4 if name == "value_floats" else 8)
    return 0, 0


def has_source_array(value: ir.Value) -> bool:
    """Whether :func:`source_array` gives data for ``value``, without reading an initializer's
    (a caller's proto copies its bytes at every read)."""
    if value.const_value is not None:
        return value.const_value.dtype != ir.DataType.STRING
    return source_array(value) is not None  # a Constant's array: read once (node.meta)


def source_array(value: ir.Value) -> np.ndarray | None:
    """A constant's data as the pool can hold it (numeric: strings are not folded)."""
    arr = constant_array(value)
    return None if arr is None or arr.dtype.kind in "OSU" else arr
