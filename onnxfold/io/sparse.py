"""Sparse initializers become dense ones on load (onnx-ir has no sparse tensors).

The dense size comes from the file's own ``dims``, so it is bounded before anything is
allocated; values stored as external data are refused (onnx keeps them inline in practice).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from onnxfold.errors import InputError
from onnxfold.ir.protos import function_graphs, graph_protos

DENSE_LIMIT = 1 << 30  # bytes all densified sparse tensors of a model may take together


def _dense(sparse: onnx.SparseTensorProto, where: str, budget: int) -> onnx.TensorProto:
    values, indices, dims = sparse.values, sparse.indices, list(sparse.dims)
    name = values.name
    if values.data_location == onnx.TensorProto.EXTERNAL or \
            indices.data_location == onnx.TensorProto.EXTERNAL:
        raise InputError(f"{where}: sparse tensor {name}: external data is not supported")
    if values.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        raise InputError(f"{where}: sparse tensor {name}: string or untyped values are not "
                         "supported")
    if any(d < 0 for d in dims):
        raise InputError(f"{where}: sparse tensor {name}: invalid dims {dims}")
    size = math.prod(dims)
    itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(values.data_type)).itemsize
    if size * itemsize > budget:
        raise InputError(f"{where}: sparse tensors: dense forms exceed {DENSE_LIMIT >> 20} MiB "
                         f"in total (at {name}, dims {dims})")
    try:
        vals = numpy_helper.to_array(values).reshape(-1)
        idx = numpy_helper.to_array(indices).astype(np.int64)
    except Exception as e:  # malformed tensor fields
        raise InputError(f"{where}: sparse tensor {name}: unreadable ({type(e).__name__})"
                         ) from None
    if idx.ndim == 2 and idx.shape == (vals.size, len(dims)):
        if ((idx < 0) | (idx >= np.asarray(dims, np.int64))).any():
            raise InputError(f"{where}: sparse tensor {name}: index out of range")
        idx = np.ravel_multi_index(tuple(idx.T), dims) if dims else idx.reshape(-1)
    elif idx.ndim != 1 or idx.size != vals.size or ((idx < 0) | (idx >= size)).any():
        raise InputError(f"{where}: sparse tensor {name}: indices do not match its values")
    dense = np.zeros(size, vals.dtype)
    dense[idx] = vals
    return numpy_helper.from_array(dense.reshape(dims), name)


def has_sparse(model: onnx.ModelProto) -> bool:
    """Whether :func:`densify` would change ``model``."""
    return any((isinstance(graph, onnx.GraphProto) and graph.sparse_initializer) or any(
        a.name == "sparse_value" for n in graph.node if n.op_type == "Constant"
        for a in n.attribute) for graph in _node_holders(model))


def _node_holders(model: onnx.ModelProto) -> Iterator[onnx.GraphProto | onnx.FunctionProto]:
    yield from graph_protos(model.graph)
    yield from function_graphs(model)


def densify(model: onnx.ModelProto, where: str,
            graphs: Sequence[onnx.GraphProto] | None = None) -> int:
    """Replace every sparse initializer (all graphs) and every Constant's ``sparse_value`` by a
    dense tensor, within ``DENSE_LIMIT`` bytes in total; return how many there were.
    ``graphs``: ``graph_protos(model.graph)`` when the caller has listed them already."""
    count, budget = 0, DENSE_LIMIT
    holders = _node_holders(model) if graphs is None else \
        [*graphs, *function_graphs(model)]
    for graph in holders:  # function bodies have Constant nodes too
        if isinstance(graph, onnx.GraphProto):
            for sparse in graph.sparse_initializer:
                dense = _dense(sparse, where, budget)
                budget -= len(dense.raw_data)
                graph.initializer.append(dense)
                count += 1
            graph.ClearField("sparse_initializer")
        for node in graph.node:
            if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
                continue  # (most nodes: their attributes are not looked at)
            for attr in node.attribute:
                if attr.name == "sparse_value":
                    dense = _dense(attr.sparse_tensor, where, budget)
                    budget -= len(dense.raw_data)
                    attr.Clear()
                    attr.CopyFrom(onnx.helper.make_attribute("value", dense))
                    count += 1
    return count
