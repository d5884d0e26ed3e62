"""Output paths are checked before a byte is written: nothing the user has is ever replaced.

An :class:`OutputGuard` knows a command's input files by identity (device and inode, so hard
links and symlinks of an input are recognized) and checks every output path against them and
against each other. A symlinked output is written through (its target is replaced, the link
stays); devices, FIFOs, sockets and directories are refused, never replaced; an output whose
directory does not exist is refused before the command does any work. :meth:`OutputGuard.pin`
also opens the output's directory, once (``onnxfold.io.pinned``).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable

from onnxfold.errors import OutputError
from onnxfold.io.pinned import PinnedDirectory, PinnedOutput, resolved
from onnxfold.io.tempfiles import temporary

FileId = tuple[int, int]
# what a replaceable input may be replaced by: only the model written over it (and its data);
# a report is never written over an input, even one the caller asked to replace
REPLACING = frozenset({"output model", "output model's external data"})


def file_id(path: str | os.PathLike | PinnedOutput) -> FileId | None:
    """(device, inode) of the file ``path`` leads to, or None if there is none."""
    try:
        info = path.directory.stat(path.name) if isinstance(path, PinnedOutput) else \
            os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


class OutputGuard:
    """The input files of a command, and the outputs it has claimed so far."""

    def __init__(self, inputs: Iterable[str | os.PathLike] = (),
                 replaceable: Iterable[str | os.PathLike] = ()) -> None:
        """``replaceable``: inputs the caller asked to replace (``-o`` equal to the input) by the
        model and its data (``REPLACING``): still written beside and renamed, so a failure
        leaves them intact."""
        self._inputs: dict[FileId, str] = {}
        self._claimed: dict[str, str] = {}
        self._pinned: dict[str, PinnedOutput] = {}  # claimed target -> its pinned output
        self._replaceable = {i for i in (file_id(os.fspath(p)) for p in replaceable) if i}
        self.protect(inputs)

    def protect(self, paths: Iterable[str | os.PathLike]) -> None:
        """Add input files that no output may replace (outputs claimed so far included)."""
        for path in paths:
            ident = file_id(os.fspath(path))
            if ident is not None:
                self._inputs.setdefault(ident, os.fspath(path))
        for target, what in self._claimed.items():
            self._check_existing(target, what)

    def removable(self, path: str | os.PathLike | PinnedOutput) -> bool:
        """Whether ``path`` may be deleted: not an input, or one the caller asked to replace."""
        ident = file_id(path)
        return ident is None or ident not in self._inputs or ident in self._replaceable

    def replaces_input(self, path: str | os.PathLike | PinnedOutput) -> bool:
        """Whether ``path`` is an input the caller asked to replace (writing a model over
        itself)."""
        ident = file_id(path)
        return ident is not None and ident in self._inputs and ident in self._replaceable

    def pinned(self, path: str | os.PathLike) -> PinnedOutput:
        """The output pinned for ``path`` by :meth:`pin` (a RuntimeError if it was not: a file
        written before it was claimed is a bug)."""
        output = self._pinned.get(os.path.join(*resolved(os.fspath(path))))
        if output is None:
            raise RuntimeError(f"{os.fspath(path)}: written before it was claimed")
        return output

    def close(self) -> None:
        """Close the directories of the outputs pinned here."""
        for output in self._pinned.values():
            output.directory.close()

    def claim(self, path: str | os.PathLike, what: str = "output") -> str:
        """Check ``path`` as an output; return the path to replace (a symlink's target)."""
        path = os.fspath(path)
        if not path:
            raise OutputError(f"empty {what} path")
        directory, name = resolved(path)
        target = os.path.join(directory, name)
        if not os.path.isdir(directory):
            shown = directory if os.path.islink(path) else os.path.dirname(path) or "."
            raise OutputError(f"{path}: directory {shown} does not exist")
        try:
            target.encode()
        except UnicodeEncodeError:  # undecodable bytes, kept as surrogates by Python
            raise OutputError(f"{path}: the path is not valid UTF-8 (onnxruntime cannot open "
                              "it, and a model names its data file in UTF-8)") from None
        if len(os.path.basename(target).encode()) > 255:
            raise OutputError(f"{path}: file name too long")
        self._check_existing(target, what, path)
        other = self._claimed.get(target)
        if other is not None:
            raise OutputError(f"{path}: the {what} would also be the {other}")
        self._claimed[target] = what
        return target

    def pin(self, path: str | os.PathLike | PinnedOutput, what: str = "output") -> PinnedOutput:
        """:meth:`claim` ``path`` and open its directory, once (``onnxfold.io.pinned``): every
        later check and write of this output goes through that directory. A ``PinnedOutput``
        (pinned by the caller) is checked again where its directory is."""
        if isinstance(path, PinnedOutput):
            self._check_existing(path.path, what, path.given, path)
            return path
        target = self.claim(path, what)
        output = PinnedOutput(PinnedDirectory.of(os.path.dirname(target), what),
                              os.path.basename(target), os.fspath(path))
        self._pinned[target] = output
        _writable(output)
        return output

    def _check_existing(self, target: str, what: str, shown: str | None = None,
                        pinned: PinnedOutput | None = None) -> None:
        shown = shown or target
        pinned = pinned or self._pinned.get(target)
        try:
            info = pinned.directory.stat(pinned.name) if pinned is not None else \
                os.stat(target)
        except FileNotFoundError:
            return
        except OSError as e:
            raise OutputError(f"{shown}: cannot write the {what} ({e.strerror})") from None
        if stat.S_ISDIR(info.st_mode):
            raise OutputError(f"{shown}: is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise OutputError(f"{shown}: not a regular file (a device, FIFO or socket is never "
                              "replaced)")
        writable = os.access(pinned.name, os.W_OK, dir_fd=pinned.directory.fd) \
            if pinned is not None else os.access(target, os.W_OK)
        if not writable:  # replacing it by a rename would succeed: refused as a write would be
            raise OutputError(f"{shown}: the file is read-only; not replaced (make it writable "
                              f"to let onnxfold replace the {what})")
        source = self._inputs.get((info.st_dev, info.st_ino))
        if source is not None and ((info.st_dev, info.st_ino) not in self._replaceable
                                   or what not in REPLACING):
            same = "" if os.path.abspath(source) == target else f" ({source})"
            raise OutputError(f"{shown}: refusing to overwrite an input{same} with the {what}")


def _writable(output: PinnedOutput) -> None:
    """OutputError unless a file can be made beside ``output`` now (a read-only directory, a
    full disk's inode table, ``/proc``): said before any work, not after the model it goes
    with was written (a ``--json`` that could not be written failed after the model was)."""
    fd, name = temporary(output.directory, output.name, ".probe")
    os.close(fd)
    with contextlib.suppress(OSError):
        output.directory.unlink(name)
