"""``python -m tools.check_matrix``: the fold verification counts and the error line it reads
from ``optimize --check``'s output, and its refusal of an unknown export."""

from __future__ import annotations

import pytest

from tools import check_matrix

LINE = ("fold verification: 26 folded tensors re-derived from the original in onnxruntime: "
        "15 bitwise, 2 within 3 ulps (not bitwise ops), 11 not verifiable, 0 differ")


NONE = {"bitwise": 0, "within": 0, "sampled": 0, "not verifiable": 0, "differ": 0,
        "parameter": 0}


def test_the_verification_counts():
    stdout = f"wrote x.onnx\n{LINE}\n  not verifiable (11): made by a rewrite\n"
    line, counts = check_matrix.verification_counts(stdout)
    assert line == LINE
    assert counts == {**NONE, "bitwise": 15, "within": 2, "not verifiable": 11}


def test_every_state_of_the_line_is_counted():
    """The line as onnxfold's fold verification writes it, every state in it: sampled
    tensors, parameters of rewrites and the sub-counts in parentheses."""
    from onnxfold.check.folds.verdicts import (
        BITWISE,
        DIFFERS,
        PARAMETER,
        PROVED,
        SAMPLED,
        UNVERIFIABLE,
        WITHIN,
        FoldVerification,
    )
    from onnxfold.check.judging.verdicts import Verdict
    states = [BITWISE] * 7 + [WITHIN] * 2 + [SAMPLED] * 3 + [UNVERIFIABLE] * 4 + \
        [DIFFERS] * 1 + [PARAMETER] * 5
    tensors = [Verdict(f"t{k}", s, dtype="float", shape=[2], max_ulps=1.0,
                       dims=PROVED if k < 2 else "") for k, s in enumerate(states)]
    result = FoldVerification("a.onnx", "b.onnx", tensors, bindings=[{}, {}])
    line, counts = check_matrix.verification_counts(result.summary())
    assert counts == {"bitwise": 7, "within": 2, "sampled": 3, "not verifiable": 4,
                      "differ": 1, "parameter": 5}, line


def test_no_verification_line_counts_nothing():
    assert check_matrix.verification_counts("nodes 3 -> 2\n") == ("", NONE)


def test_only_lists_the_unexportable_it_names():
    """``--only`` on names of any set lists the unexportable ones among them, not the
    matrix's list; each set's run lists its own."""
    pytest.importorskip("torch", reason="the export matrix needs torch")
    from tests.support import export_matrix
    fresh_bad = next(iter(export_matrix.FRESH_UNEXPORTABLE))
    fresh_ok = next(iter(export_matrix.FRESH))
    held = next(iter(export_matrix.HELD_OUT))
    assert check_matrix.unexportable_of([fresh_ok, held], False, False) == {}
    assert check_matrix.unexportable_of([fresh_bad], False, False) == \
        {fresh_bad: export_matrix.FRESH_UNEXPORTABLE[fresh_bad]}
    assert check_matrix.unexportable_of(None, False, True) == export_matrix.FRESH_UNEXPORTABLE
    assert check_matrix.unexportable_of(None, True, False) == {}
    assert check_matrix.unexportable_of(None, False, False) == export_matrix.UNEXPORTABLE


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
