"""Custom-op libraries (``--custom-op-library``): shared libraries onnxruntime loads so that a
model with ops of a custom domain can run in ``--check``, ``compare`` and ``Session``.

The paths are the user's files, checked like any input before anything runs: each must be an
existing regular file. Loading one runs its code (it is a native library), which is what the
user asked for by naming it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from onnxfold.io.opener import check_regular


def checked_libraries(paths: Sequence[str | os.PathLike]) -> tuple[str, ...]:
    """``paths`` as strings, each a regular file now (``onnxfold.io.opener``: a FIFO is not
    waited on); InputError names the first that is not."""
    for path in paths:
        check_regular(path, shown=f"custom-op library {os.fspath(path)}")
    return tuple(os.fspath(path) for path in paths)

