"""A folded export keeps its declared interface (issue 55): the same inputs and outputs, by
name, dtype and dim names (``batch``, ``seq``), so a consumer still reads which outputs share
the inputs' dims. MobileBERT's ``out [batch, seq, 64]`` came out ``[unk__17, unk__18, 64]``
(a rewrite dropped the last ``Add`` of a zero bias and put a value typed by inference in the
output's place); the other exports are a subset of the matrix, its encoders, decoders and
vision models by both exporters.
"""

from __future__ import annotations

import onnx
import pytest

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")

from tests.support import export_matrix
from tests.support.cli import assert_ok, run_cli

NAMES = ["mobilebert_out_torchscript", "bert_torchscript", "distilbert_dynamo", "gpt2_kv_dynamo",
         "resnet_torchscript", "whisper_encoder_dynamo"]


def signature(path) -> list[tuple[str, str, int, list[str | int]]]:
    """Each input and output: which, its name, dtype and dims (names or sizes)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    return [(which, value.name, value.type.tensor_type.elem_type,
             [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim])
            for which, values in (("input", graph.input), ("output", graph.output))
            for value in values if value.name not in {i.name for i in graph.initializer}]


@pytest.mark.parametrize("name", export_matrix.families(NAMES))
def test_a_folded_export_keeps_its_declared_interface(name, tmp_path):
    source, out = export_matrix.build(name), tmp_path / "out.onnx"
    assert_ok(run_cli("optimize", source, "-o", out, "-q"))
    assert signature(out) == signature(source)
