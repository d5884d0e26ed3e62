"""The report groups what folded by the exporter's modules on real exports of both exporters:
a dynamo export records module paths only in node metadata (its value names say nothing), so
"What folded, by module" must read the node that computed each folded tensor, not one
"(top level)" row (it was on every dynamo export)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")
pytest.importorskip("transformers",
                    reason="the exports tier needs transformers (pip install .[exports])")

import onnxfold
from tests.support import export_matrix


@pytest.mark.parametrize("name", export_matrix.families(
    ["bert_dynamo", "bert_torchscript", "llama_kv_dynamo"]))
def test_folded_regions_name_the_layers(name):
    report = onnxfold.optimize(str(export_matrix.build(name))).report
    modules = {g["module"]: g for g in report.folded_regions}
    layers = [m for m in modules if ".layer.*." in m or ".layers.*." in m]
    assert layers, modules  # the weight transposes of each layer's projections
    top = modules.get("(top level)", {"nodes": 0})["nodes"]
    assert top < sum(g["nodes"] for g in modules.values()) / 2, modules
