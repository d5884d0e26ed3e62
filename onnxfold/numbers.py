"""The one parser of every number a user types (flags, ``--dim`` and ``--input-shape`` values).

Python's ``int`` and ``float`` accept more than a user means: ``int("١٢")`` (Arabic-Indic
digits) is 12, ``"²".isdigit()`` is true while ``int("²")`` fails, ``float("nan")`` and
``float("1e999")`` (infinity) pass, and an int has no upper bound while every dim and size
onnxfold hands to onnx, numpy or onnxruntime is an int64. Here a number is ASCII only, finite,
and within int64; anything else is :class:`NumberError`, a one-line message naming the value.
"""

from __future__ import annotations

import math
import re

from onnxfold.errors import InputError

INT64_MAX = (1 << 63) - 1
_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)
_SIZE = re.compile(r"([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?", re.ASCII | re.IGNORECASE)
_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class NumberError(InputError):
    """A number the user typed that is malformed or out of range."""


def _range(text: str, minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f"{text}: must be between {minimum} and {maximum}"
    if minimum is not None:
        return f"{text}: must be at least {minimum}"
    return f"{text}: must be at most {maximum}"


def parse_int(text: str, minimum: int | None = None, maximum: int = INT64_MAX) -> int:
    """An integer written in ASCII digits (an optional sign), in ``[minimum, maximum]``."""
    stripped = text.strip()
    if not _INT.fullmatch(stripped):
        raise NumberError(f"{text!r}: not an integer (ASCII digits only)")
    value = int(stripped)
    low = -INT64_MAX - 1 if minimum is None else minimum
    if not low <= value <= maximum:
        raise NumberError(_range(repr(text), minimum, maximum))
    return value


def parse_float(text: str, minimum: float | None = None) -> float:
    """A finite decimal number in ASCII (``1.5``, ``2e-3``), at least ``minimum``."""
    stripped = text.strip()
    if not _FLOAT.fullmatch(stripped):
        raise NumberError(f"{text!r}: not a number (ASCII digits, e.g. 1.5 or 2e-3)")
    value = float(stripped)
    if not math.isfinite(value):
        raise NumberError(f"{text!r}: out of range")
    if minimum is not None and value < minimum:
        raise NumberError(_range(repr(text), minimum, None))
    return value


def size_text(nbytes: int) -> str:
    """``nbytes`` as a person reads a size: ``512 B``, ``12.0 KiB``, ``48.0 MiB``,
    ``11.05 GiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{nbytes} B"


def parse_bytes(text: str) -> int:
    """A size: '512M', '2G', '1.5GiB' or a plain byte count, at most int64."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise NumberError(f"{text!r}: not a size (e.g. 512M, 2G)")
    value = float(match.group(1)) * _SCALE[match.group(2).lower()]
    if not value <= INT64_MAX:  # also false for inf
        raise NumberError(f"{text!r}: too large (at most 8 EiB)")
    return int(value)


def flag_value(flag: str, text: str, minimum: int | None = None) -> int:
    """``parse_int`` for a value inside a compound flag (``--dim NAME=V``): the error names
    the flag."""
    try:
        return parse_int(text, minimum)
    except NumberError as e:
        raise NumberError(f"{flag}: {e}") from None
