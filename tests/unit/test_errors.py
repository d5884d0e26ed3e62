"""The error contract: one line per failure, exit 2 for bad input, 3 for a bug, no leftovers."""

from __future__ import annotations

import os

import pytest

from onnxfold import cli
from onnxfold.io.tempfiles import remove_stale, temp_beside

TINY_BERT = os.path.join(os.path.dirname(__file__), "..", "..", "models", "tiny_bert_ts.onnx")


def test_an_internal_error_is_one_line_and_exit_3(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("something\nthat spans lines")

    monkeypatch.setattr("onnxfold.pipeline.optimize", broken)
    out = tmp_path / "out.onnx"
    assert cli.main(["optimize", TINY_BERT, "-o", str(out)]) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("onnxfold: internal error: RuntimeError: "), err
    assert "--debug" in err[0]
    assert os.listdir(tmp_path) == []


def test_debug_prints_the_traceback(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("onnxfold.pipeline.optimize", lambda *a, **k: 1 / 0)
    code = cli.main(["optimize", TINY_BERT, "-o", str(tmp_path / "o.onnx"), "--debug"])
    assert code == cli.EXIT_INTERNAL
    assert "Traceback" in capsys.readouterr().err


def test_a_killed_runs_temporary_files_are_removed_by_the_next(tmp_path):
    dead = 4194303  # above the default pid_max: no such process
    stale = tmp_path / f".out.onnx.onnxfold-{dead}-abcd1234.tmp"
    stale.write_bytes(b"half")
    fd, mine = temp_beside(str(tmp_path / "out.onnx"))
    os.close(fd)
    assert not stale.exists() and os.path.exists(mine)
    assert remove_stale(str(tmp_path)) == 0  # ours belongs to a live process


@pytest.mark.parametrize("length", [10, 240])
def test_temporary_names_stay_under_the_file_name_limit(tmp_path, length):
    fd, tmp = temp_beside(str(tmp_path / ("m" * length + ".onnx")), suffix=".check.onnx")
    os.close(fd)
    assert len(os.path.basename(tmp)) <= 255
