"""The process's I/O threads: one small pool the writer, the read-ahead and the prefill share.

Every I/O job of a run (the second half of a large weight's write, reading the next weight
while one is written, warming the output's pages while the model folds, hinting the weights a
check reads next) runs on one of at most ``MAX_THREADS`` threads, started when a job finds
none idle and kept, idle, for the next one.

A caller that waits for its job takes it back when no thread has started it (every thread
busy, or none could start: "can't start new thread" under a thread limit) and runs it itself.
A wait is therefore never on a job queued behind others, nothing waits for a thread that never
comes, and a machine with no thread to spare runs the same work in one. A job nobody waits
for (a hint, the prefill) can be cancelled while it is queued. The threads are daemons: the
end of the process, a signal's included, waits for no hint and no prefill (the writer's own
jobs are always waited for). Standard library only: the CLI starts the prefill before numpy,
onnx and onnx-ir are imported.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from onnxfold.host.endings import deferred, uninterrupted

T = TypeVar("T")
MAX_THREADS = 3  # the writer's two (a half written, the next weight read) and one hint or fill
POLL = 0.5  # seconds a wait sleeps before it looks again (a signal's handler runs between)

_PENDING, _RUNNING, _DONE, _CANCELLED = range(4)


class Job(Generic[T]):
    """``fn(*args)`` handed to the pool (:func:`submit`)."""

    def __init__(self, fn: Callable[..., T], args: tuple) -> None:
        self._fn: Callable[..., T] | None = fn
        self._args = args
        self._state = _PENDING
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        self._runner: int | None = None  # the thread that claimed it

    def _claim(self) -> bool:
        """Whether the caller is the one to run it (it was still queued)."""
        with self._lock:
            if self._state != _PENDING:
                return False
            self._runner = threading.get_ident()  # (before the state: see exception())
            self._state = _RUNNING
            return True

    def _run(self) -> None:
        """Run it (its claimer only); what it raises, a signal's KeyboardInterrupt included, is
        its outcome. It ends marked done whatever lands in its bookkeeping."""
        try:
            fn, args = self._fn, self._args
            assert fn is not None  # cleared only once it ran, or instead of running
            self._value = fn(*args)
        except BaseException as e:  # handed to whoever waits for it, as it is
            self._error = e
        finally:
            with deferred():  # (a signal here is raised once the job is marked done)
                self._end(_DONE)

    def _end(self, state: int) -> None:
        """Mark it ended (``_DONE`` or ``_CANCELLED``), letting go of what it held."""
        self._fn, self._args = None, ()
        self._state = state
        self._finished.set()

    def cancel(self) -> bool:
        """Drop the job if no thread has started it: whether it will never run."""
        with self._lock:
            if self._state == _PENDING:
                self._end(_CANCELLED)
            return self._state == _CANCELLED

    def done(self) -> bool:
        """Whether it ended (ran, failed or was cancelled): nothing of it runs any more."""
        return self._finished.is_set()

    def exception(self) -> BaseException | None:
        """Run it here if still queued, else wait until it ended; what it raised (a signal
        that came while it ran here included), or None, never raised here. Raises
        KeyboardInterrupt only for a signal that comes while it waits for a thread."""
        try:
            if self._claim():
                self._run()
        finally:  # a signal that came as it was claimed here: the job ends with it
            if self._runner == threading.get_ident() and not self._finished.is_set():
                self._run_cut()
        while not self._finished.wait(POLL):
            pass
        return self._error

    def _run_cut(self) -> None:
        """End a job its claimer did not run through (a signal landed as it claimed it): done,
        with the interrupt as its outcome."""
        with deferred():
            self._error = self._error or KeyboardInterrupt()
            self._end(_DONE)

    def joined(self) -> T:
        """Its value once it ended (run here if still queued), a signal that comes meanwhile
        raised after it; what it raised is raised here."""
        error = uninterrupted(self.exception)
        if error is not None:
            raise error
        return self._value  # type: ignore[return-value]


class _Pool:
    """Jobs on at most ``MAX_THREADS`` threads. Each job queued has one reason a thread will
    take it: an idle thread it reserved, a thread started for it, or a place in the backlog
    that a thread finishing a job takes on (so two jobs queued at once never both count on
    the one idle thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._threads = 0
        self._idle = 0  # threads waiting for a job no queued job has reserved
        self._backlog = 0  # queued jobs no thread is reserved or started for

    def submit(self, job: Job) -> None:
        self._queue.put(job)
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
                return
            if self._threads >= MAX_THREADS:
                self._backlog += 1
                return
            self._threads += 1
        started = False
        try:
            thread = threading.Thread(target=self._work, name="onnxfold-io", daemon=True)
            thread.start()
            started = True
        except RuntimeError:  # no thread to be had: the job waits, or its waiter runs it
            pass
        finally:
            if not started:
                with self._lock:
                    self._threads -= 1
                    self._backlog += 1

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job._claim():
                job._run()
            with self._lock:
                if self._backlog > 0:
                    self._backlog -= 1  # a queued job waits for a thread: this one takes it
                else:
                    self._idle += 1

    def threads(self) -> int:
        """Threads started (busy or idle)."""
        with self._lock:
            return self._threads


_POOL = _Pool()


def submit(fn: Callable[..., T], *args: object) -> Job[T]:
    """Run ``fn(*args)`` on an I/O thread; the job, for waiting on it or cancelling it."""
    job: Job[T] = Job(fn, args)
    _POOL.submit(job)
    return job


def _after_fork() -> None:
    """A forked child has none of its parent's threads: a fresh pool."""
    global _POOL
    _POOL = _Pool()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
