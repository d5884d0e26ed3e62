"""How two models are compared in onnxruntime, as one typed value.

``onnxfold.compare`` takes these as keywords; the command line (``--check``, ``compare``,
``--latency``) and the check's save build one :class:`CompareOptions` and hand it on, so the
settings travel together, typed, from the flags to the comparison.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from onnxfold.check.running.levels import DEFAULT_LEVEL
from onnxfold.errors import InputError
from onnxfold.numbers import INT64_MAX


@dataclass(frozen=True, kw_only=True)
class CompareOptions:
    """Everything :func:`onnxfold.check.compare.compare_models` needs besides the models and
    the number of input sets.

    ``inputs``: arrays used in every input set (a mapping or an .npz path; the rest random);
    ``seed``: the first input set's; ``dims``: symbolic dims bound (the rest follow the graph's
    relations, else are guessed); ``int_ranges``: ``[low, high)`` of random integer inputs;
    ``rtol``, ``atol``: tolerances for every float output (None: by dtype);
    ``custom_op_libraries``: what onnxruntime loads for both models; ``level``: onnxruntime's
    graph optimization level; ``verify``: re-derive every folded tensor of the second model
    from the first (None: when it carries onnxfold's provenance); ``window_bytes``: run both
    models stage by stage, each stage at most this many bytes of weights
    (``onnxfold.check.running.stages``; None: only where a session over a whole model does
    not fit in the memory left).
    """

    inputs: Mapping[str, np.ndarray] | str | os.PathLike | None = None
    seed: int = 0
    dims: Mapping[str, int] = field(default_factory=dict)
    int_ranges: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    rtol: float | None = None
    atol: float | None = None
    custom_op_libraries: tuple[str | os.PathLike, ...] = ()
    level: str = DEFAULT_LEVEL
    verify: bool | None = None
    window_bytes: int | None = None

    def __post_init__(self) -> None:
        """The dims are checked as ``--dim`` checks them (a Python caller's too)."""
        checked_dims(self.dims)
        if self.window_bytes is not None and (
                isinstance(self.window_bytes, bool) or not isinstance(
                    self.window_bytes, numbers.Integral) or self.window_bytes < 1):
            raise InputError(f"window_bytes: {self.window_bytes!r}: must be a positive number "
                             "of bytes")


def checked_dims(dims: Mapping[str, int] | None) -> None:
    """InputError (in ``--dim``'s words) for a dim bound to anything but an integer from 1
    to int64's largest: a dim of 0 would compare no element and pass."""
    for name, value in (dims or {}).items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or \
                not 1 <= value <= INT64_MAX:
            raise InputError(f"--dim {name}: {value!r}: must be an integer between 1 and "
                             f"{INT64_MAX} (a dim of 0 compares no element)")
