"""A Session holds no lock while a set is folded: its lock guards bookkeeping only.

The fold of a new set ran under the Session's lock, so a thread asking what the Session
keeps (``folded_keys``), closing it, or running another adapter's set already kept waited for
the whole fold, with no bound of its own. Here the backend's run (real onnxruntime) is held
at its start until the test lets it go: meanwhile the other threads are answered, and a
second thread needing the same set waits for that fold instead of folding again.
"""

from __future__ import annotations

import threading

import numpy as np

from onnxfold.runtime.session import Session
from tests.support import low_rank_models as lr

BOUND = 60.0  # seconds: what a thread blocked for ever would exceed (never reached otherwise)


def _held_backend(session: Session) -> tuple[threading.Event, threading.Event]:
    """Hold the session's backend at the start of each fold until ``release`` is set;
    ``entered`` is set when a fold starts."""
    entered, release = threading.Event(), threading.Event()
    run = session.backend.run

    def held(feeds):
        entered.set()
        assert release.wait(BOUND)
        return run(feeds)

    session.backend.run = held  # type: ignore[method-assign]
    return entered, release


def _in_thread(fn, results: dict, key: str) -> threading.Thread:
    def body():
        try:
            results[key] = fn()
        except BaseException as e:  # reported by the test
            results[key] = e
    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def test_a_fold_in_progress_blocks_no_other_thread_and_is_not_done_twice():
    case = lr.scale_after()
    first, second = lr.adapter(case, 1), lr.adapter(case, 2)
    dynamic = {n: a for n, a in case.feeds.items() if n not in case.runtime}
    reference = Session(case.model, case.runtime)
    want = reference.run(None, {**dynamic, **first})[0]

    session = Session(case.model, case.runtime)
    session.run(None, {**dynamic, **second})  # a kept set, folded before the hold
    entered, release = _held_backend(session)
    results: dict = {}
    folding = _in_thread(lambda: session.run(None, {**dynamic, **first})[0], results, "a")
    assert entered.wait(BOUND)
    waiting = _in_thread(lambda: session.run(None, {**dynamic, **first})[0], results, "b")

    asking = _in_thread(lambda: session.folded_keys, results, "keys")
    asking.join(BOUND)
    assert not asking.is_alive(), "folded_keys waited for another thread's fold"
    assert len(results["keys"]) == 1  # the kept set; the one in the making is not kept yet
    kept = _in_thread(lambda: session.run(None, {**dynamic, **second})[0], results, "kept")
    kept.join(BOUND)
    assert not kept.is_alive(), "a kept set's run waited for another set's fold"

    release.set()
    for thread in (folding, waiting):
        thread.join(BOUND)
        assert not thread.is_alive()
    for key in ("a", "b"):
        assert not isinstance(results[key], BaseException), results[key]
        np.testing.assert_array_equal(results[key], want)
    assert session.folds == 2  # the second and the first: the waiting thread did not fold
    session.close()
    reference.close()


def test_a_failed_fold_lets_the_waiting_thread_fold_for_itself():
    """The maker's failure ends the others' wait: each then folds (and here fails) itself."""
    case = lr.scale_after()
    dynamic = {n: a for n, a in case.feeds.items() if n not in case.runtime}
    session = Session(case.model, case.runtime)
    entered, release = _held_backend(session)
    failing = session.backend.run

    def broken(feeds):
        failing(feeds)
        raise RuntimeError("the backend failed")

    session.backend.run = broken  # type: ignore[method-assign]
    results: dict = {}
    feeds = {**dynamic, **lr.adapter(case, 1)}
    one = _in_thread(lambda: session.run(None, feeds), results, "one")
    assert entered.wait(BOUND)
    two = _in_thread(lambda: session.run(None, feeds), results, "two")
    release.set()
    for thread in (one, two):
        thread.join(BOUND)
        assert not thread.is_alive()
    assert all(isinstance(results[k], Exception) and "the backend failed" in str(results[k])
               for k in ("one", "two")), results
    session.close()
