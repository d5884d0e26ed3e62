"""The one way onnxfold opens a file it did not create: a model, its external data, ``--inputs``
arrays, an adapter file, a cache's key and entries (``docs/files-and-safety.md``, "One door").

A path is a user's, and what it names can change between a look and an open: a FIFO opened
for reading waits for a writer that may never come (no signal ends an ``open(2)`` blocked in
another thread), a socket cannot be opened at all, a device may be anything. So a file is
opened with ``O_NONBLOCK`` (a FIFO opens at once, with no writer), its type is checked on the
descriptor (``fstat``, never on the path: what was checked is what is read), and only then is
it read, blocking again. Where the contract says a link is not followed (a cache's files,
external data already resolved), ``O_NOFOLLOW`` refuses one. A library that opens files by
path itself (onnxruntime's adapter reader) is handed ``/proc/self/fd/N``, the descriptor
checked here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

from onnxfold.errors import InputError
from onnxfold.host.limits import limit_error

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _kind(mode: int) -> str:
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike, what: str = "file", *, dir_fd: int | None = None,
                 follow: bool = True, shown: str | None = None,
                 error: type[InputError] = InputError, doing: str = "cannot open") -> int:
    """A blocking read-only descriptor of ``path`` (in ``dir_fd``), which must be a regular
    file; never waits to open it. ``follow=False``: a symbolic link is refused, not followed.
    ``error`` (an InputError, naming ``shown``, else the path, and ``what`` it is: "no such
    adapter file") says why not; a limit of the process (no descriptor left) is a
    ``ResourceLimitError`` saying what was being ``doing``."""
    label = shown or os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as e:
        raise (limit_error(e, f"{label}: {doing}") or error(f"{label}: {why(e, what, follow)}")
               ) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{label}: not a regular file ({_kind(mode)}: never read)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def why(e: OSError, what: str = "file", follow: bool = True) -> str:
    """Why ``e`` keeps a path from being opened (or looked at), in the words of a refusal."""
    if e.errno == errno.ENOENT:
        return f"no such {what}"
    if e.errno == errno.ENXIO:  # open(2) of a socket
        return "not a regular file (a socket: never read)"
    if e.errno == errno.ELOOP:
        return "a loop of symbolic links" if follow else "a symbolic link (never followed here)"
    return f"cannot open ({e.strerror})"


@contextlib.contextmanager
def opened(path: str | os.PathLike, **how: object) -> Iterator[BinaryIO]:
    """:func:`open_regular` as a binary file object for the block."""
    with os.fdopen(open_regular(path, **how), "rb") as f:  # type: ignore[arg-type]
        yield f  # type: ignore[misc]


def check_regular(path: str | os.PathLike, **how: object) -> None:
    """InputError unless ``path`` is a regular file now (for code that must hand a library a
    path: the library's own open follows; a swap in between is not seen)."""
    os.close(open_regular(path, **how))  # type: ignore[arg-type]


def by_descriptor(fd: int, path: str) -> str:
    """A path that opens the file of ``fd`` (``/proc/self/fd/N``), for a library that opens
    files by path; ``path`` itself where the system has no ``/proc/self/fd``."""
    proc = f"/proc/self/fd/{fd}"
    return proc if os.path.exists(proc) else path
