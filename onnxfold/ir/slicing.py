"""Where ``Slice`` starts and stops along one axis, as onnxruntime computes it.

ONNX's text clamps a backward end into ``[-1, dim - 1]``; onnxruntime (CPU, opset 10 on) reads an
end of ``INT32_MAX`` or ``INT64_MAX`` as "to the end in the step's direction" instead, so a
backward slice from ``INT_MAX`` reaches the first element (the spec's clamping would make it
empty). A folded Slice must give what onnxruntime gives the original.
"""

from __future__ import annotations

_TO_THE_END = frozenset({2**31 - 1, 2**63 - 1})


def onnx_slice(start: int, end: int, step: int, dim: int) -> slice:
    """The Python slice that takes what ``Slice`` takes of an axis of ``dim`` elements
    (``step`` not 0)."""
    start = start + dim if start < 0 else start
    if step < 0:
        start = min(max(start, 0), dim - 1)
        if end in _TO_THE_END:
            return slice(start, None, step)
        end = end + dim if end < 0 else end
        end = min(max(end, -1), dim - 1)
        return slice(start, None if end < 0 else end, step)  # -1: down to element 0
    start = min(max(start, 0), dim)
    end = dim if end in _TO_THE_END else min(max(end + dim if end < 0 else end, 0), dim)
    return slice(start, end, step)
