"""Folded values that would be invalid where they are read as a shape.

A constant feeding the shape input of ``Reshape``, ``ConstantOfShape`` or ``Tile`` is checked
by onnxruntime's shape inference when it loads the model: a folded value that is no valid
dimension there (a NaN or an out-of-range float cast to int64 becomes -2**63, a negative
count) makes the whole folded model fail to load, where the original loaded and failed, if at
all, only when run. Such a value is not kept: its producer stays, declined with the reason.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxfold.analysis.declines import DeclineKind, Reason
from onnxfold.ir.graph import is_default_op, node_label

# (op type, input index) -> (what the input is, the smallest valid element)
SHAPE_INPUTS: dict[tuple[str, int], tuple[str, int]] = {
    ("Reshape", 1): ("shape", -1),
    ("ConstantOfShape", 0): ("shape", 0),
    ("Tile", 1): ("repeats", 0),
}


def unusable_as_shape(value: ir.Value, arr: np.ndarray) -> Reason | None:
    """Why ``arr``, the folded ``value``, may not become a constant: a node reads it as a
    shape and an element is no valid dimension there; None when it may."""
    if arr.dtype.kind not in "iu" or arr.size == 0:
        return None
    for use in value.uses():
        node, index = use.node, use.idx
        if not is_default_op(node):
            continue
        spec = SHAPE_INPUTS.get((node.op_type, index))
        if spec is None:
            continue
        what, lowest = spec
        smallest = int(arr.min())
        if smallest < lowest:
            return Reason(DeclineKind.RULE_DECLINED,
                          f"value {smallest} is not a valid element of {node.op_type}'s "
                          f"{what} ({node_label(node)}); onnxruntime would refuse the model")
    return None
