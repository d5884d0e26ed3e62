"""One onnxruntime session of a fallback batch: its outputs' description, running it, reading
the results back as numpy arrays.

Used in the folding process (``onnxfold.fold.fallback``) and in the child process that runs an
expensive batch where it can be killed (``onnxfold.fold.fallback_child``): both run the same model
bytes through the same code, so a fold computes the same bits wherever it ran. Only plain data
(:class:`Wanted`) describes the outputs, so that it can be handed to a child process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import onnx_ir as ir

from onnxfold.analysis.declines import DeclineKind, Reason
from onnxfold.errors import clipped
from onnxfold.host import address_space
from onnxfold.ir.arrays import aligned
from onnxfold.ir.dtypes import onnx_type


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
    return is_raw_dtype(value.dtype.numpy())


def is_raw_dtype(dtype: np.dtype) -> bool:
    """A dtype onnxruntime's Python API and ``np.save`` take only as its bits (bfloat16, float8,
    other ml_dtypes): the one test both sides of a fallback session use."""
    return dtype.kind == "V" or "bfloat16" in dtype.name or "float8" in dtype.name


def raw_bits(arr: np.ndarray) -> np.ndarray:
    """``arr`` (C-contiguous) viewed as unsigned integers of its item size."""
    return arr.view(np.dtype(f"u{arr.dtype.itemsize}"))


def first_line(e: Exception) -> str:
    text = str(e).strip()
    return clipped(text.splitlines()[0], 300) if text else type(e).__name__


def to_ort(arr: np.ndarray):
    """``arr`` as an OrtValue (without a copy where onnxruntime allows it); a string array as
    an object array of ``str`` (onnxruntime makes no OrtValue of one: :func:`run_guarded`
    feeds it as an array). FallbackError for a 4-bit or 2-bit array: onnxruntime takes the
    shape of the array it is given and reads its bytes as packed, two elements a byte, so
    ``[1, 2, 3, 4]`` fed as uint4 was ``[1, 0, 2, 0]`` (a ``--fold-qdq`` of 4-bit weights
    computed wrong values)."""
    import onnxruntime as ort

    if arr.dtype.kind in "OSU":
        return ort_strings(arr)
    if ir.DataType.from_numpy(arr.dtype).bitwidth < 8:
        raise FallbackError(f"a {arr.dtype.name} tensor, which onnxruntime's Python binding "
                            "reads as packed from an array of one element a byte",
                            DeclineKind.UNSUPPORTED_TYPE)
    if is_raw_dtype(arr.dtype):
        raw = raw_bits(aligned(arr))
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, onnx_type(arr.dtype))
    return ort.OrtValue.ortvalue_from_numpy(aligned(arr))  # as a session holds initializers


def ort_strings(arr: np.ndarray) -> np.ndarray:
    """A string array as onnxruntime reads one: objects of ``str``. onnx-ir hands strings as
    bytes (``|S5`` arrays, or objects of ``bytes``), and onnxruntime turns a ``bytes`` object
    into the text of its repr (``b'the'`` for ``the``) and reads a fixed-width bytes array past
    its elements; bytes are decoded as UTF-8, onnxruntime's own encoding of its strings.
    FallbackError (unsupported type) for bytes that are no UTF-8: onnxruntime's Python binding
    takes ``str`` only, so nothing can feed them."""
    out = np.empty(arr.shape, dtype=object)
    flat = out.reshape(-1)
    for k, item in enumerate(arr.reshape(-1).tolist()):
        if not isinstance(item, bytes | bytearray | np.bytes_):
            flat[k] = str(item)
            continue
        try:
            flat[k] = bytes(item).decode("utf-8")
        except UnicodeDecodeError:
            raise FallbackError("a string that is not UTF-8, which onnxruntime's Python binding "
                                "cannot feed", DeclineKind.UNSUPPORTED_TYPE) from None
    return out


def run_guarded(session, feed: dict, outputs: Sequence[Wanted], run_options,
                room: int | None, contrib: bool) -> list[np.ndarray]:
    """Run ``session`` on ``feed`` (name -> OrtValue) and return the ``outputs``' arrays.

    Raises FallbackError before running when the outputs the session declares would take more
    than ``room`` bytes (see :func:`check_declared_sizes`; ``contrib``: the batch has ops
    outside the default domain), and after it when the computed outputs do. Outputs of contrib
    ops that nothing can size run under an address-space bound of ``room`` (:func:`_run_bounded`).
    onnxruntime's own errors propagate.
    """
    sized = room is None or check_declared_sizes(session, outputs, room, contrib)
    names = [w.name for w in outputs]
    if any(isinstance(v, np.ndarray) for v in feed.values()):  # strings: a plain run
        plain = {k: v if isinstance(v, np.ndarray) else v.numpy() for k, v in feed.items()}
        return [np.asarray(a) for a in session.run(names, plain, run_options)]
    if any(w.raw_only for w in outputs):
        return _run_into_buffers(session, feed, outputs, run_options)
    if sized:
        results = session.run_with_ort_values(names, feed, run_options)
    else:
        results = _run_bounded(session, feed, names, run_options, cast(int, room))
    if room is not None:
        _check_computed_sizes(results, room)
    arrays = []
    for spec, res in zip(outputs, results):
        if not res.is_tensor():
            raise FallbackError(f"output {spec.name} is not a tensor",
                                DeclineKind.UNSUPPORTED_TYPE)
        arrays.append(_from_ort(res))
    return arrays


def check_declared_sizes(session, outputs: Sequence[Wanted], room: int, contrib: bool) -> bool:
    """FallbackError (size) unless the outputs onnxruntime's session declares fit ``room``
    bytes; return whether every output is sized. Outputs of unknown size count as sized for
    default-domain ops (onnx's inference sized them before, when it could) but not for other
    domains' ops (contrib ops), which nothing else sizes: those run under a bound. onnxruntime
    declares an output it cannot shape with no dims, as a scalar: only a value known to be a
    scalar is counted as one."""
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
    return not (unknown and contrib)


def _run_bounded(session, feed: dict, names: list[str], run_options, room: int) -> list:
    """``session.run_with_ort_values`` with the address space bounded to ``room`` bytes more
    (and ``address_space.RUN_ALLOWANCE``); FallbackError (size) if it cannot be bounded or an
    allocation fails under the bound."""
    with address_space.bounded(room) as in_place:
        if not in_place:
            raise FallbackError("a contrib op's output size is unknown before it runs",
                                DeclineKind.SIZE)
        try:
            return session.run_with_ort_values(names, feed, run_options)
        except Exception as e:  # onnxruntime's Fail, or MemoryError
            text = str(e)
            if isinstance(e, MemoryError) or "allocate" in text or "bad_alloc" in text or \
                    "bad allocation" in text:
                raise FallbackError(f"outputs of unknown size exceeded the pool budget's {room} B "
                                    "left while running", DeclineKind.SIZE) from None
            raise


def _check_computed_sizes(results: Sequence, room: int) -> None:
    """FallbackError (size) if the computed outputs (OrtValues) take more than ``room`` bytes;
    checked before they are copied out of onnxruntime."""
    total = 0
    for res in results:
        if res.is_tensor():
            total += math.prod(res.shape()) * _ORT_ITEMSIZE.get(res.data_type(), 1)
    if total > room:
        raise FallbackError(f"outputs of {total} B exceed the pool budget's {room} B left",
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
