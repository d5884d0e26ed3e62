"""``onnxfold.host.interruptible``: onnxruntime runs that Ctrl-C and the inference time limit
stop, in-process (the command line's signals:
``tests/adversarial/test_signals_during_inference.py``).

A run on a model whose inference never ends (``bench/stop_models.py``) must end with
``KeyboardInterrupt`` when SIGINT arrives (the Python API takes no signal over), or
``InferenceTimeout`` at the limit, and its onnxruntime run must stop (the worker thread ends)
rather than go on computing; a run nested in a worker is stopped with it; a run from another
thread is bounded by a timer; the fold's fallback declines a batch that ran too long.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import onnxruntime as ort
import pytest

import onnxfold
from bench import stop_models
from onnxfold.host import interruptible


@pytest.fixture(scope="module")
def endless(tmp_path_factory):
    """An onnxruntime session of the endless model, and its feeds."""
    path = stop_models.endless(tmp_path_factory.mktemp("endless") / "endless.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session, {"x": np.zeros(stop_models.WIDTH, np.float32)}


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "onnxfold-inference"]


def _ended(seconds: float = 60.0) -> bool:
    """Whether every inference worker has ended within ``seconds`` (CPU-bound work ends as
    soon as onnxruntime reads its terminate flag: this only waits for the thread's exit)."""
    end = time.monotonic() + seconds
    while _workers() and time.monotonic() < end:
        time.sleep(0.01)
    return not _workers()


def test_ctrl_c_stops_the_run_and_its_thread(endless):
    session, feeds = endless
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        interruptible.run(lambda options: session.run(None, feeds, options))
    assert _ended()


def test_the_time_limit_stops_the_run(endless):
    session, feeds = endless
    with onnxfold.inference_time_limit(0.3), pytest.raises(onnxfold.InferenceTimeout,
                                                           match=r"longer than 0\.3 s"):
        interruptible.run(lambda options: session.run(None, feeds, options), what="endless")
    assert _ended()
    assert interruptible.limit() == interruptible.DEFAULT_LIMIT  # the block's only


def test_a_run_nested_in_a_worker_is_stopped_with_it(endless):
    """A backend that runs onnxruntime itself inside the worker (the numpy backend's
    fallback): its own RunOptions are terminated with the outer run's."""
    session, feeds = endless
    seen = []

    def outer(_options):
        try:
            return interruptible.run(lambda options: session.run(None, feeds, options),
                                     timeout=None)
        except Exception as e:  # onnxruntime's "terminate flag": what the test waits for
            seen.append(e)
            raise

    with pytest.raises(onnxfold.InferenceTimeout):
        interruptible.run(outer, timeout=0.3)
    assert _ended()
    assert seen and "terminate" in str(seen[0])


def test_a_run_from_another_thread_is_bounded_by_a_timer(endless):
    session, feeds = endless
    raised: list[BaseException] = []

    def call():
        try:
            with onnxfold.inference_time_limit(0.3):
                interruptible.run(lambda options: session.run(None, feeds, options))
        except BaseException as e:  # surfaced below
            raised.append(e)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join(60)
    assert not thread.is_alive() and len(raised) == 1
    assert isinstance(raised[0], onnxfold.InferenceTimeout)


@pytest.mark.parametrize("seconds", [float("inf"), 1e10, threading.TIMEOUT_MAX])
def test_a_limit_past_what_a_timer_can_wait_is_no_limit(seconds):
    """From a thread (where a timer bounds the run): a limit past ``threading.TIMEOUT_MAX``
    raised OverflowError in the timer's thread, a traceback on stderr."""
    results: list[object] = []
    hooked: list[object] = []
    previous, threading.excepthook = threading.excepthook, hooked.append

    def call():
        with onnxfold.inference_time_limit(seconds):
            results.append(interruptible.run(lambda options: 42))

    try:
        thread = threading.Thread(target=call)
        thread.start()
        thread.join(60)
    finally:
        threading.excepthook = previous
    assert results == [42] and hooked == []


def test_results_and_errors_come_back_as_they_are():
    assert interruptible.run(lambda options: 42) == 42
    with pytest.raises(ZeroDivisionError):
        interruptible.run(lambda options: 1 / 0)


def test_compare_through_the_api_is_bounded(tmp_path):
    model = str(stop_models.endless(tmp_path / "endless.onnx"))
    with onnxfold.inference_time_limit(0.5), pytest.raises(onnxfold.InferenceTimeout):
        onnxfold.compare(model, model)
    assert _ended()


def test_a_fold_batch_past_the_time_limit_is_declined_not_an_error(tmp_path):
    """``fold_timeout=None``: no fold limit of its own, the inference time limit still
    bounds a batch; what ran too long stays unfolded, the run goes on. (4e6 steps: seconds
    of work, under the fold's bound on a Loop's node runs.)"""
    model = str(stop_models.counting_constant(tmp_path / "m.onnx", 4_000_000))
    with onnxfold.inference_time_limit(0.5):
        result = onnxfold.optimize(model, onnxfold.FoldOptions(fold_timeout=None))
    assert [n.op_type for n in result.model.graph] == ["Loop", "Add"]
    assert "exceeded the inference time limit (0.5 s)" in result.report.explain()
