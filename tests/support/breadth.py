"""The breadth tier: a check CI runs on a core of exports, models or sizes, repeated over the rest.

The suite's checks over the export matrix, the wild corpus and a few other axes (signals,
counts) are the same check repeated over many subjects. CI (``.ci/run``, the README's test
command) runs each of them on a core chosen to span what the check must handle (both
exporters, decoders with a KV cache, mixture-of-experts, encoders, encoder-decoders, vision,
speech, quantized, float16, recurrent and convolutional models; each wild model at its first
size) and the breadth tier (``python -m pytest -n 2 --breadth``) runs them on every subject.
A behaviour is never only in the breadth tier: every test function has at least one case in
CI. The core sets live next to their subjects (``export_matrix.CORE``, the wild tier's
``CORE``); this module only marks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

MARK = pytest.mark.breadth
_Param = type(pytest.param(None))  # pytest's ParameterSet (its module is private)


def over(values: Iterable[Any], in_core: Callable[[Any], bool]) -> list:
    """``values`` as pytest parameters: a value ``in_core`` runs in CI, any other in the
    breadth tier. A tuple is one case of several arguments (``in_core`` gets the tuple); a
    ``pytest.param`` keeps its marks and id."""
    made = []
    for value in values:
        param = value if isinstance(value, _Param) else pytest.param(
            *(value if isinstance(value, tuple) else (value,)))
        args = param.values[0] if len(param.values) == 1 else tuple(param.values)
        made.append(param if in_core(args) else pytest.param(
            *param.values, marks=(*param.marks, MARK), id=param.id))
    return made
