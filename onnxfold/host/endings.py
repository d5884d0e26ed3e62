"""How a command-line run ends when a signal asks it to (standard library only).

SIGINT (Ctrl-C), SIGTERM (what ``timeout``, a CI runner, ``docker stop`` and Kubernetes send)
and SIGHUP (the terminal went away) end a run the same way: :func:`install`, the command
line's first act, makes each of them raise :class:`Interrupted` (a ``KeyboardInterrupt``
carrying the signal) in the main thread, so that the run unwinds through the code that removes
its temporary files and releases its locks, and the command line then prints one line,
``onnxfold: interrupted``, and exits with ``128 + N``. Only the first signal raises: one that
follows while the run unwinds is noted, not raised, so that it cannot cut that cleanup short
(a second Ctrl-C, or a batch passing SIGTERM to its jobs). A signal the process started with
ignored (``nohup``, a background job of a shell without job control) stays ignored.

:func:`deferred` marks the steps that must not be cut in two: a file created and recorded as
the run's own, the renames that publish a model and its data, a job started and recorded. A
signal arriving inside is raised when the outermost such section ends. :func:`check` raises it
again before anything is published, should some library have swallowed the exception.

A library does not take over signals: without :func:`install` (the Python API) nothing here
changes how Python handles them: Ctrl-C raises ``KeyboardInterrupt`` wherever it lands, and
the sections are plain blocks.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
T = TypeVar("T")
LINE = "onnxfold: interrupted"


class Interrupted(KeyboardInterrupt):
    """A signal (SIGINT, SIGTERM or SIGHUP) ended the run."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _State(threading.local):
    depth = 0  # deferred sections this thread is in (the handler reads the main thread's)


_installed = False
_received: int | None = None  # the first signal
_raised = False  # whether Interrupted was raised for it
_sections = _State()


def install() -> None:
    """Raise :class:`Interrupted` for SIGINT, SIGTERM and SIGHUP from now on (those not
    ignored); from the main thread only, once."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    for signum in SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _on_signal)
    _installed = True


def installed() -> bool:
    """Whether :func:`install` took the signals over (the command line, not the Python API)."""
    return _installed


def _on_signal(signum: int, frame: object) -> None:
    global _received, _raised
    if _received is None:
        _received = signum
    if _raised or _sections.depth:
        return
    _raised = True
    raise Interrupted(_received)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A section no signal interrupts: one arriving inside is raised as it ends (unless the
    section ends with an exception of its own)."""
    _sections.depth += 1
    try:
        yield
    finally:
        _sections.depth -= 1
    if _sections.depth == 0:
        _raise_pending()


def _raise_pending() -> None:
    global _raised
    if _received is not None and not _raised and \
            threading.current_thread() is threading.main_thread():
        _raised = True
        raise Interrupted(_received)


def received() -> int | None:
    """The first signal that arrived, if one did (raised or not)."""
    return _received


def check() -> None:
    """Raise :class:`Interrupted` if a signal has arrived, even one already raised (some code
    may have swallowed it): called before a run publishes anything."""
    if _received is not None and threading.current_thread() is threading.main_thread():
        raise Interrupted(_received)


def uninterrupted(wait: Callable[[], T]) -> T:
    """``wait()`` (a thread's join, a worker's result) seen through to its end even when a
    signal or Ctrl-C interrupts it, which is raised afterwards: the run must not go on (or
    close a file) while another thread still writes."""
    interruption: KeyboardInterrupt | None = None
    while True:
        try:
            result = wait()
            break
        except KeyboardInterrupt as e:
            interruption = interruption or e
    if interruption is not None:
        raise interruption
    return result


def announce() -> None:
    """Print the one line an interrupted run ends with (nothing where stderr is gone: a
    terminal that hung up, a closed descriptor)."""
    with contextlib.suppress(OSError, ValueError):
        print(LINE, file=sys.stderr, flush=True)


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """``128 + N`` for signal N (130 for a plain ``KeyboardInterrupt``: SIGINT's)."""
    return 128 + getattr(interrupt, "signum", _received or signal.SIGINT)
