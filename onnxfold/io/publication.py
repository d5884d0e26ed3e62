"""Publishing a model with its external data in one step, one writer per output at a time.

A ``.onnx`` file names its data file, so replacing both by two renames would leave, after a
kill between them, the old model reading the new data (or the reverse). Instead, the new data
goes under a name no file has yet (:func:`fresh_data_path`), the model that names it is
renamed over the old model last (that one rename publishes the pair), and the old data is
removed only then (:func:`superseded_data`). A kill at any point leaves the old pair or the new
pair; an unpublished data file it leaves is a temporary file (removed by the rule of
``onnxfold.io.tempfiles``) or, killed between the two renames, a data variant that no model
names, removed by the next write of that output.

:func:`output_lock` serializes the writers of one output (an advisory ``flock`` on a lock file
beside it, removed on release) so that a second run neither picks the same names nor removes
the data the first is publishing.

``ONNXFOLD_TEST_KILL_AT`` (test-only): the name of a publication step (``STEPS``) at which the
process kills itself with SIGKILL, so that tests can check what a kill there leaves;
``ONNXFOLD_TEST_HANG_AT``: a step at which it sleeps (holding the output's lock) until killed
from outside, as a batch's ``--job-timeout`` does.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import signal
import time
from collections.abc import Iterator

from onnxfold.errors import OutputError
from onnxfold.io.tempfiles import LOCK_SUFFIX

KILL_AT_ENV = "ONNXFOLD_TEST_KILL_AT"
HANG_AT_ENV = "ONNXFOLD_TEST_HANG_AT"
STEPS = ("data-rename", "model-rename", "old-data-removal")
HELD_LOCKS: set[str] = set()  # lock files this process holds (a fatal-signal handler removes them)


def kill_point(step: str) -> None:
    """SIGKILL this process if the test-only ``ONNXFOLD_TEST_KILL_AT`` names ``step``; sleep
    until killed if ``ONNXFOLD_TEST_HANG_AT`` does."""
    if os.environ.get(KILL_AT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(HANG_AT_ENV) == step:
        while True:
            time.sleep(3600)


def lock_path(target: str) -> str:
    """The lock file of the output ``target`` (hidden, beside it)."""
    return os.path.join(os.path.dirname(target), "." + os.path.basename(target)[:200]
                        + LOCK_SUFFIX)


@contextlib.contextmanager
def output_lock(target: str) -> Iterator[None]:
    """Hold the exclusive lock of the output ``target`` for the block (waiting for another
    run that holds it). The lock file is removed on release; a waiter that then holds the lock
    of a removed file tries again, so two runs never both hold it."""
    path = lock_path(target)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise OutputError(f"{target}: cannot lock the output ({e.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            current = os.stat(path)
        except OSError:
            os.close(fd)
            continue  # removed by the holder as we were waiting: lock the new one
        mine = os.fstat(fd)
        if (mine.st_dev, mine.st_ino) == (current.st_dev, current.st_ino):
            break
        os.close(fd)
    HELD_LOCKS.add(path)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        HELD_LOCKS.discard(path)
        os.close(fd)


def _variant_pattern(requested: str) -> re.Pattern[str]:
    stem, ext = os.path.splitext(os.path.basename(requested))
    return re.compile(rf"^{re.escape(stem)}\.[0-9a-f]{{8}}{re.escape(ext)}$")


def fresh_data_path(requested: str) -> str:
    """``requested`` if no file has that name, else ``<stem>.<8 hex digits><ext>`` beside it
    that no file has (``m.onnx.data`` -> ``m.onnx.3f9a0c12.data``)."""
    if not os.path.lexists(requested):
        return requested
    stem, ext = os.path.splitext(requested)
    while True:
        candidate = f"{stem}.{secrets.token_hex(4)}{ext}"
        if not os.path.lexists(candidate):
            return candidate


def superseded_data(requested: str, published: str) -> list[str]:
    """The data files an earlier write of the same output may have left beside ``requested``
    (that name, or one of its variants) other than the ``published`` one."""
    directory = os.path.dirname(requested) or "."
    pattern = _variant_pattern(requested)
    found = []
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        found = [entry.path for entry in entries if entry.name != os.path.basename(published)
                 and (entry.name == os.path.basename(requested) or pattern.match(entry.name))]
    return sorted(found)
