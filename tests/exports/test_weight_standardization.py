"""Issue 67's module, as torch exports it: two weight-standardized convolutions (BiT's
StdConv2d), the weight standardized by a training-mode ``F.batch_norm`` over its rows
(TorchScript, opset 17, ``do_constant_folding=False``, dynamic batch: the export matrix's
``stdconv_batch_norm_torchscript``).

``optimize --check 3`` ended "check failed: y outside tolerance" on it: its outputs near zero
are sums whose terms cancel, and a standardized weight rounded otherwise moves them by more than
``1e-4`` of themselves (by 5e-7 of the output's scale). Now both ``optimize --check 3`` and
``compare`` pass (exit 0), saying how many elements only the magnitude of their summed terms
let through; the other forms (dynamo's, and the mean and variance written out) are in the export
matrix (``tests/exports/test_check_matrix.py``).
"""

from __future__ import annotations

import pytest

import onnxfold

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")
pytest.importorskip("transformers",
                    reason="the exports tier needs transformers (pip install .[exports])")
pytest.importorskip("onnxscript",
                    reason="the exports tier needs onnxscript (pip install .[exports])")

from tests.support import export_matrix
from tests.support.cli import run_cli

pytestmark = pytest.mark.slow


def test_the_issues_module_passes_the_check_and_compare(tmp_path):
    source, out = export_matrix.build("stdconv_batch_norm_torchscript"), tmp_path / "f.onnx"
    checked = run_cli("optimize", source, "-o", out, "--check", "3", timeout=600)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "outside tolerance" not in checked.stdout
    compared = run_cli("compare", source, out, "-n", "3", timeout=600)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "0 differ" in compared.stdout and "y outside tolerance" not in compared.stdout


def test_window_by_window_the_issues_module_passes_by_the_magnitudes(tmp_path):
    """Run in stages (each stage's weights at their own alignment), its outputs near
    zero differ beyond rtol/atol from the original's (29 of 98,304 elements): the original
    and its twins run stage by stage as well, and the magnitudes pass them."""
    source, out = export_matrix.build("stdconv_batch_norm_torchscript"), tmp_path / "f.onnx"
    onnxfold.optimize(str(source)).save(str(out))
    check = onnxfold.compare(str(source), str(out), n=2, window_bytes=4096)
    assert check.ok and check.windows, check.summary()
    assert "could not be computed" not in check.summary(), check.summary()
