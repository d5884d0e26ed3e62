"""The last line says the tensors rewrites made were "validated with them" only where every
rewrite was validated: under a memory limit a VAE decoder's check said "every folded tensor
verified for every input but 1 tensor a rewrite made (validated with it on the input sets); 0
rewrites validated on the input sets, 220 not validated"."""

from __future__ import annotations

import pytest

from onnxfold.check.folds.verdicts import FoldVerification
from onnxfold.check.judging.verdicts import (
    BITWISE,
    PARAMETER,
    UNVALIDATED,
    Verdict,
)
from onnxfold.check.result import CompareResult
from onnxfold.check.rewrites.validation import RewriteValidation


def _result(rewrite_state: str | None) -> CompareResult:
    folds = FoldVerification("a.onnx", "b.onnx", [Verdict("w", BITWISE, via="original"),
                                                  Verdict("merged", PARAMETER)])
    rewrites = None if rewrite_state is None else RewriteValidation(
        [Verdict("fuse at n", rewrite_state, reason="the machine ran short")], sets=3)
    return CompareResult(model_a="a.onnx", model_b="b.onnx", n=3, rows=[], inputs=[], seed=0,
                         rtol=None, atol=None, folds=folds, rewrites=rewrites)


@pytest.mark.parametrize("state", [UNVALIDATED, None])
def test_rewrite_made_tensors_are_not_called_validated_unless_their_rewrites_were(state):
    line = _result(state).verdict()
    assert "validated with it" not in line, line
    assert "1 tensor a rewrite made (judged with its rewrite, not all validated)" in line, line
    assert line.endswith("(not a full verification: see above)"), line


def test_rewrite_made_tensors_are_validated_with_their_validated_rewrites():
    line = _result(BITWISE).verdict()
    assert "1 tensor a rewrite made (validated with it on the input sets)" in line, line
    assert "1 rewrites validated on the input sets" in line, line
