"""Temporary files beside an output, renamed into place once complete (standard library only).

A temporary file is named ``.<output name>.onnxfold-<pid>-<random><suffix>``: a run that was
killed leaves one behind, and a later run writing beside it removes those whose process is
gone and that have not been written for ten minutes. An output's lock file
(``.<output name>.onnxfold-lock``, see ``onnxfold.io.publication``) that a killed run left is
removed by that later run too, when no process holds it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import IO

from onnxfold.errors import InputError, NoTempDirectoryError, OutputError

NAME_MAX = 255
STALE_AGE = 600.0  # seconds a dead run's temporary file stays untouched before it is removed
TRUNCATED = "an input file was truncated while it was being read"
_STALE = re.compile(r"^\..*\.onnxfold-(\d+)-[^.]+\..*$")
LOCK_SUFFIX = ".onnxfold-lock"


def _prefix(path: str, suffix: str) -> str:
    """The temporary name's prefix, cut so that the whole name stays under NAME_MAX."""
    room = NAME_MAX - len(suffix) - len(".onnxfold-4194304-xxxxxxxx.") - 1
    return "." + os.path.basename(path)[:max(room, 1)] + f".onnxfold-{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _temporaries(directory: str) -> Iterator[tuple[os.DirEntry, int]]:
    """The onnxfold temporary files in ``directory`` with the PID of the run that made each
    (nothing when the directory cannot be read)."""
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            match = _STALE.match(entry.name)
            if match:
                yield entry, int(match.group(1))


def remove_stale(directory: str, min_age: float = STALE_AGE) -> int:
    """Delete temporary files of onnxfold runs that no longer exist and have not been written
    for ``min_age`` seconds (a process of another PID namespace sharing the directory may be
    alive and writing); return how many."""
    removed = 0
    now = time.time()
    for entry, pid in _temporaries(directory):
        if pid == os.getpid() or _alive(pid):
            continue
        with contextlib.suppress(OSError):
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and now - info.st_mtime >= min_age:
                os.unlink(entry.path)
                removed += 1
    return removed + _remove_unheld_locks(directory)


def _remove_unheld_locks(directory: str) -> int:
    """Delete the output lock files in ``directory`` that no process holds (left by a killed
    run). Safe against a run about to take one: it checks, once it holds the lock, that the
    file is still the one at that path, and tries again otherwise."""
    locks: list[str] = []  # none where the directory cannot be listed
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        locks = [e.path for e in entries if e.name.startswith(".") and
                 e.name.endswith(LOCK_SUFFIX) and e.is_file(follow_symlinks=False)]
    return sum(remove_unheld_lock(path) for path in locks)


def remove_unheld_lock(path: str) -> bool:
    """Delete the output lock file ``path`` if no process holds it (a killed run's); whether
    it was deleted."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(path)
            return True
        finally:
            os.close(fd)
    return False


def scratch_directory(prefix: str) -> str:
    """A new private directory under the system's temporary directory (``TMPDIR``, else
    ``/tmp``, ``/var/tmp``, ``/usr/tmp``, else the current directory, as ``tempfile`` picks);
    the caller removes it. Where none of them is writable (or the chosen one is full), a
    ``NoTempDirectoryError`` (one line, exit 2) says to set ``TMPDIR``."""
    try:
        return tempfile.mkdtemp(prefix=prefix)
    except OSError as e:
        raise no_temp_directory(e) from None


def scratch_file(prefix: str, suffix: str, directory: str | None = None) -> tuple[int, str]:
    """``tempfile.mkstemp`` in ``directory`` (default: the system's temporary directory), with
    no usable directory reported as ``scratch_directory`` does."""
    try:
        return tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
    except OSError as e:
        if directory is not None:
            raise OutputError(f"{directory}: cannot create a temporary file here "
                              f"({e.strerror or e})") from None
        raise no_temp_directory(e) from None


def no_temp_directory(error: OSError) -> NoTempDirectoryError:
    """The one-line error for a temporary directory that cannot be used."""
    if isinstance(error, FileNotFoundError) and "No usable temporary directory" in str(error):
        tried = [os.environ.get("TMPDIR")] if os.environ.get("TMPDIR") else []
        where = f"TMPDIR={tried[0]}, /tmp, /var/tmp" if tried else "/tmp, /var/tmp"
        return NoTempDirectoryError(f"no usable temporary directory (tried {where} and the "
                                    "current directory); set TMPDIR to a writable directory")
    where = tempfile.gettempdir() if tempfile.tempdir else "the temporary directory"
    return NoTempDirectoryError(f"{where}: cannot create a temporary file or directory "
                                f"({error.strerror or error}); set TMPDIR to a writable "
                                "directory")


def write_failed(path: str, error: OSError) -> InputError | OutputError:
    """The error to report when writing ``path`` raised ``error``."""
    if error.errno == errno.EFAULT:  # written from a mapped page past a truncated input's end
        return InputError(f"{path}: not written: {TRUNCATED}")
    return OutputError(f"{path}: write failed ({error.strerror or error})")


def remove_own(directory: str, pid: int | None = None) -> None:
    """Delete the temporary files process ``pid`` (this one by default) left in ``directory``
    (this process's last act before it exits abnormally, or a batch's after a job died);
    errors are ignored."""
    owner = os.getpid() if pid is None else pid
    for entry, made_by in list(_temporaries(directory)):
        if made_by == owner:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def temp_beside(path: str, suffix: str = ".tmp") -> tuple[int, str]:
    """Open a new hidden temporary file in ``path``'s directory, with the umask's permissions."""
    directory = os.path.dirname(os.path.abspath(path))
    remove_stale(directory)
    try:
        fd, tmp = tempfile.mkstemp(prefix=_prefix(path, suffix), suffix=suffix, dir=directory)
    except OSError as e:
        raise OutputError(f"{path}: cannot write here ({e.strerror})") from None
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
    return fd, tmp


@contextlib.contextmanager
def replacing(path: str, suffix: str = ".tmp") -> Iterator[tuple[int, str]]:
    """A temporary file beside ``path`` that replaces it when the block ends without error, and
    is deleted otherwise: ``with replacing(p) as (fd, tmp): ...`` (the block may close ``fd``)."""
    fd, tmp = temp_beside(path, suffix)
    try:
        yield fd, tmp
        with contextlib.suppress(OSError):
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        raise write_failed(path, e) from None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
        if os.path.lexists(tmp):
            os.unlink(tmp)


def write_atomic(path: str, write: Callable[[IO[bytes]], object]) -> None:
    """Write ``path`` through ``write(file)`` into a temporary file, then rename it in place."""
    with replacing(path) as (fd, _tmp), os.fdopen(fd, "wb", closefd=False) as f:
        write(f)


def write_text(path: str, text: str) -> None:
    write_atomic(path, lambda f: f.write(text.encode()))
