"""Conformance tier: every case of the ONNX node test suite, used as a folding oracle.

Each case's inputs become initializers and onnxfold folds the graph (strict: a rule that
raises or returns the wrong dtype fails the test instead of quietly falling back). A case must
end folded with the expected values (or onnxruntime's, where the runtime deviates from the
reference), or declined for an accepted reason (non-deterministic op, custom domain,
unsupported type); a case onnxruntime can run but onnxfold leaves unfolded is a failure.
`onnxfold rules --coverage` runs the same cases and writes the per-op report.
"""

import pytest

from onnxfold.app.conformance import GAP, WRONG, collect_cases, run_case

CASES = collect_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case):
    result = run_case(case, strict=True)
    assert result.outcome not in (WRONG, GAP), f"{result.outcome}: {result.reason}"


def test_suite_is_complete():
    # the onnx package generates the whole suite; a short list means a broken collection
    assert len(CASES) > 1500
