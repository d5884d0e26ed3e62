"""onnxruntime inferences that a signal stops within a second, and that a time limit bounds.

While onnxruntime runs, the main thread is inside native code: Python runs no signal handler
until it returns, so Ctrl-C, SIGTERM and SIGHUP (``onnxfold.host.endings``) waited for the end
of the inference, and an inference that does not end (a ``Loop`` of 1e15 steps) was stopped by
SIGKILL alone, its temporary files left behind. :func:`run` calls onnxruntime in a worker
thread while the calling thread waits, where a signal's handler runs at once: the exception it
raises (``KeyboardInterrupt``, ``endings.Interrupted``) sets the run's
``RunOptions.terminate``, which onnxruntime reads between kernels; the caller waits at most
:data:`GRACE` seconds more for the worker and then goes on with the exception, unwinding
through the code that removes its files. A single kernel still running then (onnxruntime
stops no kernel halfway: a Conv of 1e12 operations) is left to finish in the background, its
result dropped: the command line exits right away, through the Python API the thread ends
with its kernel.

Each inference is also bounded in time: after :func:`limit` seconds (``DEFAULT_LIMIT``, or
what :func:`inference_time_limit` sets for the calling context; the command line's
``--inference-timeout``) it is terminated the same way and :class:`InferenceTimeout` raised,
or, with ``finish_after_timeout`` (the fold's batches, which decline what ran too long),
awaited to its end first, as long again as the limit at most. No wait here is unbounded, and
none holds a lock: a signal ends every one of them.

Runs nested in a worker (a backend that folds with onnxfold's own fallback) run in that
thread, their ``RunOptions`` registered with the worker, so that stopping the outer run stops
them too. A call from a thread other than the main one (no signal reaches it) runs in place,
bounded by a timer. Standard library only: ``onnxruntime`` is imported where a run needs
``RunOptions`` made for it.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from onnxfold.errors import OnnxfoldError
from onnxfold.host.points import reached

T = TypeVar("T")

DEFAULT_LIMIT = 600.0  # seconds one inference may take (--inference-timeout)
GRACE = 0.5  # seconds a stopped inference is awaited before the caller goes on without it
_POLL = 0.25  # longest uninterrupted wait (a handler runs as soon as the wait is interrupted)

_limit: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "onnxfold_inference_limit", default=DEFAULT_LIMIT)


class _Default:
    """The default of :func:`run`'s ``timeout``: the context's :func:`limit`."""


CONTEXT_LIMIT = _Default()


class InferenceTimeout(OnnxfoldError):
    """An onnxruntime inference ran longer than the inference time limit and was stopped
    (``seconds``: the limit)."""

    def __init__(self, what: str, seconds: float | None) -> None:
        super().__init__(f"{what}: onnxruntime ran longer than {seconds or 0:g} s and was "
                         "stopped (the inference time limit)")
        self.seconds = seconds


@contextlib.contextmanager
def inference_time_limit(seconds: float | None) -> Iterator[None]:
    """Bound every inference of the block (in this thread or context) to ``seconds``
    (None: no bound)."""
    if seconds is not None and not seconds > 0:
        raise ValueError(f"an inference time limit must be positive, not {seconds}")
    token = _limit.set(seconds)
    try:
        yield
    finally:
        _limit.reset(token)


def limit() -> float | None:
    """The time limit of an inference started now, in seconds (None: none)."""
    return _limit.get()


class _Scope:
    """The ``RunOptions`` of the runs in one worker thread: stopped together."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._options: list[Any] = []
        self.stopped = False

    def add(self, run_options: Any) -> None:
        with self._lock:
            self._options.append(run_options)
            if self.stopped:
                run_options.terminate = True

    def remove(self, run_options: Any) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._options.remove(run_options)

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            for options in self._options:
                options.terminate = True


class _Worker(threading.local):
    scope: _Scope | None = None


_worker = _Worker()


class _Outcome:
    """What a worker's call returned or raised."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


def _new_options() -> Any:
    import onnxruntime as ort

    options = ort.RunOptions()
    options.log_severity_level = 4  # a stopped run is said by onnxfold, in one line
    return options


def run(call: Callable[[Any], T], run_options: Any = None, *, what: str = "an inference",
        timeout: float | _Default | None = CONTEXT_LIMIT,
        finish_after_timeout: bool = False,
        around: Callable[[], contextlib.AbstractContextManager] | None = None) -> T:
    """``call(run_options)`` (an onnxruntime run with those ``RunOptions``; new ones when
    None), stopped by a signal (see the module doc) or after ``timeout`` seconds (default:
    :func:`limit`; None: never): :class:`InferenceTimeout` naming ``what``, once the run has
    ended with ``finish_after_timeout``, else after at most :data:`GRACE` seconds more.
    ``around()``: a context entered by the calling thread for as long as it waits for the
    run (after the worker thread exists: ``address_space.bounded``, whose bound then holds no
    longer than the caller waits)."""
    options = _new_options() if run_options is None else run_options
    seconds = limit() if isinstance(timeout, _Default) else timeout
    enter = around or contextlib.nullcontext
    outer = _worker.scope
    if outer is not None or threading.current_thread() is not threading.main_thread():
        with enter():
            return _in_place(call, options, seconds, what, outer)
    outcome, scope = _Outcome(), _Scope()
    scope.add(options)
    context = contextvars.copy_context()

    def work() -> None:
        _worker.scope = scope
        try:
            outcome.value = context.run(call, options)
        except BaseException as e:  # handed to the caller
            outcome.error = e
        finally:
            outcome.done.set()

    go = threading.Event()

    def started() -> None:
        go.wait()
        work()

    reached("inference")
    worker = threading.Thread(target=started, name="onnxfold-inference", daemon=True)
    try:
        worker.start()
    except RuntimeError:  # no thread can be started (a pids or thread limit): run it here
        with enter():
            return _in_place(call, options, seconds, what, None)
    try:
        with enter():
            go.set()
            _await(outcome, scope, seconds, what, finish_after_timeout)
    finally:
        go.set()  # a worker never let go would wait forever
    if outcome.error is not None:
        raise outcome.error
    return outcome.value


def _await(outcome: _Outcome, scope: _Scope, seconds: float | None, what: str,
           finish_after_timeout: bool) -> None:
    """Wait for the worker: stop it on a signal (raised again) or at the deadline."""
    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        while not outcome.done.is_set():
            left = _POLL if deadline is None else min(_POLL, deadline - time.monotonic())
            if left <= 0:
                break
            outcome.done.wait(left)
    except KeyboardInterrupt:  # a signal (endings.Interrupted) or Ctrl-C through the API
        scope.stop()
        _wait_uninterrupted(outcome.done, GRACE)
        raise
    if outcome.done.is_set():
        return
    scope.stop()
    try:
        # stopped between kernels: awaited GRACE, or with finish_after_timeout as long again
        # as it ran (a kernel that outlasts that is left to end in the background)
        end = time.monotonic() + (max(seconds or 0.0, GRACE) if finish_after_timeout else GRACE)
        while not outcome.done.is_set() and (left := end - time.monotonic()) > 0:
            outcome.done.wait(min(left, _POLL))
    except KeyboardInterrupt:
        _wait_uninterrupted(outcome.done, GRACE)
        raise
    raise _timed_out(what, seconds)


def _wait_uninterrupted(done: threading.Event, seconds: float) -> None:
    """Wait up to ``seconds`` for ``done``; a further signal is not let cut the wait short
    (nor raised: the first one is on its way)."""
    end = time.monotonic() + seconds
    while not done.is_set() and (left := end - time.monotonic()) > 0:
        with contextlib.suppress(KeyboardInterrupt):
            done.wait(left)


class _Deadline:
    """A timer that terminates a run in place after ``seconds`` and remembers that it did."""

    def __init__(self, options: Any, seconds: float) -> None:
        self.options, self.fired = options, False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        self.options.terminate = True

    def cancel(self) -> None:
        self._timer.cancel()


def _in_place(call: Callable[[Any], T], options: Any, seconds: float | None, what: str,
              scope: _Scope | None) -> T:
    """Run ``call`` in this thread: stopped with the worker it runs in (``scope``), and by a
    timer after ``seconds`` (:class:`InferenceTimeout` then, whether onnxruntime stopped
    between kernels or had just ended)."""
    # past threading.TIMEOUT_MAX (~292 years) a timer overflows: such a limit is none
    deadline = None if seconds is None or seconds >= threading.TIMEOUT_MAX else \
        _Deadline(options, seconds)
    if scope is not None:
        scope.add(options)
    try:
        result = call(options)
    except Exception:
        if deadline is not None and deadline.fired:
            raise _timed_out(what, seconds) from None
        raise
    finally:
        if deadline is not None:
            deadline.cancel()
        if scope is not None:
            scope.remove(options)
    if deadline is not None and deadline.fired:
        raise _timed_out(what, seconds)
    return result


def _timed_out(what: str, seconds: float | None) -> InferenceTimeout:
    return InferenceTimeout(what, seconds)
