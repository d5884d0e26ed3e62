"""The CLI started with its standard descriptors closed (``2>&-``, ``>&-``, a daemon's
habits): it runs to the same exit codes, and nothing meant for stderr lands in a file it opens
(descriptor 2 would otherwise be the first file opened)."""

from __future__ import annotations

import os
import subprocess
import sys

import onnx
import pytest

MODEL = os.path.join(os.path.dirname(__file__), "..", "..", "models", "tiny_bert_ts.onnx")


def _run(args, close):
    def closing():
        for fd in close:
            os.close(fd)

    return subprocess.run([sys.executable, "-c", "from onnxfold.app.cli import entry_point; "
                           "entry_point()", *args], preexec_fn=closing, timeout=120,
                          stdout=subprocess.DEVNULL if 1 in close else subprocess.PIPE,
                          stderr=subprocess.DEVNULL if 2 in close else subprocess.PIPE)


@pytest.mark.parametrize("close", [(2,), (1, 2), (0, 1, 2)])
def test_a_fold_with_closed_streams_exits_0_and_writes_a_clean_model(tmp_path, close):
    out = tmp_path / "out.onnx"
    proc = _run(["optimize", MODEL, "-o", str(out)], close)
    assert proc.returncode == 0
    onnx.checker.check_model(onnx.load(str(out)))  # no stray bytes written into it


def test_bad_input_with_stderr_closed_still_exits_2(tmp_path):
    proc = _run(["optimize", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "o.onnx")],
                (2,))
    assert proc.returncode == 2 and not (tmp_path / "o.onnx").exists()
