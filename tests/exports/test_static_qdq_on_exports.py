"""A real static-QDQ export keeps its QDQ node units (issue 35 item 0): a TorchScript BERT
quantized by ``onnxruntime.quantization.quantize_static`` (QDQ format, int8 weights, uint8
activations) and folded with the defaults has every ``DequantizeLinear -> MatMul ->
QuantizeLinear`` unit and every activation's ``QuantizeLinear`` of the original, no
``Concat`` of dequantized weights (``merge_shared_input_matmuls`` used to merge each layer's
Q, K and V: 2.3x slower in onnxruntime), the same integer kernels in the graph onnxruntime
runs after its own optimizations, and the original's outputs. The model is built here from a
transformers config with random weights (``export_models.bert_static_qdq``)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")
pytest.importorskip("transformers",
                    reason="the exports tier needs transformers (pip install .[exports])")

import onnxfold
from onnxfold.pipeline.options import FoldOptions
from tests.support import export_models
from tests.support.qdq import (
    activation_quantizations,
    concatenated_dequantizations,
    matmul_units,
    ort_kernels,
)

MERGE = "merge_shared_input_matmuls"
# per layer: the Q, K, V and output projections, the FFN's two, Q K^T and the product with V
UNITS = 8 * export_models.LAYERS


@pytest.fixture(scope="module")
def folded(tmp_path_factory):
    """The export and its fold (default options), made once per module."""
    directory = tmp_path_factory.mktemp("static_qdq")
    source, out = directory / "bert_qdq.onnx", directory / "folded.onnx"
    export_models.bert_static_qdq(source, hidden=64, seq=16)
    result = onnxfold.optimize(str(source), FoldOptions(strict=True))
    result.save(str(out))
    return source, out, result.report


def _run(path, feeds):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(
        None, feeds)


def test_the_qdq_units_stay(folded):
    source, out, report = folded
    original, result = onnx.load(str(source)), onnx.load(str(out))
    assert MERGE not in report.pattern_hits
    assert matmul_units(original) == UNITS
    assert matmul_units(result) == matmul_units(original)
    assert concatenated_dequantizations(result) == 0


def test_every_activation_stays_quantized(folded):
    """Every QuantizeLinear of a value that depends on an input stays (those of constants
    fold to integer initializers). merge_duplicates is off here: it rightly makes the two
    layers' identical quantizations of the attention mask one node."""
    source, _, _ = folded
    result = onnxfold.optimize(str(source), FoldOptions(strict=True,
                                                        disabled_rules={"merge_duplicates"}))
    original = onnx.load(str(source))
    assert activation_quantizations(result.to_proto()) == activation_quantizations(original)


def test_onnxruntime_runs_as_many_integer_kernels(folded, tmp_path):
    source, out, _ = folded
    want = ort_kernels(source, tmp_path / "original.ort.onnx")
    assert want["QLinearMatMul"] == UNITS
    assert ort_kernels(out, tmp_path / "folded.ort.onnx") == want


def test_outputs_are_the_originals(folded):
    source, out, _ = folded
    rng = np.random.default_rng(0)
    for batch, seq in ((2, 16), (1, 5)):
        feeds = {"input_ids": rng.integers(0, export_models.VOCAB, (batch, seq)),
                 "attention_mask": np.ones((batch, seq), np.int64)}
        for want, got in zip(_run(source, feeds), _run(out, feeds), strict=True):
            np.testing.assert_array_equal(got, want)


def test_the_drivers_shape_values_between_sweeps_equal_a_whole_walk(folded, monkeypatch):
    """Between sweeps the driver updates the shape values of the nodes rewrites changed (built,
    or rewired: ``Spliced.rewired``) instead of walking the graph again: on this export, whose
    rewrites rewire readers whose refined dims change, every update equals a whole walk (values
    and refined dims). Noting only the built nodes as changed fails here."""
    from onnxfold.analysis.step_inputs import REFINED_KEY
    from onnxfold.analysis.symbolic import shape_values
    from onnxfold.rewrite.sweep import GraphState

    def refined(graph):
        return {v: v.meta.get(REFINED_KEY) for node in graph for v in node.outputs}

    updates: list[tuple[int, int]] = []
    update = GraphState.update_shape_values

    def checked(state, previous, changed_nodes):
        changed = update(state, previous, changed_nodes)
        graph, got = state.graph, state.shape_values
        dims = refined(graph)
        whole = shape_values(graph, state.view.array, state.shared_dim_names(),
                             steps=state.shape_steps, complete=state.completing)
        values = {v for node in graph for v in (*node.inputs, *node.outputs) if v is not None}
        updates.append((sum(got.get(v) != whole.get(v) for v in values),
                        sum(dims[v] != found for v, found in refined(graph).items())))
        return changed

    monkeypatch.setattr(GraphState, "update_shape_values", checked)
    onnxfold.optimize(str(folded[0]), FoldOptions(strict=True))
    assert updates and all(u == (0, 0) for u in updates), updates
