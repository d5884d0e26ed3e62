"""Publishing a model with its external data in one step, one writer per output at a time.

A ``.onnx`` file names its data file, so replacing both by two renames would leave, after a
kill between them, the old model reading the new data (or the reverse). Instead, the new data
goes under a name no file has yet (:func:`fresh_data_name`), the model that names it is
renamed over the old model last (that one rename publishes the pair), and the old data is
removed only then (:func:`superseded_data`). A kill at any point leaves the old pair or the
new pair; an unpublished data file it leaves is a temporary file (removed by the rule of
``onnxfold.io.tempfiles``) or, killed between the two renames, a data variant that no model
names, removed by the next write of that output. Where the fresh name is not the one asked
for (the output's own data was in the way), the published data then gets that name as a second
link, the model written again naming it replaces the first, and the fresh name goes
(``writer._Files.take_requested_name``): a kill in between leaves the new pair with its data
under both names (``trust`` accepts that pair), the variant removed by the next write. A
signal (``onnxfold.host.endings``) never lands between those steps: each group is one
deferred section.

:func:`output_lock` serializes the writers of one output (an advisory ``flock`` on a lock file
beside it, removed on release) so that a second run neither picks the same names nor removes
the data the first is publishing. Every file here is named in the output's pinned directory
(``onnxfold.io.pinned``).

``ONNXFOLD_TEST_KILL_AT`` (test-only): the name of a publication step (``STEPS``) at which the
process kills itself with SIGKILL, so that tests can check what a kill there leaves;
``ONNXFOLD_TEST_HANG_AT``: a step at which it sleeps (holding the output's lock) until killed
from outside, as a batch's ``--job-timeout`` does (``onnxfold.host.points``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
from collections.abc import Iterator

from onnxfold.errors import OutputError
from onnxfold.host import endings
from onnxfold.host.points import HANG_AT_ENV, KILL_AT_ENV, reached
from onnxfold.io.pinned import PinnedDirectory, PinnedOutput
from onnxfold.io.tempfiles import LOCK_SUFFIX, remove_unheld_lock

STEPS = ("data-rename", "model-rename", "old-data-removal", "data-second-name", "variant-removal")
# the lock files this process holds or is taking, with their descriptors (None until open):
# a fatal-signal handler and the end of an interrupted run release and remove them
HELD_LOCKS: dict[tuple[PinnedDirectory, str], int | None] = {}

__all__ = ["HANG_AT_ENV", "HELD_LOCKS", "KILL_AT_ENV", "STEPS", "fresh_data_name",
           "kill_point", "lock_name", "lock_path", "output_lock", "release_locks",
           "requested_of", "superseded_data", "variant_pattern"]


def kill_point(step: str) -> None:
    """SIGKILL this process if the test-only ``ONNXFOLD_TEST_KILL_AT`` names ``step``; sleep
    until killed if ``ONNXFOLD_TEST_HANG_AT`` does (``onnxfold.host.points``)."""
    reached(step)


def lock_name(name: str) -> str:
    """The name of the lock file of the output ``name`` (hidden, beside it)."""
    return "." + name[:200] + LOCK_SUFFIX


def lock_path(target: str) -> str:
    """The lock file of the output ``target`` (a path)."""
    return os.path.join(os.path.dirname(target), lock_name(os.path.basename(target)))


@contextlib.contextmanager
def output_lock(output: PinnedOutput) -> Iterator[None]:
    """Hold the exclusive lock of ``output`` for the block (waiting for another run that holds
    it). The lock file is removed on release; a waiter that then holds the lock of a removed
    file tries again, so two runs never both hold it."""
    directory, name = output.directory, lock_name(output.name)
    key = (directory, name)
    while True:
        with endings.deferred():  # the lock file is made and recorded together
            HELD_LOCKS[key] = None
            try:
                fd = directory.open(name, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as e:
                del HELD_LOCKS[key]
                raise OutputError(f"{output.given}: cannot lock the output ({e.strerror})"
                                  ) from None
            HELD_LOCKS[key] = fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits for another run (a signal ends the wait)
            current = directory.stat(name, follow_symlinks=False)
        except OSError:
            _let_go(key)
            continue  # removed by the holder as we were waiting: lock the new one
        except BaseException:
            _let_go(key)
            raise
        mine = os.fstat(fd)
        if (mine.st_dev, mine.st_ino) == (current.st_dev, current.st_ino):
            break
        _let_go(key)
    try:
        yield
    finally:
        with endings.deferred():
            with contextlib.suppress(OSError):
                directory.unlink(name)
            HELD_LOCKS.pop(key, None)
            os.close(fd)


def _let_go(key: tuple[PinnedDirectory, str]) -> None:
    """Close the lock ``key`` this process opened (and maybe holds), and remove its file if
    no other process holds it."""
    with endings.deferred():
        fd = HELD_LOCKS.pop(key, None)
        if fd is not None:
            os.close(fd)
        remove_unheld_lock(*key)


def release_locks() -> None:
    """Release and remove every output lock this process holds or is taking (the end of an
    interrupted run: no other run should wait for it)."""
    for key in list(HELD_LOCKS):
        _let_go(key)


# a variant's mark: a name no exporter or user gives (``m.20240101.onnx_data`` is the data of
# ``m.20240101.onnx``, never a variant of ``m.onnx_data`` to remove)
VARIANT_MARK = "onnxfold-"


def variant_pattern(requested: str) -> re.Pattern[str]:
    """The names :func:`fresh_data_name` gives in place of ``requested``
    (``m.onnx.onnxfold-3f9a0c12.data`` for ``m.onnx.data``)."""
    stem, ext = os.path.splitext(requested)
    return re.compile(rf"^{re.escape(stem)}\.{VARIANT_MARK}[0-9a-f]{{8}}{re.escape(ext)}$")


def requested_of(variant: str) -> str | None:
    """The name ``variant`` stands in for (``m.onnx.data`` for
    ``m.onnx.onnxfold-3f9a0c12.data``), None where it is no variant."""
    stem, ext = os.path.splitext(variant)
    found = re.fullmatch(rf"(.*)\.{VARIANT_MARK}[0-9a-f]{{8}}", stem)
    return found.group(1) + ext if found else None


def fresh_data_name(directory: PinnedDirectory, requested: str) -> str:
    """``requested`` if no file in ``directory`` has that name, else
    ``<stem>.onnxfold-<8 hex digits><ext>`` that none has (``m.onnx.data`` ->
    ``m.onnx.onnxfold-3f9a0c12.data``)."""
    if not directory.exists(requested):
        return requested
    stem, ext = os.path.splitext(requested)
    while True:
        candidate = f"{stem}.{VARIANT_MARK}{secrets.token_hex(4)}{ext}"
        if not directory.exists(candidate):
            return candidate


def superseded_data(directory: PinnedDirectory, requested: str, published: str) -> list[str]:
    """The data files an earlier write of the same output may have left in ``directory``
    (named ``requested``, or one of its variants) other than the ``published`` one."""
    pattern = variant_pattern(requested)
    found = []
    with contextlib.suppress(OSError):
        found = [entry.name for entry in directory.entries() if entry.name != published
                 and (entry.name == requested or pattern.match(entry.name))]
    return sorted(found)
