"""``--pool-budget`` holds for a contrib op whose output onnxruntime cannot size before it runs.

``com.microsoft::CDist`` of two 16,000 x 8 constants makes a 1 GB matrix from 1 MB of inputs,
and onnxruntime declares its output with no dims. It runs under an address-space bound of the
budget (``onnxfold.host.address_space``): the allocation fails inside onnxruntime, the node is
declined for its size and the run's peak RSS stays near the budget. The child's address space
is capped too, so a regression fails the test instead of taking the machine's memory.
"""

from __future__ import annotations

import resource

import onnx

from bench.builders import cdist_model
from tests.support.measured_child import run_measured

MiB = 1 << 20
BUDGET = 256 * MiB
BASELINE = 200 * MiB  # Python, numpy, onnx, onnx-ir and onnxruntime, before any fold
ALLOWANCE = 64 * MiB  # onnxfold.host.address_space.RUN_ALLOWANCE


def _cdist_model(path: str, rows: int) -> None:
    """The benchmarks' CDist model (``bench.builders.cdist_model``) of ``rows`` rows at ``path``."""
    onnx.save(cdist_model(rows), path)


def _optimize(model: str, out: str, *flags: str) -> tuple[int, str, int]:
    """(exit code, stdout and stderr, peak RSS in bytes) of ``onnxfold optimize``."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    done, peak = run_measured(["optimize", model, "-o", out, *flags], cap)
    return done.returncode, done.stdout + done.stderr, peak


def test_a_gigabyte_contrib_result_is_declined_under_a_256m_pool_budget(tmp_path):
    model, out = str(tmp_path / "cdist.onnx"), str(tmp_path / "out.onnx")
    _cdist_model(model, 16_000)
    code, text, peak = _optimize(model, out, "--pool-budget", "256M")
    assert code == 0, text
    assert "CDist" in [n.op_type for n in onnx.load(out).graph.node]
    assert "size" in text, text
    assert peak < BASELINE + BUDGET + ALLOWANCE, f"peak RSS {peak / MiB:.0f} MiB\n{text}"


def test_a_contrib_result_within_the_budget_folds_in_the_cli(tmp_path):
    model, out = str(tmp_path / "cdist.onnx"), str(tmp_path / "out.onnx")
    _cdist_model(model, 2_000)  # 16 MB
    code, text, _ = _optimize(model, out, "--pool-budget", "256M")
    assert code == 0, text
    assert [n.op_type for n in onnx.load(out).graph.node] == ["Add"], text


def test_the_check_re_derives_a_contrib_fold_of_unknown_size_and_ends(tmp_path):
    """The check re-derives the CDist fold through its own runner, under its own bound, while
    the main thread waits for it: it hung (the caller's bound held a lock the worker's bound
    of the unsized output asked for). It ends, and the fold is verified bitwise."""
    from tests.support.cli import assert_ok, run_cli

    model, out = str(tmp_path / "cdist.onnx"), str(tmp_path / "out.onnx")
    _cdist_model(model, 2_000)
    done = run_cli("optimize", model, "-o", out, "--check", "1", "--inference-timeout", "60",
                   timeout=240)
    assert_ok(done)
    assert "1 bitwise" in done.stdout and "every folded tensor verified" in done.stdout, \
        done.stdout
