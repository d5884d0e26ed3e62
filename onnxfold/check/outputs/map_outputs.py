"""Outputs that are sequences of maps (ZipMap's: ``seq(map(int64, tensor(float)))``), compared
as their values.

onnxruntime returns such an output as a list of dicts. Compared as objects, a dict equals
another only with every float bit for bit equal, and the table would call the output a
``string``. Where both models return, for every element, the same keys in the same order, the
output is compared as the array of its values (``[sequence length, keys]``, the dtype of the
values), with that dtype's tolerance; otherwise as the objects they are (keys that differ are
mismatches).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


def is_map_sequence(value: object) -> bool:
    """Whether ``value`` is a list of dicts (onnxruntime's form of a sequence of maps)."""
    return isinstance(value, list | tuple) and bool(value) and \
        all(isinstance(item, Mapping) for item in value)


def as_value_arrays(a: object, b: object) -> tuple[object, object, bool]:
    """``a`` and ``b`` (one output of each model) as arrays of their maps' values where both
    are sequences of maps with the same keys, in the same order, element by element; else as
    they are. The third item says whether they were turned into arrays."""
    if not (is_map_sequence(a) and is_map_sequence(b)):
        return a, b, False
    assert isinstance(a, list | tuple) and isinstance(b, list | tuple)
    keys = [list(item.keys()) for item in a]
    if len(a) != len(b) or keys != [list(item.keys()) for item in b] or \
            any(k != keys[0] for k in keys):
        return a, b, False
    return (np.array([list(item.values()) for item in a]),
            np.array([list(item.values()) for item in b]), True)


__all__ = ["as_value_arrays", "is_map_sequence"]
