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
# each value attribute of a Constant: the type its schema gives it (of another type only in an
# opset no schema judged, ``io/attribute_types.py``, where it is read as no value), and the
# dtype of a number or a list of numbers (a tensor has its own)
_VALUE_FORMS: dict[str, tuple[ir.AttributeType, type[np.generic] | None]] = {
    "value": (_A.TENSOR, None), "value_float": (_A.FLOAT, np.float32),
    "value_int": (_A.INT, np.int64), "value_floats": (_A.FLOATS, np.float32),
    "value_ints": (_A.INTS, np.int64)}
_LISTS = (_A.FLOATS, _A.INTS)


def _value_form(node: ir.Node) -> tuple[ir.Attr, type[np.generic] | None] | None:
    """A Constant's value attribute (the first of :data:`_VALUE_FORMS` it has) and the dtype
    of its numbers; None where it has none of them (a string, a sparse value) or that one is
    of another type than its form's."""
    for name, attr in node.attributes.items():
        form = _VALUE_FORMS.get(name)
        if form is not None:
            return (attr, form[1]) if attr.type == form[0] else None
    return None


def _read_constant(node: ir.Node) -> np.ndarray | None:
    found = _value_form(node)
    if found is None:
        return None
    attr, dtype = found
    if dtype is None:
        arr = tensor_of(attr).numpy()
        return None if arr.dtype.kind in "OSU" else arr
    return np.asarray(list(attr.value) if attr.type in _LISTS else attr.value, dtype)


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
    found = _value_form(node)
    if found is None:
        return 0, 0
    attr, dtype = found
    if dtype is None:
        tensor = tensor_of(attr)
        return (0, 0) if tensor.dtype == ir.DataType.STRING else (tensor.size, tensor.nbytes)
    count = len(attr.value) if attr.type in _LISTS else 1
    return count, count * np.dtype(dtype).itemsize


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
