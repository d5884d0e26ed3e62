"""One onnxruntime session of a fallback batch: its outputs' description, running it, reading
the results back as numpy arrays.

Used in the folding process (``onnxfold.fallback``) and in the child process that runs an
expensive batch where it can be killed (``onnxfold.fallback_child``): both run the same model
bytes through the same code, so a fold computes the same bits wherever it ran. Only plain data
(:class:`Wanted`) describes the outputs, so that it can be handed to a child process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxfold.arrays import c_contiguous
from onnxfold.declines import DeclineKind, Reason


class FallbackError(Exception):
    """onnxruntime could not build or run the batch (message: its first line)."""

    def __init__(self, detail: str, kind: DeclineKind = DeclineKind.RUNTIME_ERROR) -> None:
        super().__init__(detail)
        self.reason = Reason(kind, detail)


@dataclass(frozen=True)
class Wanted:
    """An output of the batch as the session runner needs it: its name, its ONNX element type
    and static shape when known, whether onnxruntime's Python API cannot hand it over as a
    numpy array (bfloat16, float8: bound to a buffer instead), and whether it is known to be a
    scalar."""

    name: str
    elem_type: int | None
    shape: tuple[int, ...] | None
    raw_only: bool
    scalar: bool


def describe_output(value: ir.Value, shape: tuple[int, ...] | None) -> Wanted:
    """The :class:`Wanted` of ``value`` (``shape``: its static shape, or None)."""
    assert value.name is not None  # onnx_ir names every value of a graph
    return Wanted(value.name, None if value.dtype is None else int(value.dtype), shape,
                  raw_only(value), shape == ())


def raw_only(value: ir.Value) -> bool:
    """onnxruntime's Python API cannot hand these (bfloat16, float8) over as numpy arrays."""
    if value.dtype is None or value.dtype in (ir.DataType.STRING,):
        return False
    dtype = value.dtype.numpy()
    return dtype.kind == "V" or "bfloat16" in dtype.name or "float8" in dtype.name


def first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def to_ort(arr: np.ndarray):
    """``arr`` as an OrtValue (without a copy where onnxruntime allows it)."""
    import onnxruntime as ort

    from onnxfold.dtypes import onnx_type

    if arr.dtype.kind == "V" or "bfloat16" in arr.dtype.name or "float8" in arr.dtype.name:
        raw = c_contiguous(arr).view(np.dtype(f"u{arr.dtype.itemsize}"))
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, onnx_type(arr.dtype))
    return ort.OrtValue.ortvalue_from_numpy(c_contiguous(arr))


def run_session(session, feed: dict, outputs: Sequence[Wanted], run_options,
                room: int | None, contrib: bool) -> list[np.ndarray]:
    """Run ``session`` on ``feed`` (name -> OrtValue) and return the ``outputs``' arrays.

    Raises FallbackError before running when the outputs the session declares would take more
    than ``room`` bytes (see :func:`check_declared_sizes`; ``contrib``: the batch has ops
    outside the default domain); onnxruntime's own errors propagate.
    """
    if room is not None:
        check_declared_sizes(session, outputs, room, contrib)
    if any(w.raw_only for w in outputs):
        return _run_into_buffers(session, feed, outputs, run_options)
    results = session.run_with_ort_values([w.name for w in outputs], feed, run_options)
    arrays = []
    for spec, res in zip(outputs, results):
        if not res.is_tensor():
            raise FallbackError(f"output {spec.name} is not a tensor",
                                DeclineKind.UNSUPPORTED_TYPE)
        arrays.append(_from_ort(res))
    return arrays


def check_declared_sizes(session, outputs: Sequence[Wanted], room: int, contrib: bool) -> None:
    """FallbackError (size) unless the outputs onnxruntime's session declares fit ``room``
    bytes. Outputs of unknown size are let through for default-domain ops (onnx's inference
    sized them before, when it could) but not for other domains' ops (contrib ops), which
    nothing else sizes. onnxruntime declares an output it cannot shape with no dims, as a
    scalar: only a value known to be a scalar is counted as one."""
    total, unknown = 0, False
    for out, spec in zip(session.get_outputs(), outputs):
        dims = out.shape
        itemsize = _ORT_ITEMSIZE.get(out.type)
        if dims == [] and not spec.scalar:
            unknown = True
            continue
        if itemsize is None or dims is None or not all(isinstance(d, int) for d in dims):
            unknown = True
            continue
        total += math.prod(dims) * itemsize
    if total > room:
        raise FallbackError(f"outputs of {total} B would exceed the pool budget's {room} B left",
                            DeclineKind.SIZE)
    if unknown and contrib:
        raise FallbackError("a contrib op's output size is unknown before it runs",
                            DeclineKind.SIZE)


_ORT_ITEMSIZE = {f"tensor({name})": size for name, size in (
    ("float", 4), ("double", 8), ("float16", 2), ("bfloat16", 2), ("int8", 1), ("uint8", 1),
    ("int16", 2), ("uint16", 2), ("int32", 4), ("uint32", 4), ("int64", 8), ("uint64", 8),
    ("bool", 1), ("float8e4m3fn", 1), ("float8e4m3fnuz", 1), ("float8e5m2", 1),
    ("float8e5m2fnuz", 1))}


def _run_into_buffers(session, feed: dict, outputs: Sequence[Wanted], run_options
                      ) -> list[np.ndarray]:
    """Run with every output bound to a numpy buffer of its statically known shape."""
    import onnxruntime as ort

    binding = session.io_binding()
    for name, value in feed.items():
        binding.bind_ortvalue_input(name, value)
    out = []
    for spec in outputs:
        if spec.elem_type is None or spec.shape is None:
            kind = "?" if spec.elem_type is None else ir.DataType(spec.elem_type).name
            raise FallbackError(f"{kind} output {spec.name} of unknown shape",
                                DeclineKind.UNSUPPORTED_TYPE)
        dtype = ir.DataType(spec.elem_type).numpy()
        buffer = np.empty(spec.shape, np.dtype(f"u{dtype.itemsize}"))
        binding.bind_ortvalue_output(spec.name, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            buffer, spec.elem_type))
        out.append(buffer.view(dtype))
    session.run_with_iobinding(binding, run_options)
    return out


def _from_ort(res) -> np.ndarray:
    try:
        return res.numpy()
    except Exception as e:
        raise FallbackError(f"cannot read an onnxruntime result: {first_line(e)}") from None
