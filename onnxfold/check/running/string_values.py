"""Strings as the check compares and shows them.

One string tensor reaches the check in three forms: onnx-ir's ``tensor.numpy()`` gives
fixed-width bytes (``|S5``, built as ``np.array(string_data)``), onnxruntime gives object arrays
of ``str``, ``tobytes()`` raises on a string tensor. The check compares a fold with what the
original computes through the fold's own form: what onnxruntime computed is turned into the
array onnx-ir would build from the same strings (``as_tensor_form``), so that equal strings are
equal arrays of one dtype and the bytes compare. Values shown in a message are text on both
sides (``shown``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

SHOWN_ENCODING = "utf-8"


def is_string(array: np.ndarray) -> bool:
    """Whether ``array`` holds strings (objects, ``str`` or ``bytes``)."""
    return array.dtype.kind in "OSU"


def as_bytes(item: object) -> bytes:
    """One string element as its bytes (a ``str`` encoded as UTF-8, onnxruntime's encoding)."""
    return item.encode(SHOWN_ENCODING) if isinstance(item, str) else bytes(item)  # type: ignore[call-overload]


def as_tensor_form(array: np.ndarray) -> np.ndarray:
    """``array`` (onnxruntime's strings) as onnx-ir's ``numpy()`` gives the same strings, or
    ``array`` itself where that form would lose a byte (a string ending in NUL: fixed-width
    bytes drop it) or it is no string array. Equal strings then give equal arrays of one
    dtype; a string ending in NUL keeps an object dtype, so no array comparison can match it
    to a form that lost the NUL (a fold's string constant is judged by :func:`tensor_key`,
    string by string, exactly)."""
    if array.dtype.kind not in "OU":
        return array
    items = [as_bytes(x) for x in array.reshape(-1).tolist()]
    if any(item.endswith(b"\x00") for item in items):
        return array
    return np.array(items).reshape(array.shape)


def tensor_key(tensor: ir.TensorProtocol) -> bytes | tuple[bytes, ...]:
    """What identifies ``tensor``'s values: its bytes, or its strings one by one (exactly,
    trailing NULs included) for a string tensor, which has no bytes."""
    if tensor.dtype != ir.DataType.STRING:
        return tensor.tobytes()
    data = getattr(tensor, "string_data", None)
    items: Sequence[object] = data() if callable(data) else tensor.numpy().reshape(-1).tolist()
    return tuple(as_bytes(x) for x in items)


def shown(array: np.ndarray) -> object:
    """``array``'s values for a message: strings as text (bytes decoded, what cannot be decoded
    escaped), anything else as its list."""
    if not is_string(array):
        return array.tolist()
    return np.vectorize(_text, otypes=[object])(array).tolist() if array.size else []


def _text(item: object) -> str:
    if isinstance(item, bytes | np.bytes_):
        return bytes(item).decode(SHOWN_ENCODING, errors="backslashreplace")
    return str(item)


def shown_pair(got: np.ndarray, derived: np.ndarray) -> str:
    """Both values for a DIFFERS line, after the reason (which names the original's dtype and
    shape already where they differ from the fold's, so they are not said twice)."""
    if _kind(got) != _kind(derived) or got.shape != derived.shape:
        return f": {shown(derived)}, the fold holds {_kind(got)}{list(got.shape)}: {shown(got)}"
    return f"; the original computes {shown(derived)}, the fold holds {shown(got)}"


def _kind(array: np.ndarray) -> str:
    return "string" if is_string(array) else str(array.dtype)


__all__ = ["as_bytes", "as_tensor_form", "is_string", "shown", "shown_pair", "tensor_key"]
