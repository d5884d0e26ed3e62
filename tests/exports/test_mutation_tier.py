"""The mutation tier, on two exports: every bug of ``tools/mutants.py`` planted into onnxfold's
own rules that changes the model must fail ``optimize --check 3`` naming a tensor, a rewrite or
an output, and the clean run must pass (``tools/mutation_tier.py``; ``python -m
tools.mutation_tier`` runs the whole export matrix, ``--held-out`` the held-out families).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")
pytest.importorskip("transformers",
                    reason="the exports tier needs transformers (pip install .[exports])")
pytest.importorskip("onnxscript",
                    reason="the exports tier needs onnxscript (pip install .[exports])")

from tests.support import breadth, export_matrix
from tools.mutants import MUTANTS
from tools.mutation_tier import mutate_one

pytestmark = pytest.mark.slow

# two families, both exporters: between them every mutant fires at least once but
# swap_merged_qk (an attention's projections stay apart for onnxruntime's fusers, docs/fusions.md;
# the merge's own tests: tests/unit/test_shared_input_matmuls.py)
EXPORTS = {"llama_kv_torchscript": 7, "bert_dynamo": 5}  # export -> mutants that must fire


# CI runs the decoder's (8 mutants); the breadth tier (--breadth) both
@pytest.mark.parametrize("name", breadth.over(EXPORTS, lambda name: name == "llama_kv_torchscript"))
def test_every_mutant_that_changes_the_model_is_caught(name, tmp_path):
    row = mutate_one(name, list(MUTANTS), export_matrix.default_cache(), tmp_path)
    assert row.clean == "passed", row.clean  # no false alarm
    fired = {m: o for m, o in row.outcomes.items() if o != "inert"}
    assert len(fired) >= EXPORTS[name], row.outcomes  # the tier tests something here
    missed = {m: row.details.get(m, "") for m, o in fired.items() if o not in ("caught",
                                                                             "equivalent")}
    assert not missed, missed
