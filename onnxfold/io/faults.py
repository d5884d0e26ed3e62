"""A bus error as a one-line error: an input file truncated under its memory mapping.

Weights are read through memory mappings (onnx-ir's external tensors, the pool's spill files);
when another process truncates a mapped file, the next read of a page past its new end raises
SIGBUS, which Python cannot turn into an exception: the process would die with no message and
leave its temporary output behind. ``bus_error_exits`` installs, for the CLI only (a library
does not take over signals), a handler that prints one line, removes this process's temporary
files and output locks beside the outputs and exits with the bad-input status. It runs in the
faulting thread, so it does only that: write, unlink, ``_exit``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
from collections.abc import Iterable, Iterator

from onnxfold.io.publication import release_locks
from onnxfold.io.tempfiles import TRUNCATED, remove_own, remove_own_files

MESSAGE = f"onnxfold: error: {TRUNCATED} (bus error); nothing was written\n".encode()
_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int)


@contextlib.contextmanager
def bus_error_exits(directories: Iterable[str], status: int) -> Iterator[None]:
    """While the block runs, SIGBUS prints one line, removes this process's temporary files in
    ``directories`` and exits with ``status``."""
    places = tuple(directories)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        install = libc.signal
    except (OSError, AttributeError):  # no C library to ask (not a POSIX system)
        yield
        return

    first = threading.Lock()  # two threads may fault at once: one line, one cleanup

    def on_bus_error(signum: int) -> None:
        if not first.acquire(blocking=False):
            first.acquire()  # the first handler exits the process
        os.write(2, MESSAGE)
        # nothing may stop this handler before it exits (an exception would end the callback
        # and send the thread back to the faulting read): not even a pending signal's
        with contextlib.suppress(BaseException):
            for directory in places:
                remove_own(directory)
            remove_own_files()  # in the directories pinned since, and scratch files
        with contextlib.suppress(BaseException):
            release_locks()  # the output's lock: no other run waits for a dead one
        os._exit(status)

    handler = _HANDLER(on_bus_error)  # referenced until the old handler is back
    install.restype = ctypes.c_void_p
    install.argtypes = [ctypes.c_int, ctypes.c_void_p]
    previous = install(signal.SIGBUS, ctypes.cast(handler, ctypes.c_void_p))
    try:
        yield
    finally:
        install(signal.SIGBUS, previous)
