"""SIGINT, SIGTERM and SIGHUP stop every onnxruntime inference onnxfold runs, and the time
limit bounds it: one line, ``128 + N``, nothing left behind.

Before, a signal waited for onnxruntime to return (the handler runs only between Python
bytecodes): on a model whose inference does not end, ``--check``, ``compare``, ``--latency``
and a Session's fold were stopped by SIGKILL alone, leaving the check's temporary model
behind. Each case below starts the command line on a model whose inference never ends
(``bench/stop_models.py``: a Loop of 1e15 steps), waits until it is inside that inference,
and signals it. It must exit ``128 + N`` with exactly ``onnxfold: interrupted``, leave no
temporary or lock file and nothing in ``TMPDIR``, and stop computing at once: the CPU time it
spends after the signal (``wait4``, which a loaded machine does not stretch as it stretches
wall time) is bounded, where an inference still running would spend a second per second.
``python -m bench run signals`` measures the wall time from the signal to the exit.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from bench import stop_models
from tests.support.cli import assert_one_error_line, run_cli
from tests.support.interrupts import (
    SIGNALS,
    Stopped,
    assert_interrupted,
    leftovers,
    run_signalled_in_inference,
)

AFTER_SIGNAL_CPU = 1.0  # seconds: unwinding and removing files, not computing


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, list[str]]:
    """Each command on its never-ending model, by the name of what it runs (its output,
    when it has one, is ``OUT``)."""
    d = tmp_path_factory.mktemp("endless")
    endless = str(stop_models.endless(d / "endless.onnx"))
    pair = stop_models.endless_to_verify(d)
    fold, runtime = stop_models.endless_runtime_fold(d / "endless_fold.onnx", d / "feeds.npz")
    return {
        "check": ["optimize", endless, "-o", "OUT", "--check", "1"],
        "compare": ["compare", endless, endless],
        "verify-folds": ["verify-folds", str(pair.original), str(pair.folded)],
        "latency": ["optimize", endless, "-o", "OUT", "--latency", "2"],
        "session": ["run", str(fold), "--runtime-const", runtime, "--inputs",
                    str(d / "feeds.npz")],
    }


def _stopped(args: list[str], signum: int, tmp_path: Path) -> tuple[Stopped, Path, Path]:
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    scratch.mkdir()
    args = [str(out / "o.onnx") if a == "OUT" else a for a in args]
    stopped = run_signalled_in_inference(args, signum, tmp_path, {"TMPDIR": str(scratch)})
    return stopped, out, scratch


def _assert_nothing_left(out: Path, scratch: Path, published: bool) -> None:
    assert leftovers(out) == []
    assert sorted(os.listdir(out)) == (["o.onnx"] if published else [])
    assert [p for p in os.listdir(scratch) if p != ".ses"] == []  # .ses: onnxruntime's


@pytest.mark.parametrize("signum", list(SIGNALS.values()), ids=list(SIGNALS))
@pytest.mark.parametrize("what", ["check", "compare", "verify-folds", "latency", "session"])
def test_a_signal_stops_an_inference_that_never_ends(models, tmp_path, what, signum):
    stopped, out, scratch = _stopped(models[what], signum, tmp_path)
    assert_interrupted(stopped.ending, signum)
    assert stopped.cpu_after < AFTER_SIGNAL_CPU, stopped
    # --latency times the written model before it is published: nothing is (issue 55)
    _assert_nothing_left(out, scratch, published=False)


def test_a_signal_during_one_long_kernel_ends_the_run_without_waiting_for_it(tmp_path):
    """onnxruntime stops no kernel halfway: the run goes on without it (its thread dies with
    the process), after at most ``interruptible.GRACE`` seconds of the kernel's work."""
    model = str(stop_models.long_kernel(tmp_path / "conv.onnx"))
    stopped, out, scratch = _stopped(["compare", model, model], signal.SIGTERM, tmp_path)
    assert_interrupted(stopped.ending, signal.SIGTERM)
    threads = os.cpu_count() or 1  # onnxruntime's intra-op threads share the kernel
    assert stopped.cpu_after < AFTER_SIGNAL_CPU + 0.5 * threads, stopped
    _assert_nothing_left(out, scratch, published=False)


@pytest.mark.parametrize("what", ["check", "compare", "latency", "session"])
def test_the_inference_time_limit_ends_a_run_in_one_line(models, tmp_path, what):
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    scratch.mkdir()
    args = [str(out / "o.onnx") if a == "OUT" else a for a in models[what]]
    done = run_cli(*args, "--inference-timeout", "0.5", env={**os.environ,
                                                             "TMPDIR": str(scratch)})
    assert_one_error_line(done, "onnxruntime ran longer than 0.5 s",
                          "--inference-timeout SECONDS sets the limit")
    _assert_nothing_left(out, scratch, published=False)  # latency's too (issue 55)


def test_verify_folds_says_which_folds_the_time_limit_left_unverified(models, tmp_path):
    done = run_cli(*models["verify-folds"], "--inference-timeout", "0.5")
    assert done.returncode == 0, done.stderr
    assert "not verifiable (1): onnxruntime cannot compute it from the original: exceeded " \
        "the inference time limit (0.5 s)" in done.stdout
