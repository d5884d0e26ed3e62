"""An output's directory, resolved and opened once: every file of the output is made, renamed
and removed through that one descriptor (standard library only).

A path names a directory only until someone renames it or swaps a symlink on the way to it. An
output's temporary files, its lock, the renames that publish it and the removal of what it
supersedes all go through the descriptor of its directory, opened when the output is claimed
(``os`` calls with ``dir_fd``: ``openat``, ``renameat``, ``unlinkat``), so a swap after that
point changes nothing: the output lands in the directory resolved at the start, and its
temporary files are removed from there. A file handed to onnxruntime or onnx by path (a
written model loaded to verify it) is named through the descriptor too
(``/proc/self/fd/N/NAME`` on Linux).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from onnxfold.errors import OutputError

_PROC_FD = "/proc/self/fd"
_BY_DESCRIPTOR = os.path.isdir(_PROC_FD)


class PinnedDirectory:
    """A directory opened once; ``path`` is how it was named when opened (for messages)."""

    def __init__(self, path: str, fd: int | None = None) -> None:
        """Open ``path`` (or take over ``fd``, a descriptor of it)."""
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if fd is None \
            else fd

    def duplicate(self) -> PinnedDirectory:
        """The same directory on a descriptor of its own (closed independently)."""
        return PinnedDirectory(self.path, os.dup(self.fd))

    @classmethod
    def of(cls, path: str, what: str = "output") -> PinnedDirectory:
        """Open ``path``; an OutputError (one line) when it is no directory one can open."""
        try:
            return cls(path)
        except FileNotFoundError:
            raise OutputError(f"{path}: the {what} directory does not exist") from None
        except OSError as e:
            raise OutputError(f"{path}: cannot open the {what} directory ({e.strerror})"
                              ) from None

    def open(self, name: str, flags: int, mode: int = 0o666) -> int:
        """``open(2)`` of ``name`` in this directory, never through a symlink."""
        return os.open(name, flags | os.O_CLOEXEC | os.O_NOFOLLOW, mode, dir_fd=self.fd)

    def replace(self, source: str, target: str) -> None:
        """Rename ``source`` to ``target``, both in this directory (one atomic step). What
        appeared at ``target`` since it was claimed is replaced only if it is a file or a link
        (the link itself, never its target): a FIFO, socket, device or directory that
        appeared is an OutputError, as one there when the output was claimed."""
        try:
            mode = os.stat(target, dir_fd=self.fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode) and not stat.S_ISLNK(mode):
            raise OutputError(f"{self.shown(target)}: became a directory, device, FIFO or "
                              "socket while onnxfold ran; never replaced")
        os.replace(source, target, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def carry_mode(self, old: str, new: str) -> None:
        """Give ``new`` the permission bits of ``old`` (and its owner and group where this
        process may): a model replaced keeps them, as one written through would (a private
        model stays private; ``writer``'s publication). Where ``old`` is gone, or the file
        system refuses, ``new`` keeps its own."""
        try:
            info = os.stat(old, dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            return
        if not stat.S_ISREG(info.st_mode):
            return
        with contextlib.suppress(OSError):
            os.chown(new, info.st_uid, info.st_gid, dir_fd=self.fd, follow_symlinks=False)
        with contextlib.suppress(OSError):
            os.chmod(new, stat.S_IMODE(info.st_mode) & 0o777, dir_fd=self.fd)

    def unlink(self, name: str) -> None:
        os.unlink(name, dir_fd=self.fd)

    def link(self, source: str, target: str) -> None:
        """A second name ``target`` for the file ``source`` (``link(2)``, never through a
        symlink); FileExistsError where ``target`` exists."""
        os.link(source, target, src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)

    def stat(self, name: str, follow_symlinks: bool = True) -> os.stat_result:
        return os.stat(name, dir_fd=self.fd, follow_symlinks=follow_symlinks)

    def exists(self, name: str) -> bool:
        """Whether an entry (a symlink too) has that name."""
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def entries(self) -> Iterator[os.DirEntry]:
        """The directory's entries (each ``entry.name`` is relative to it)."""
        with os.scandir(self.fd) as found:
            yield from found

    def identity(self) -> tuple[int, int]:
        info = os.fstat(self.fd)
        return info.st_dev, info.st_ino

    def path_of(self, name: str) -> str:
        """A path that reaches ``name`` through the descriptor, for code that opens files by
        path (onnxruntime, onnx); the joined path where the system has no ``/proc/self/fd``."""
        if _BY_DESCRIPTOR:
            return f"{_PROC_FD}/{self.fd}/{name}"
        return os.path.join(self.path, name)

    def shown(self, name: str) -> str:
        """``name`` as the user knows it (in messages)."""
        return os.path.join(self.path, name)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PinnedDirectory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, eq=False)
class PinnedOutput:
    """An output file: its name in a pinned directory, and the path the user gave."""

    directory: PinnedDirectory
    name: str
    given: str

    def sibling(self, name: str, given: str | None = None) -> PinnedOutput:
        """Another file of the same directory (an output's data file, its temporary twin)."""
        return PinnedOutput(self.directory, name, given or self.directory.shown(name))

    @property
    def path(self) -> str:
        """The file as the directory was named when it was pinned."""
        return self.directory.shown(self.name)


def resolved(path: str) -> tuple[str, str]:
    """The directory and file name ``path`` writes to: through a symlink to its target (the
    link stays, the target is replaced or, for a link to nothing yet, made), else where the
    path itself says. A loop of links is an OutputError."""
    if not os.path.islink(path):
        target = os.path.abspath(path)
    else:
        target = os.path.realpath(path)
        if os.path.islink(target):
            raise OutputError(f"{path}: a loop of symbolic links; never written through")
    return os.path.dirname(target), os.path.basename(target)


def pin(path: str | os.PathLike, what: str = "output") -> PinnedOutput:
    """Resolve ``path`` (see :func:`resolved`) and open its directory, once."""
    given = os.fspath(path)
    directory, name = resolved(given)
    return PinnedOutput(PinnedDirectory.of(directory, what), name, given)
