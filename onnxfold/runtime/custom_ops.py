"""Custom-op libraries (``--custom-op-library``): shared libraries onnxruntime loads so that a
model with ops of a custom domain can run in ``--check``, ``compare`` and ``Session``.

The paths are the user's files, checked like any input before anything runs: each must be an
existing regular file. Loading one runs its code (it is a native library), which is what the
user asked for by naming it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

from onnxfold.errors import InputError
from onnxfold.host.ort_sessions import register_libraries


def checked_libraries(paths: Sequence[str | os.PathLike]) -> tuple[str, ...]:
    """``paths`` as strings, each an existing regular file; InputError names the first that
    is not."""
    checked = []
    for path in paths:
        path = os.fspath(path)
        try:
            mode = os.stat(path).st_mode
        except OSError as e:
            raise InputError(f"custom-op library {path}: {e.strerror or 'cannot be read'}"
                             ) from None
        if not stat.S_ISREG(mode):
            raise InputError(f"custom-op library {path}: not a regular file")
        checked.append(path)
    return tuple(checked)


register = register_libraries  # the check's sessions load them through this name
