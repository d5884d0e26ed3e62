"""Arrays users hand over: untrusted ``.npz`` files (``--inputs`` files, Session caches) and
the runtime constants ``Session.run`` is given.

Only ``.npz`` archives of plain arrays are accepted (never pickles). Each member's header is
read first: its shape and dtype must agree with the member's size in the archive, and the
total stays under a limit, so a forged header or a compressed bomb is refused before anything
is allocated. The compression bound holds for each member and for the archive as a whole: an
archive inflates to at most ``MAX_RATIO`` (100) times its compressed bytes, or
``COMPRESSED_MIN`` (64 MiB), whichever is larger (40 members each just under the per-member
bound would otherwise make 2.6 GB of a 2.6 MB file).
"""

from __future__ import annotations

import math
import os
import zipfile
from typing import IO

import numpy as np
from numpy.lib import format as npy_format

from onnxfold.errors import InputError, one_line
from onnxfold.io.opener import opened

LIMIT = 16 << 30  # bytes of arrays one file may hold
MAX_RATIO, COMPRESSED_MIN = 100, 64 << 20  # a member over 64 MiB compressed more than 100:1


def _member_header(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple, np.dtype]:
    with archive.open(info) as f:
        version = npy_format.read_magic(f)
        read = {(1, 0): npy_format.read_array_header_1_0,
                (2, 0): npy_format.read_array_header_2_0}.get(version)
        if read is None:
            raise ValueError(f"unsupported .npy version {version}")
        shape, _fortran, dtype = read(f)
    return shape, dtype


def load_arrays(path: str | os.PathLike, limit: int = LIMIT) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` file ``path``; InputError for anything else."""
    path = os.fspath(path)
    try:
        with opened(path) as f:
            return read_arrays(f, path, limit)
    except OSError as e:
        raise InputError(f"{path}: cannot read arrays ({e.strerror})") from None


def read_arrays(file: IO[bytes], label: str, limit: int = LIMIT) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` archive open as ``file`` (seekable; ``label`` names it in
    messages); InputError for anything else."""
    if not zipfile.is_zipfile(file):
        raise InputError(f"{label}: not an .npz archive of named arrays (np.savez writes one)")
    try:
        file.seek(0)
        with zipfile.ZipFile(file) as archive:
            total = inflated = compressed = 0
            for info in archive.infolist():
                if not info.filename.endswith(".npy"):
                    raise ValueError(f"member {info.filename!r} is not an array")
                shape, dtype = _member_header(archive, info)
                if dtype.hasobject:
                    raise ValueError(f"{info.filename}: object arrays are refused")
                nbytes = math.prod(shape) * dtype.itemsize
                if info.file_size > COMPRESSED_MIN and \
                        info.file_size > MAX_RATIO * max(info.compress_size, 1):
                    raise ValueError(f"{info.filename}: compressed {info.file_size} B into "
                                     f"{info.compress_size} B (refused as a decompression bomb)")
                if nbytes > info.file_size:
                    raise ValueError(f"{info.filename}: header claims {nbytes} B, the archive "
                                     f"holds {info.file_size} B")
                inflated += info.file_size
                compressed += info.compress_size
                if inflated > COMPRESSED_MIN and inflated > MAX_RATIO * max(compressed, 1):
                    raise ValueError(f"members compressed {inflated} B into {compressed} B in "
                                     "all (refused as a decompression bomb)")
                total += nbytes
                if total > limit:
                    raise ValueError(f"arrays larger than {limit >> 20} MiB")
        file.seek(0)
        with np.load(file, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except InputError:
        raise
    except Exception as e:  # zipfile, numpy and OS errors of a malformed archive
        raise InputError(f"{label}: cannot read arrays ({type(e).__name__}: "
                         f"{one_line(e, 200)})") from None


def runtime_constant(name: str, value: object) -> np.ndarray:
    """The runtime constant ``name`` handed to ``Session.run`` as the array the fold reads; an
    InputError (one line) for what no backend folds: an array of Python objects or of strings,
    or what numpy makes no array of (a ragged list)."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as e:
        raise InputError(f"runtime constant {name!r}: not an array ({one_line(e, 200)})"
                         ) from None
    if array.dtype.hasobject:
        raise InputError(f"runtime constant {name!r}: an array of Python objects (dtype "
                         "object) cannot be folded; give a numeric array of the input's type")
    if array.dtype.kind in "US":
        raise InputError(f"runtime constant {name!r}: an array of strings cannot be folded "
                         "(runtime constants are numeric); leave it out of runtime_constants")
    return array
