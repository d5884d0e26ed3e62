"""Temporary files beside an output, renamed into place once complete (standard library only).

A temporary file is named ``.<output name>.onnxfold-<pid>-<random><suffix>`` and made in the
output's pinned directory (``onnxfold.io.pinned``): a run that was killed leaves one behind,
and a later run writing beside it removes those whose process is gone and that have not been
written for ten minutes. An output's lock file (``.<output name>.onnxfold-lock``, see
``onnxfold.io.publication``) that a killed run left is removed by that later run too, when no
process holds it.

A command-line run (``onnxfold.host.endings`` installed) also records, as it makes them, the
directories its temporary files are in and its scratch directories and files, so that however
it ends (a signal, a bus error, an error raised between a file's creation and the code that
would remove it) :func:`remove_own_files` removes what it made. The Python API records nothing:
its callers' ``finally`` blocks remove their files.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import IO

from onnxfold.errors import InputError, NoTempDirectoryError, OutputError, ResourceLimitError
from onnxfold.host import endings, limits
from onnxfold.io.pinned import PinnedDirectory, PinnedOutput, pin

NAME_MAX = 255
STALE_AGE = 600.0  # seconds a dead run's temporary file stays untouched before it is removed
TRUNCATED = "an input file was truncated while it was being read"
_STALE = re.compile(r"^\..*\.onnxfold-(\d+)-[^.]+\..*$")
LOCK_SUFFIX = ".onnxfold-lock"

# what this command-line run made, for remove_own_files (see the module docstring)
_OWN_DIRECTORIES: dict[tuple[int, int], PinnedDirectory] = {}  # holding temporary files
_OWN_TREES: set[str] = set()  # scratch directories
_OWN_FILES: set[str] = set()  # scratch files
# unpublished files under their final names (a model's data while it is checked)
_OWN_NAMES: dict[tuple[tuple[int, int], str], tuple[PinnedDirectory, str]] = {}


def _prefix(name: str, suffix: str) -> str:
    """The temporary name's prefix, cut so that the whole name stays under NAME_MAX."""
    room = NAME_MAX - len(suffix) - len(".onnxfold-4194304-xxxxxxxx.") - 1
    return "." + name[:max(room, 1)] + f".onnxfold-{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _opened(directory: PinnedDirectory | str) -> Iterator[PinnedDirectory | None]:
    """``directory`` itself, or the directory named by a path opened for the block (None when
    it cannot be opened)."""
    if isinstance(directory, PinnedDirectory):
        yield directory
        return
    try:
        opened = PinnedDirectory(directory)
    except OSError:
        yield None
        return
    with opened:
        yield opened


def _temporaries(directory: PinnedDirectory) -> Iterator[tuple[os.DirEntry, int]]:
    """The onnxfold temporary files in ``directory`` with the PID of the run that made each
    (nothing when the directory cannot be read)."""
    with contextlib.suppress(OSError):
        for entry in list(directory.entries()):
            match = _STALE.match(entry.name)
            if match:
                yield entry, int(match.group(1))


def remove_stale(directory: PinnedDirectory | str, min_age: float = STALE_AGE) -> int:
    """Delete temporary files of onnxfold runs that no longer exist and have not been written
    for ``min_age`` seconds (a process of another PID namespace sharing the directory may be
    alive and writing); return how many."""
    removed = 0
    now = time.time()
    with _opened(directory) as opened:
        if opened is None:
            return 0
        for entry, pid in _temporaries(opened):
            if pid == os.getpid() or _alive(pid):
                continue
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and now - info.st_mtime >= min_age:
                    opened.unlink(entry.name)
                    removed += 1
        return removed + _remove_unheld_locks(opened)


def _remove_unheld_locks(directory: PinnedDirectory) -> int:
    """Delete the output lock files in ``directory`` that no process holds (left by a killed
    run). Safe against a run about to take one: it checks, once it holds the lock, that the
    file is still the one at that path, and tries again otherwise."""
    locks: list[str] = []  # none where the directory cannot be listed
    with contextlib.suppress(OSError):
        locks = [e.name for e in directory.entries() if e.name.startswith(".") and
                 e.name.endswith(LOCK_SUFFIX) and e.is_file(follow_symlinks=False)]
    return sum(remove_unheld_lock(directory, name) for name in locks)


def remove_unheld_lock(directory: PinnedDirectory | str, name: str | None = None) -> bool:
    """Delete the output lock file ``name`` in ``directory`` (or the lock file ``directory``
    names, when ``name`` is None) if no process holds it (a killed run's); whether it was."""
    if name is None:
        assert isinstance(directory, str)
        directory, name = os.path.dirname(directory) or ".", os.path.basename(directory)
    with _opened(directory) as opened:
        if opened is None:
            return False
        with contextlib.suppress(OSError):
            fd = opened.open(name, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                opened.unlink(name)
                return True
            finally:
                os.close(fd)
    return False


def _own(paths: set[str], path: str) -> None:
    if endings.installed():
        paths.add(path)


def scratch_directory(prefix: str) -> str:
    """A new private directory under the system's temporary directory (``TMPDIR``, else
    ``/tmp``, ``/var/tmp``, ``/usr/tmp``, else the current directory, as ``tempfile`` picks);
    the caller removes it. Where none of them is writable (or the chosen one is full), a
    ``NoTempDirectoryError`` (one line, exit 2) says to set ``TMPDIR``."""
    try:
        with endings.deferred():
            path = tempfile.mkdtemp(prefix=prefix)
            _own(_OWN_TREES, path)
            return path
    except OSError as e:
        raise no_temp_directory(e) from None


def own_tree(path: str) -> None:
    """Record ``path``, a directory made elsewhere, as this run's scratch (removed with it)."""
    _own(_OWN_TREES, path)


def scratch_file(prefix: str, suffix: str, directory: str | None = None) -> tuple[int, str]:
    """``tempfile.mkstemp`` in ``directory`` (default: the system's temporary directory), with
    no usable directory reported as ``scratch_directory`` does."""
    try:
        with endings.deferred():
            fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
            _own(_OWN_FILES, path)
            return fd, path
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


def write_failed(path: str, error: OSError) -> InputError | OutputError | ResourceLimitError:
    """The error to report when writing ``path`` raised ``error`` (a limit of the process, no
    descriptor left, is named as one: the machine's, not the output's)."""
    if error.errno == errno.EFAULT:  # written from a mapped page past a truncated input's end
        return InputError(f"{path}: not written: {TRUNCATED}")
    limit = limits.describe(error)
    if limit is not None:
        return ResourceLimitError(f"{path}: not written: {limit}")
    return OutputError(f"{path}: write failed ({error.strerror or error})")


def remove_own(directory: PinnedDirectory | str, pid: int | None = None) -> None:
    """Delete the temporary files process ``pid`` (this one by default) left in ``directory``
    (this process's last act before it exits abnormally, or a batch's after a job died);
    errors are ignored."""
    owner = os.getpid() if pid is None else pid
    with _opened(directory) as opened:
        if opened is None:
            return
        for entry, made_by in list(_temporaries(opened)):
            if made_by == owner:
                with contextlib.suppress(OSError):
                    opened.unlink(entry.name)


def remove_own_files() -> None:
    """Delete what this run made and still has: its temporary files in every directory it
    wrote one into, its scratch directories and files (a command-line run's last act when it
    ends otherwise than done; errors are ignored)."""
    for directory in list(_OWN_DIRECTORIES.values()):
        remove_own(directory)
    for tree in list(_OWN_TREES):
        shutil.rmtree(tree, ignore_errors=True)
    for path in list(_OWN_FILES):
        with contextlib.suppress(OSError):
            os.unlink(path)
    for directory, name in list(_OWN_NAMES.values()):
        with contextlib.suppress(OSError):
            directory.unlink(name)


_PUBLISHED: list[str] = []  # the outputs this process published, as the user named them


def note_published(shown: str) -> None:
    """``shown`` (an output as the user named it) is published: an error after this says so
    instead of "nothing was written"."""
    _PUBLISHED.append(shown)


def published() -> list[str]:
    """The outputs this process published so far, as the user named them."""
    return list(_PUBLISHED)


def own_name(directory: PinnedDirectory, name: str) -> None:
    """Record ``name`` in ``directory``, a file this run made under its final name that no
    published file names yet (a model's data, renamed before the model is checked), as its
    own until :func:`disown_name`: a run that ends otherwise than done removes it too."""
    if endings.installed():
        _OWN_NAMES[(directory.identity(), name)] = (directory.duplicate(), name)


def disown_name(directory: PinnedDirectory, name: str) -> None:
    """``name`` is published (or gone): no longer this run's to remove."""
    with contextlib.suppress(OSError):
        entry = _OWN_NAMES.pop((directory.identity(), name), None)
        if entry is not None:
            entry[0].close()


def _record_directory(directory: PinnedDirectory) -> None:
    """Keep (a descriptor of) ``directory``, where this run makes temporary files."""
    if not endings.installed():
        return
    identity = directory.identity()
    if identity not in _OWN_DIRECTORIES:
        _OWN_DIRECTORIES[identity] = directory.duplicate()


def temporary(directory: PinnedDirectory, name: str, suffix: str = ".tmp") -> tuple[int, str]:
    """Open a new hidden temporary file for the output ``name`` in ``directory``, with the
    umask's permissions: its descriptor and name. Stale files of dead runs go first."""
    remove_stale(directory)
    umask = os.umask(0)
    os.umask(umask)
    prefix = _prefix(name, suffix)
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
    with endings.deferred():  # made and recorded together
        _record_directory(directory)
        while True:
            candidate = f"{prefix}{secrets.token_hex(4)}{suffix}"
            try:
                fd = directory.open(candidate, flags, 0o666 & ~umask)
            except FileExistsError:
                continue
            except OSError as e:
                limit = limits.describe(e)  # a process limit, not the directory's fault
                if limit is not None:
                    raise ResourceLimitError(f"{directory.shown(name)}: {limit}") from None
                raise OutputError(f"{directory.shown(name)}: cannot write here ({e.strerror})"
                                  ) from None
            os.fchmod(fd, 0o666 & ~umask)
            return fd, candidate


@contextlib.contextmanager
def replacing(path: str | PinnedOutput, suffix: str = ".tmp") -> Iterator[tuple[int, str]]:
    """A temporary file beside ``path`` that replaces it when the block ends without error,
    and is deleted otherwise: ``with replacing(p) as (fd, tmp): ...`` (the block may close
    ``fd``; ``tmp`` is the temporary file's name in the output's directory)."""
    target = path if isinstance(path, PinnedOutput) else pin(path)
    try:
        fd, tmp = temporary(target.directory, target.name, suffix)
        try:
            yield fd, tmp
            with contextlib.suppress(OSError):
                os.close(fd)
            with endings.deferred():
                endings.check()  # nothing is published once a signal came
                target.directory.replace(tmp, target.name)
        except OSError as e:
            raise write_failed(target.given, e) from None
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                target.directory.unlink(tmp)
    finally:
        if target is not path:
            target.directory.close()


def write_atomic(path: str | PinnedOutput, write: Callable[[IO[bytes]], object]) -> None:
    """Write ``path`` through ``write(file)`` into a temporary file, then rename it in place."""
    with replacing(path) as (fd, _tmp), os.fdopen(fd, "wb", closefd=False) as f:
        write(f)


def write_text(path: str | PinnedOutput, text: str) -> None:
    write_atomic(path, lambda f: f.write(text.encode()))
