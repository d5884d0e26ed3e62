"""The optimized model's session built beside the original's (``check/running/aside.py``):
where both fit, the check hands the one built aside to its runs, and nothing it says changes
(the same rows, bits, fold and rewrite verdicts as one session after the other); a model
onnxruntime cannot load fails alike; where both do not fit, or the memory left is unknown,
nothing is built aside; a signal ends the wait for a build. Both models' sessions are let go
before the original's cones run (fold verification, rewrite validation)."""

from __future__ import annotations

import gc
import signal
import threading
import weakref

import numpy as np
import onnx
import pytest

from onnxfold.check import compare as compare_module
from onnxfold.check.running import aside as aside_module
from onnxfold.check.running import memory
from onnxfold.check.running import runner as runner_module
from onnxfold.check.running.options import CompareOptions
from onnxfold.check.running.runner import MachineShort, session_parts
from onnxfold.pipeline.optimizer import optimize
from tests.support.checked_folds import checked_fold, said, transposed_layer_norm


def _check(tmp_path, monkeypatch, both_fit: bool, output: onnx.ModelProto | None = None):
    """compare_models of the model and its fold (or ``output``), both sessions fitting at
    once or not; the result and how many sessions were built aside."""
    built = []

    real = aside_module.started

    def counted(parts, label):  # the real build, counted
        built.append(label)
        return real(parts, label)

    monkeypatch.setattr(memory, "both_sessions_fit", lambda a, b: both_fit)
    monkeypatch.setattr("onnxfold.check.compare.started_aside", counted)
    compared = checked_fold(tmp_path, _model(), CompareOptions(dims={"n": 4}), output)
    return compared, len(built)


def _model() -> onnx.ModelProto:
    return transposed_layer_norm(32, 48, seed=1)


def test_a_session_built_aside_changes_nothing_the_check_says(tmp_path, monkeypatch):
    for name in ("1", "2"):
        (tmp_path / name).mkdir()
    aside, built = _check(tmp_path / "1", monkeypatch, True)
    alone, none = _check(tmp_path / "2", monkeypatch, False)
    assert (built, none) == (1, 0)
    assert aside.ok and said(aside) == said(alone)
    assert aside.rewrites is not None and aside.rewrites.rewrites  # rewrites were validated


def test_an_output_onnxruntime_cannot_load_fails_alike_built_aside(tmp_path, monkeypatch):
    broken = _model()
    broken.graph.node[1].op_type = "MatMulNoSuchOp"
    said = []
    for both_fit in (True, False):
        work = tmp_path / str(both_fit)
        work.mkdir()
        result, built = _check(work, monkeypatch, both_fit, output=broken)
        assert built == int(both_fit)
        said.append(result.failure.replace(str(work), "WORK"))
    assert said[0] == said[1] and "onnxruntime cannot load it" in said[0]


def test_nothing_is_built_aside_where_the_memory_left_is_unknown_or_too_small(monkeypatch):
    weighed = memory.weighed(optimize(_model()).model)
    need = 2 * memory.session_bytes(*weighed)
    for left, fits in ((None, False), (need, False), (need * memory.BOTH_SESSIONS_SHARE, True)):
        monkeypatch.setattr(memory, "room", lambda left=left: left)
        assert memory.both_sessions_fit(weighed, weighed) is fits


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no interval timers here")
def test_a_signal_ends_the_wait_for_a_build(monkeypatch):
    release = threading.Event()

    def slow_build(parts, label):  # a build that ends only when told
        release.wait(60)
        raise RuntimeError("never handed over")

    monkeypatch.setattr(aside_module, "built_session", slow_build)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        building = aside_module.started(session_parts(_model()), "model B")
        assert building is not None
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(KeyboardInterrupt):
            building.wait()
        assert not building._done.is_set()  # it ended the wait, not the build's end
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        release.set()


def test_where_no_thread_can_start_the_sessions_open_one_after_the_other(tmp_path,
                                                                          monkeypatch):
    """A limit on threads is the machine's: no session is built aside, the check runs as
    without (it was a raw RuntimeError, exit 3, from ``Thread.start``)."""
    def refused():
        raise RuntimeError("can't start new thread")

    real_init = aside_module.SessionAside.__init__

    def init(self, *args, **kwargs):  # the build's thread alone cannot start
        real_init(self, *args, **kwargs)
        self.thread.start = refused

    monkeypatch.setattr(aside_module.SessionAside, "__init__", init)
    assert aside_module.started(session_parts(_model()), "model B") is None
    compared, tried = _check(tmp_path, monkeypatch, True)
    assert tried == 1 and compared.ok, compared.summary()


@pytest.mark.parametrize("both_fit", [True, False])
def test_no_models_session_is_alive_while_the_cones_run(tmp_path, monkeypatch, both_fit):
    """B's runs come right after A's, and its session goes before the cones run: with the
    session built aside alive through the fold verification and the rewrite validation,
    BERT-base's check peaked 1,002 MiB, and 806 MiB without (``farm-bench -n 7``)."""
    sessions: list[weakref.ref] = []
    real_new = runner_module.new_session

    def recorded(source, options):
        session = real_new(source, options)
        sessions.append(weakref.ref(session))
        return session

    alive_at: dict[str, int] = {}

    def counting(step, real):
        def wrapped(*args, **kwargs):
            gc.collect()
            alive_at[step] = sum(ref() is not None for ref in sessions)
            return real(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(runner_module, "new_session", recorded)
    for step in ("verify_folds", "_validated"):
        monkeypatch.setattr(compare_module, step,
                            counting(step, getattr(compare_module, step)))
    compared, built = _check(tmp_path, monkeypatch, both_fit)
    assert compared.ok and built == int(both_fit)
    assert compared.rewrites is not None and compared.rewrites.rewrites
    assert len(sessions) >= 2  # (A's and B's at least)
    assert alive_at == {"verify_folds": 0, "_validated": 0}


def test_what_a_failed_build_aside_held_is_collected_before_the_cones(tmp_path, monkeypatch):
    """A build aside that failed (the machine ran short) keeps its frames in a cycle (the
    error's traceback holds the build's frame, which holds the SessionAside): the check's
    graphs are set aside from its collections before that build starts, so once B is opened
    otherwise the cycle is collected, not held through the cones."""
    held: list[weakref.ref] = []

    def failing_build(parts, label):
        big = np.ones(16 << 20, np.uint8)  # what a failed build's frames hold
        held.append(weakref.ref(big))
        raise MachineShort(f"{label}: loading it: out of memory (simulated)")

    alive: list[bool] = []
    real_verify = compare_module.verify_folds

    def verify(*args, **kwargs):
        gc.collect()
        alive.append(held[-1]() is not None)
        return real_verify(*args, **kwargs)

    monkeypatch.setattr(aside_module, "built_session", failing_build)
    monkeypatch.setattr(compare_module, "verify_folds", verify)
    compared, built = _check(tmp_path, monkeypatch, True)
    assert built == 1 and compared.ok, compared.summary()
    assert alive == [False]


@pytest.mark.parametrize("fails", [False, True])
def test_the_originals_copies_go_before_b_opens_unless_b_was_built_aside(tmp_path, monkeypatch,
                                                                        fails):
    """What the check copied of the original's weights (a proto's) is kept for the cones
    where B's session was built beside A's (both fit: nothing more is held), and let go
    before B's session opens otherwise, as where the build aside failed."""
    events: list[str] = []
    real_release, real_ran = compare_module.release_weights, compare_module._ran_optimized

    def release(model):
        events.append("release")
        return real_release(model)

    def ran(b, run, reference):
        events.append("B")
        return real_ran(b, run, reference)

    def failing_build(parts, label):
        raise MachineShort(f"{label}: loading it: out of memory (simulated)")

    if fails:
        monkeypatch.setattr(aside_module, "built_session", failing_build)
    monkeypatch.setattr(compare_module, "release_weights", release)
    monkeypatch.setattr(compare_module, "_ran_optimized", ran)
    compared, built = _check(tmp_path, monkeypatch, True)
    assert built == 1 and compared.ok, compared.summary()
    assert events[:2] == (["release", "B"] if fails else ["B", "release"]), events
