"""``optimize --check`` writes a model with external data once: the check reads it where it
was written (temporary names, the output's lock not held), and publishing renames the data and
the model; a failed or stopped check leaves nothing."""

from __future__ import annotations

import os
import signal

from tests.support.interrupts import leftovers, run_acted_on
from tests.support.models import transposed_weight


def test_the_data_checked_is_the_data_published(tmp_path):
    """The data file the check reads (under a temporary name, the output's lock not held) is
    the one published: renamed, not written again (the same inode)."""
    source = transposed_weight(tmp_path / "in", rows=256, cols=1024)
    out, pauses = tmp_path / "out", tmp_path / "pauses"
    out.mkdir()
    pauses.mkdir()
    seen: list[dict[str, int]] = []
    ending = run_acted_on(["optimize", source, "-o", out / "m.onnx", "--check", "1", "-q"],
                          "check-saved", lambda proc: seen.append(
                              {p.name: p.stat().st_ino for p in out.iterdir()}), pauses)
    assert ending.paused and ending.code == 0, ending.stderr
    (during,) = seen
    data = [name for name in during if ".data" in name]
    assert len(data) == 1 and data[0] != "m.onnx.data" and "m.onnx" not in during
    assert sorted(os.listdir(out)) == ["m.onnx", "m.onnx.data"]
    assert (out / "m.onnx.data").stat().st_ino == during[data[0]]


def test_a_check_stopped_after_the_write_leaves_nothing(tmp_path):
    source = transposed_weight(tmp_path / "in", rows=256, cols=1024)
    out, pauses = tmp_path / "out", tmp_path / "pauses"
    out.mkdir()
    pauses.mkdir()
    ending = run_acted_on(["optimize", source, "-o", out / "m.onnx", "--check", "1", "-q"],
                          "check-saved", lambda proc: proc.send_signal(signal.SIGTERM),
                          pauses)
    assert ending.paused and ending.code == 128 + signal.SIGTERM, ending.stderr
    assert os.listdir(out) == [] and not leftovers(out)


def test_a_bus_error_during_the_check_leaves_nothing_and_says_one_line(tmp_path):
    """An input truncated while the check reads it through a mapping (a cone fed the
    original's weights) is a bus error, which ends the run in one line, exit 2: the data
    already under its final name goes too (it stayed, 'nothing was written' said beside it)."""
    source = transposed_weight(tmp_path / "in", rows=256, cols=1024)
    out, pauses = tmp_path / "out", tmp_path / "pauses"
    out.mkdir()
    pauses.mkdir()
    ending = run_acted_on(["optimize", source, "-o", out / "m.onnx", "--check", "1", "-q"],
                          "check-saved", lambda proc: proc.send_signal(signal.SIGBUS),
                          pauses)
    assert ending.paused and ending.code == 2, ending.stderr
    assert ending.stderr.count("onnxfold: error:") == 1, ending.stderr
    assert os.listdir(out) == [] and not leftovers(out)


def test_a_check_that_could_not_run_names_the_output_not_its_temporary_file(tmp_path,
                                                                               monkeypatch):
    """Where the machine ran short running the written model, the line names the output
    (it named '/proc/self/fd/3/.m.onnx.onnxfold-5028-079023c1.tmp', a file the user never
    sees and that is gone by then)."""
    import pytest

    import onnxfold
    from onnxfold.app import checked_save
    from onnxfold.check.compare import CheckCouldNotRun
    from onnxfold.check.result import CompareResult

    source = transposed_weight(tmp_path / "in", rows=256, cols=1024)
    out = tmp_path / "out"
    out.mkdir()

    def short(original, checked, n, options, **kwargs):
        said = f"{checked}: the machine ran short running it ({checked}: out of memory)"
        result = CompareResult(model_a=str(original), model_b=checked, rows=[], inputs=[], n=n,
                               seed=0, rtol=None, atol=None)
        result.not_run = said
        raise CheckCouldNotRun(said, result)

    monkeypatch.setattr(checked_save, "compare_models", short)
    result = onnxfold.optimize(str(source))
    with pytest.raises(CheckCouldNotRun) as raised:
        checked_save.save_checked(result.model, str(source), str(out / "m.onnx"), n=1)
    said = str(raised.value)
    assert said.startswith(f"{out / 'm.onnx'}: the machine ran short") and "onnxfold-" not in said
    assert raised.value.result is not None and "onnxfold-" not in raised.value.result.not_run
    assert os.listdir(out) == []


def test_another_run_on_the_output_does_not_wait_for_the_check(tmp_path):
    """The check runs without the output's lock: a second run writing the same output while
    the first is checking ends (it would wait for the whole check), and the first publishes
    over it, its data with it, nothing else left."""
    import onnx

    from tests.support.cli import run_cli

    source = transposed_weight(tmp_path / "in", rows=256, cols=1024)
    out, pauses = tmp_path / "out", tmp_path / "pauses"
    out.mkdir()
    pauses.mkdir()
    second: list = []
    ending = run_acted_on(["optimize", source, "-o", out / "m.onnx", "--check", "1", "-q"],
                          "check-saved", lambda proc: second.append(
                              run_cli("optimize", source, "-o", out / "m.onnx", "-q",
                                      timeout=120)), pauses)
    assert ending.paused and ending.code == 0, ending.stderr
    assert second[0].returncode == 0, second[0].stderr
    names = sorted(os.listdir(out))
    assert names[0] == "m.onnx" and len(names) == 2 and names[1].endswith(".data"), names
    onnx.checker.check_model(onnx.load(str(out / "m.onnx")))  # its data beside it, whole
