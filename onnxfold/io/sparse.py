"""Sparse initializers become dense ones on load (onnx-ir has no sparse tensors).

The dense size comes from the file's own ``dims``, so it is bounded before anything is
allocated; values stored as external data are refused (onnx keeps them inline in practice).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper

from onnxfold.errors import InputError
from onnxfold.protos import graph_protos

DENSE_LIMIT = 1 << 30  # bytes a densified sparse initializer may take


def _dense(sparse: onnx.SparseTensorProto, where: str) -> onnx.TensorProto:
    values, indices, dims = sparse.values, sparse.indices, list(sparse.dims)
    name = values.name
    if values.data_location == onnx.TensorProto.EXTERNAL or \
            indices.data_location == onnx.TensorProto.EXTERNAL:
        raise InputError(f"{where}: sparse initializer {name}: external data is not supported")
    if any(d < 0 for d in dims):
        raise InputError(f"{where}: sparse initializer {name}: invalid dims {dims}")
    try:
        vals = numpy_helper.to_array(values).reshape(-1)
        idx = numpy_helper.to_array(indices).astype(np.int64)
    except Exception as e:  # malformed tensor fields
        raise InputError(f"{where}: sparse initializer {name}: unreadable ({type(e).__name__})"
                         ) from None
    size = math.prod(dims)
    if size * vals.dtype.itemsize > DENSE_LIMIT:
        raise InputError(f"{where}: sparse initializer {name}: dense form of {dims} exceeds "
                         f"{DENSE_LIMIT >> 20} MiB")
    if idx.ndim == 2 and idx.shape == (vals.size, len(dims)):
        if ((idx < 0) | (idx >= np.asarray(dims, np.int64))).any():
            raise InputError(f"{where}: sparse initializer {name}: index out of range")
        idx = np.ravel_multi_index(tuple(idx.T), dims) if dims else idx.reshape(-1)
    elif idx.ndim != 1 or idx.size != vals.size or ((idx < 0) | (idx >= size)).any():
        raise InputError(f"{where}: sparse initializer {name}: indices do not match its values")
    dense = np.zeros(size, vals.dtype)
    dense[idx] = vals
    return numpy_helper.from_array(dense.reshape(dims), name)


def densify(model: onnx.ModelProto, where: str) -> int:
    """Replace every sparse initializer of ``model`` (all graphs) by a dense one; return how
    many there were."""
    count = 0
    for graph in graph_protos(model.graph):
        for sparse in graph.sparse_initializer:
            graph.initializer.append(_dense(sparse, where))
            count += 1
        graph.ClearField("sparse_initializer")
    return count
