"""The check on random graphs, CI tier: each seed's model (``tools.fuzz.graphgen``) that the
fuzzer finds folded right (``tools.fuzz.fuzzcheck``: the folded model computes what the
original computes at both assignments of its dims) goes through ``onnxfold.compare`` (two
input sets): the check must pass it. A check that fails a right fold cries wolf; one that
ends in an internal error is a bug. Where the check's own random inputs cannot run the
original (a ``Gather`` of an index the graph did not expect), it says it could not run: not
a verdict, skipped. Run many more with ``python -m tools.fuzz.check_campaign --n 1500``.

The seeds are the first hundred of the campaign that found three defects of the check
(``tests/unit/test_check_random_graph_finds.py``) and the seeds of the later ones; KNOWN
lists the seeds the check still fails, each with its reason, as strict xfails.
"""

from __future__ import annotations

import pytest

import onnxfold
from onnxfold.errors import InputError
from tests.support.known_failures import with_known
from tools.fuzz import fuzzcheck, graphgen

SEEDS = [*range(9200000, 9200100), 9300396, 9300400, 9300417, 9300232, 9300373, 9300585]

KNOWN: dict[int, str] = {
    9300585: "a Scan of float16 Cos and Mul folded without a rounding mark to the bits "
             "onnxruntime gives at level all (it keeps the Cos in float32 into the Mul), "
             "1 ulp from the bits it gives with no optimization, which the check expects",
}


@pytest.mark.parametrize("seed", with_known(SEEDS, KNOWN))
def test_the_check_passes_a_fold_the_fuzzer_finds_right(seed, tmp_path):
    case = graphgen.generate(seed)
    res = fuzzcheck.check_case(case, str(tmp_path), inspect=False)
    if res.status != "ok":
        pytest.skip(f"not a fold the fuzzer finds right: {res.status} {res.kind}")
    try:
        result = onnxfold.compare(str(tmp_path / "model.onnx"), str(tmp_path / "folded.onnx"),
                                  n=2)
    except InputError as e:
        assert "could not run" in str(e) or "failed to run it" in str(e), str(e)
        pytest.skip(f"the check could not run the original on its inputs: {str(e)[:120]}")
    assert result.ok, result.summary()
