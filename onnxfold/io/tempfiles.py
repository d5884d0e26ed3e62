"""Temporary files beside an output, renamed into place once complete (standard library only)."""

from __future__ import annotations

import os
import tempfile

from onnxfold.errors import OutputError


def temp_beside(path: str, suffix: str = ".tmp") -> tuple[int, str]:
    """Open a new hidden temporary file in ``path``'s directory, with the umask's permissions."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=suffix,
                                   dir=directory)
    except OSError as e:
        raise OutputError(f"{path}: cannot write here ({e.strerror})") from None
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
    return fd, tmp
