"""``python -m tools.check_matrix``: the fold verification counts and the error line it reads
from ``optimize --check``'s output, and its refusal of an unknown export."""

from __future__ import annotations

import pytest

from tools import check_matrix

LINE = ("fold verification: 26 folded tensors re-derived from the original in onnxruntime: "
        "15 bitwise, 2 within 3 ulps (not bitwise ops), 11 not verifiable, 0 differ")


def test_the_verification_counts():
    stdout = f"wrote x.onnx\n{LINE}\n  not verifiable (11): made by a rewrite\n"
    line, counts = check_matrix.verification_counts(stdout)
    assert line == LINE
    assert counts == {"bitwise": 15, "within": 2, "not verifiable": 11, "differ": 0}


def test_no_verification_line_counts_nothing():
    assert check_matrix.verification_counts("nodes 3 -> 2\n") == (
        "", {"bitwise": 0, "within": 0, "not verifiable": 0, "differ": 0})


def test_the_error_line_is_stderr_last():
    assert check_matrix.error_line("out", "warning\nonnxfold: error: it failed\n\n") == \
        "onnxfold: error: it failed"
    assert check_matrix.error_line("a\nlogits outside tolerance\nb", "") == \
        "logits outside tolerance"


def test_a_differing_fold_or_a_missed_plant_is_bad():
    ok = check_matrix.Row("m", "dynamo", code=0, folds={"differ": 0})
    assert not ok.bad
    assert check_matrix.Row("m", "dynamo", code=0, folds={"differ": 1}).bad
    assert check_matrix.Row("m", "dynamo", code=0, mutations={"ulps": "MISSED (exit 0)"}).bad
    not_run = {"ulps": "not run (compare exit 2)"}
    assert not check_matrix.Row("m", "dynamo", code=2, known=True, mutations=not_run).bad
    assert check_matrix.Row("m", "dynamo", code=0, mutations=not_run).bad
    assert check_matrix.Row("m", "dynamo", code=None).bad  # the export failed


def test_an_unknown_export_is_refused(capsys):
    pytest.importorskip("torch", reason="the export matrix needs torch")
    pytest.importorskip("transformers", reason="the export matrix needs transformers")
    assert check_matrix.main(["--only", "no_such_export"]) == 2
    assert "not in the matrix: no_such_export" in capsys.readouterr().err
