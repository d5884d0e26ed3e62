"""Every input is an input (issue 63, item 5): an initializer that is also a graph input (IR >=
4) is a default a caller may override, and no rule may read its value. A normalization rewrite
wrote a default epsilon into a LayerNormalization: fed ``eps = 3.0`` the optimized model was
off by 1.28. The rules read constants through ``GraphView.array`` alone, which gives none for
such a value: held here by behaviour, on models where every float initializer is also an input,
fed other values than their defaults."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxfold
from tests.support.models import make_model, tensor, vinfo

F = TensorProto.FLOAT
MODELS = Path(__file__).resolve().parents[2] / "models"


def _layer_norm() -> onnx.ModelProto:
    """LayerNorm written out (the pattern ``write_normalization`` fuses)."""
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["mu"], keepdims=1),
             helper.make_node("Sub", ["x", "mu"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq", "axes"], ["var"], keepdims=1),
             helper.make_node("Add", ["var", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["nrm"]),
             helper.make_node("Mul", ["nrm", "g"], ["ng"]),
             helper.make_node("Add", ["ng", "b"], ["y"])]
    inits = [tensor("axes", np.array([-1], np.int64)), tensor("two", np.array(2.0, np.float32)),
             tensor("eps", np.array(1e-5, np.float32)),
             tensor("g", np.linspace(0.5, 1.5, 16, dtype=np.float32)),
             tensor("b", np.linspace(-1, 1, 16, dtype=np.float32))]
    return make_model(nodes, [vinfo("x", F, [3, 16])], [vinfo("y", F, [3, 16])], inits, opset=18)


def _every_float_initializer_an_input(model: onnx.ModelProto) -> list[str]:
    """Lists each float initializer of ``model`` among its graph inputs (in place); their
    names."""
    listed = {i.name for i in model.graph.input}
    names = []
    for t in model.graph.initializer:
        if t.data_type == F and t.name not in listed:
            model.graph.input.append(helper.make_tensor_value_info(t.name, F, list(t.dims)))
            names.append(t.name)
    return names


def _feeds(session: ort.InferenceSession, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for arg in [*session.get_inputs(), *session.get_overridable_initializers()]:
        shape = [d if isinstance(d, int) else 2 for d in arg.shape]
        if arg.type == "tensor(int64)":
            feeds[arg.name] = np.ones(shape, np.int64)
        else:
            feeds[arg.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("source", ["layer_norm", "tiny_bert_ts.onnx", "tiny_gpt2_ts.onnx"])
def test_a_default_fed_another_value_computes_what_the_original_computes(tmp_path, source):
    model = _layer_norm() if source == "layer_norm" else onnx.load(str(MODELS / source))
    overridable = _every_float_initializer_an_input(model)
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(model, str(path))
    onnxfold.optimize(str(path)).save(str(out))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    original = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    optimized = ort.InferenceSession(str(out), options, providers=["CPUExecutionProvider"])
    kept = {arg.name for arg in [*optimized.get_inputs(),
                                 *optimized.get_overridable_initializers()]}
    assert set(overridable) <= kept, set(overridable) - kept  # each is still an input
    rng = np.random.default_rng(63)
    feeds = _feeds(original, rng)
    for name in overridable:  # each default moved away from what the model holds
        feeds[name] = (feeds[name] * 0 + rng.uniform(0.5, 3.0, feeds[name].shape)
                       ).astype(np.float32) if feeds[name].ndim else np.array(3.0, np.float32)
    want = original.run(None, feeds)
    got = optimized.run(None, {k: v for k, v in feeds.items() if k in kept})
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_inputs_feeds_an_overridable_default_and_catches_a_baked_one(tmp_path):
    """``--inputs`` gives an initializer that is also a graph input as a caller feeds it (it
    was refused: "is not an input"): fed ``eps = 3.0``, a model that baked the default epsilon
    into a LayerNormalization differs; onnxfold's own output passes, whole and in stages."""
    from onnxfold.check.compare import compare
    from tests.support.cli import run_cli

    model = _layer_norm()
    _every_float_initializer_an_input(model)
    path, out, baked = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "baked.onnx"
    onnx.save(model, str(path))
    onnxfold.optimize(str(path)).save(str(out))
    wrong = onnx.load(str(path))  # LayerNormalization with the default epsilon written in
    del wrong.graph.node[:]
    wrong.graph.node.extend([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"],
                                              axis=-1, epsilon=1e-5)])
    onnx.save(wrong, str(baked))
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, eps=np.array(3.0, np.float32))
    assert run_cli("compare", path, baked, "--inputs", feeds).returncode == 1
    good = run_cli("compare", path, out, "--inputs", feeds, "-n", "2")
    assert good.returncode == 0, good.stdout + good.stderr
    windowed = compare(str(path), str(out), inputs={"eps": np.array(3.0, np.float32)}, n=2,
                       window_bytes=16)
    assert windowed.ok and windowed.windows, windowed.summary()
    assert not compare(str(path), str(baked), inputs={"eps": np.array(3.0, np.float32)},
                       window_bytes=16).ok
