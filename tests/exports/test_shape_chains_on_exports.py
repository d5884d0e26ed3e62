"""Shape chains of real exports fold on the input dims they come from
(``onnxfold.analysis.symbolic``):
a dynamo ResNet's flatten (an ``allowzero=1`` Reshape), a TorchScript T5's chains through its
layer norms, a TorchScript KV-cache decoder's chains across inputs under
``--assume-named-dims-equal``, and an opset-13 TorchScript ALBERT whose values after its mask
onnx's inference leaves without a rank. Every folded model is run against the original in
onnxruntime at a regular binding of every dynamic dim, a decode step, and an empty batch where
the original runs one. The models are built here from transformers configs with random weights."""

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
from tests.support.runtime_fusions import fused_normalizations


def _fold(path: str, **options: bool) -> tuple[onnx.ModelProto, onnxfold.Report]:
    result = onnxfold.optimize(path, FoldOptions(strict=True, **options))
    return result.to_proto(), result.report


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node if n.op_type != "Constant"]


def _feeds(model: onnx.ModelProto, dims: dict[str, int]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value if d.HasField("dim_value") else dims[d.dim_param]
                 for d in value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[value.name] = np.ones(shape, np.int64) if "mask" in value.name else \
                rng.integers(0, export_models.VOCAB, shape).astype(np.int64)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _run(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(
        None, feeds)


def _assert_same(source: str, folded: onnx.ModelProto, bindings: list[dict[str, int]]) -> None:
    original = onnx.load(source)
    for dims in bindings:
        feeds = _feeds(original, dims)
        for want, got in zip(_run(source, feeds), _run(folded, feeds), strict=True):
            assert want.shape == got.shape, dims
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _input_dims(model: onnx.ModelProto) -> list[str]:
    return [d.dim_param for value in model.graph.input
            for d in value.type.tensor_type.shape.dim if d.dim_param]


def test_dynamo_resnet_flatten_folds(tmp_path):
    source = str(tmp_path / "resnet.onnx")
    export_models.resnet_dynamo(source)
    folded, report = _fold(source)
    assert not {"Shape", "Squeeze", "Concat"} & set(_ops(folded))
    assert report.dynamic_shapes == []
    batch, height, width = _input_dims(onnx.load(source))
    _assert_same(source, folded, [{batch: 2, height: 64, width: 64},
                                  {batch: 1, height: 33, width: 47},
                                  {batch: 0, height: 64, width: 64}])


def test_torchscript_t5_chains_name_only_input_dims(tmp_path):
    source = str(tmp_path / "t5.onnx")
    export_models.t5_torchscript(source)
    folded, report = _fold(source)
    blocked = [entry["blocked_by"] for entry in report.dynamic_shapes]
    assert blocked and all("of input" in why and "unk__" not in why and "_output_" not in why
                           for why in blocked), blocked
    _assert_same(source, folded, [{"batch": 2, "seq": 8, "dec": 5},
                                  {"batch": 1, "seq": 6, "dec": 1}])


def test_torchscript_kv_cache_folds_more_with_named_dims_equal(tmp_path):
    source = str(tmp_path / "qwen2_kv.onnx")
    export_models.qwen2_kv_cache(source, dynamo=False)
    default, _ = _fold(source)
    assumed, _ = _fold(source, assume_named_dims_equal=True)
    assert len(_ops(assumed)) < len(_ops(default))
    bindings = [{"batch": 2, "seq": 5, "past": 3, "total": 8},
                {"batch": 1, "seq": 1, "past": 7, "total": 8},
                {"batch": 2, "seq": 4, "past": 0, "total": 4}]
    _assert_same(source, default, bindings)
    _assert_same(source, assumed, bindings)


def _neutral_elements(model: onnx.ModelProto) -> list[str]:
    """The Adds of float zeros and Muls by float ones of ``model`` (initializers or Constant
    nodes)."""
    from onnx import numpy_helper

    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    constants.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t)
                      for n in model.graph.node if n.op_type == "Constant" and n.attribute
                      and n.attribute[0].name == "value"})
    found = []
    for node in model.graph.node:
        neutral = 0.0 if node.op_type == "Add" else 1.0 if node.op_type == "Mul" else None
        arrays = [constants[name] for name in node.input if name in constants]
        if neutral is not None and any(a.dtype.kind == "f" and a.size and (a == neutral).all()
                                       for a in arrays):
            found.append(node.name)
    return found


@pytest.mark.parametrize("opset", [13, 17])
def test_torchscript_albert_drops_its_neutral_elements_at_every_opset(tmp_path, opset):
    """Before Reshape-14 onnx infers no rank for the mask's Reshape(x, Shape(y)) nor for
    anything after it: onnxfold's symbolic walk gives them one, so every zero bias and unit
    norm scale goes at opset 13 as at 17, but the affine tails of the layer norms, which
    onnxruntime fuses only with them: at opset 17 each norm becomes a LayerNormalization."""
    source = str(tmp_path / "albert.onnx")
    export_models.albert_torchscript(source, opset)
    assert _neutral_elements(onnx.load(source))  # untrained: there are some to drop
    folded, _report = _fold(source)
    left = _neutral_elements(folded)
    assert all("layernorm" in name.lower().replace("_", "") for name in left)
    assert len(left) == (2 * 5 if opset < 17 else 0)  # 5 norms: the embeddings', 2 per layer
    assert ("LayerNormalization" in _ops(folded)) == (opset >= 17)
    assert fused_normalizations(folded) == fused_normalizations(source) == {"LayerNorm": 5}
    _assert_same(source, folded, [{"batch": 2, "seq": 7}, {"batch": 1, "seq": 1},
                                  {"batch": 3, "seq": 12}])
