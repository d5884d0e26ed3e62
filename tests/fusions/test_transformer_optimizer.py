"""onnxruntime's transformer optimizer fuses onnxfold's output as well as the export (issue 81).

For each family and exporter of ``bench/fusion_models.py`` (BERT, DistilBERT, GPT-2, ViT, BART
and Llama, by optimum's exporter and by dynamo; trained-like biases), every exported file goes
through ``python -m onnxruntime.transformers.optimizer`` alone, after ``onnxfold optimize``,
and before it:

- onnxfold, then the optimizer: no more nodes than the optimizer alone, no fewer fused ops
  (onnxruntime's own: ``SkipLayerNormalization``, ``BiasGelu`` ...), and no fewer of each
  attention and embedding fusion (``Attention``, ``EmbedLayerNormalization`` ...);
- the optimizer, then onnxfold: no more nodes, the same fused ops;
- both computing what the export computes (``onnxfold compare``, 3 input sets).

CI runs BERT by optimum's exporter (attention and embedding fused); ``--breadth`` every family
(GPT-2 by dynamo among them, whose optimizer once crashed on a fold)
(tests/support/breadth.py). Exports are cached (``$ONNXFOLD_FUSIONS_CACHE``); optimum runs in
the clients' overlay (``bench/client_models.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the fusion tier needs torch (pip install .[exports])")
pytest.importorskip("transformers",
                    reason="the fusion tier needs transformers (pip install .[exports])")

from bench import fusion_models as fm
from tests.support import breadth
from tests.support.cli import assert_ok, run_cli

pytestmark = pytest.mark.slow

CORE = {("bert", "optimum")}
CASES = breadth.over([(name, exporter) for name in fm.FAMILIES for exporter in fm.EXPORTERS],
                     lambda case: case in CORE)


def _optimized(source: Path, target: Path, name: str) -> Path:
    done = fm.optimize(source, target, name)
    assert done.returncode == 0 and target.exists(), done.stderr[-2000:]
    return target


def _folded(source: Path, target: Path) -> Path:
    assert_ok(run_cli("optimize", source, "-o", target, "-q"))
    return target


@pytest.mark.parametrize(("name", "exporter"), CASES)
def test_the_optimizer_fuses_onnxfolds_output_as_it_fuses_the_export(tmp_path, name, exporter):
    files = fm.cached_export(name, exporter)
    assert files, f"{name} by {exporter}: nothing exported"
    for source in files:
        alone = _optimized(source, tmp_path / f"{source.stem}.opt.onnx", name)
        fold_first = _optimized(_folded(source, tmp_path / f"{source.stem}.fold.onnx"),
                                tmp_path / f"{source.stem}.fold.opt.onnx", name)
        fold_after = _folded(alone, tmp_path / f"{source.stem}.opt.fold.onnx")
        want = fm.fused(alone)
        said = f"{source.name}: the optimizer alone {fm.nodes(alone)} nodes {dict(want)}"
        first, after = fm.fused(fold_first), fm.fused(fold_after)
        said += f"; fold first {fm.nodes(fold_first)} {dict(first)}"
        said += f"; fold after {fm.nodes(fold_after)} {dict(after)}"
        assert fm.nodes(fold_first) <= fm.nodes(alone), said
        assert fm.fuses_as_well(first, want), said
        assert fm.nodes(fold_after) <= fm.nodes(alone) and after == want, said
        for chain in (fold_first, fold_after):
            assert_ok(run_cli("compare", source, chain, "-n", "3", *fm.dim_args(name, source)))
