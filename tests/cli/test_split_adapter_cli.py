"""``onnxfold split-adapter`` on models built here (the PEFT exports are in
``tests/exports/test_split_adapter.py``): LoRA weights found by name and by structure, lifted
to inputs; the base model fed the adapter file's arrays computes what the model computed,
bit for bit, and a Session merging them within float rounding; a model without LoRA, or a
pair of products that is no branch beside a base, is refused in one line, nothing written;
the outputs never replace the model nor each other.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.runtime.adapters import read_adapter
from tests.support.cli import assert_ok, assert_one_error_line, run_cli
from tests.support.running import run_ort

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def _weights(**shapes):
    return [numpy_helper.from_array(RNG.standard_normal(s).astype(np.float32), n)
            for n, s in shapes.items()]


def lora_model(path, a="w.lora_A.default.weight", b="w.lora_B.default.weight",
               with_base=True):
    """y = x @ W + 2 * (x @ A) @ B (x [n, 16], rank 2), the base product left out without
    ``with_base``."""
    nodes = [helper.make_node("MatMul", ["x", a], ["xa"]),
             helper.make_node("MatMul", ["xa", b], ["xab"]),
             helper.make_node("Mul", ["xab", "scale"], ["branch"])]
    if with_base:
        nodes += [helper.make_node("MatMul", ["x", "w"], ["base"]),
                  helper.make_node("Add", ["base", "branch"], ["y"])]
    else:
        nodes += [helper.make_node("Identity", ["branch"], ["y"])]
    inits = _weights(**{"w": (16, 8), a: (16, 2), b: (2, 8)})
    inits.append(numpy_helper.from_array(np.array(2.0, np.float32), "scale"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", 16])],
                              [helper.make_tensor_value_info("y", F, ["n", 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    return path


@pytest.mark.parametrize(("a", "b", "how"), [
    ("w.lora_A.default.weight", "w.lora_B.default.weight", "(2 by peft's names, 0 by"),
    ("w.lora_A.my_adapter.weight", "w.lora_B.my_adapter.weight", "(2 by peft's names, 0 by"),
    ("onnx::MatMul_28", "onnx::MatMul_29", "(0 by peft's names, 2 by their low-rank"),
])
def test_lora_weights_become_inputs_and_the_adapter_file_holds_them(tmp_path, a, b, how):
    model = lora_model(tmp_path / "m.onnx", a, b)
    base, adapter = tmp_path / "base.onnx", tmp_path / "a.onnx_adapter"
    proc = run_cli("split-adapter", model, "-o", base, "--adapter", adapter)
    assert_ok(proc)
    assert f"found        2 LoRA weights lifted to inputs {how}" in proc.stdout
    arrays = read_adapter(adapter)
    lifted = onnx.load(str(base))
    assert set(arrays) == {a, b} <= {i.name for i in lifted.graph.input}
    # each has a default of zeros: onnxruntime's multi-LoRA feeds only inputs that have one,
    # and the base alone is the base model
    defaults = {t.name: numpy_helper.to_array(t) for t in lifted.graph.initializer}
    assert {a, b} <= set(defaults) and not defaults[a].any() and not defaults[b].any()
    x = RNG.standard_normal((3, 16)).astype(np.float32)
    want = run_ort(str(model), {"x": x})[0]
    np.testing.assert_array_equal(run_ort(str(base), {"x": x, **arrays})[0], want)
    _runs_under_multi_lora(base, adapter, x, want)
    session = onnxfold.Session(str(base), adapter=str(adapter))
    assert session.parts.low_rank.merged == 1
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-5)


def test_a_model_without_lora_is_one_line_and_nothing_is_written(tmp_path):
    """Two products in a row, with no base product beside them, are no LoRA branch."""
    model = lora_model(tmp_path / "m.onnx", "w1", "w2", with_base=False)
    before = sorted(os.listdir(tmp_path))
    proc = run_cli("split-adapter", model, "-o", tmp_path / "b.onnx", "--adapter",
                   tmp_path / "a.onnx_adapter")
    assert_one_error_line(proc, "no LoRA weight found", "merge_and_unload")
    assert sorted(os.listdir(tmp_path)) == before


def test_named_lora_weights_that_merge_into_nothing_are_lifted_and_said(tmp_path):
    model = lora_model(tmp_path / "m.onnx", with_base=False)
    base, adapter = tmp_path / "base.onnx", tmp_path / "a.onnx_adapter"
    proc = run_cli("split-adapter", model, "-o", base, "--adapter", adapter)
    assert_ok(proc)
    assert "2 named LoRA weights do not merge into a base weight" in proc.stdout
    x = RNG.standard_normal((2, 16)).astype(np.float32)
    np.testing.assert_array_equal(run_ort(str(base), {"x": x, **read_adapter(adapter)})[0],
                                  run_ort(str(model), {"x": x})[0])


@pytest.mark.parametrize("clash", ["model", "each other"])
def test_the_outputs_replace_neither_the_model_nor_each_other(tmp_path, clash):
    model = lora_model(tmp_path / "m.onnx")
    content = model.read_bytes()
    base = model if clash == "model" else tmp_path / "same"
    proc = run_cli("split-adapter", model, "-o", base, "--adapter", tmp_path / "same")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert model.read_bytes() == content and not (tmp_path / "same").exists()


def _runs_under_multi_lora(base, adapter, x, want):
    """The base computes ``want`` under onnxruntime's multi-LoRA (the adapter file active in
    ``RunOptions``); run alone (the defaults, zeros) it computes the base product alone."""
    session = ort.InferenceSession(str(base), providers=["CPUExecutionProvider"])
    loaded = ort.LoraAdapter()
    loaded.Load(str(adapter))
    options = ort.RunOptions()
    options.add_active_adapter(loaded)
    np.testing.assert_array_equal(session.run(None, {"x": x}, options)[0], want)
    zeros = {name: np.zeros_like(array) for name, array in read_adapter(adapter).items()}
    alone = session.run(None, {"x": x})[0]
    np.testing.assert_array_equal(alone, session.run(None, {"x": x, **zeros})[0])
    assert not np.array_equal(alone, want)


def test_lora_weights_already_listed_as_inputs_are_lifted_once(tmp_path):
    """TorchScript's ``keep_initializers_as_inputs=True`` lists every initializer among the
    inputs: the base lists each LoRA input once (a second definition made onnxruntime refuse
    it: "Duplicate definition-site"), and runs plainly and under multi-LoRA."""
    model = lora_model(tmp_path / "m.onnx")
    proto = onnx.load(str(model))
    for weight in proto.graph.initializer:
        proto.graph.input.append(helper.make_tensor_value_info(weight.name, weight.data_type,
                                                               list(weight.dims)))
    onnx.save(proto, str(model))
    base, adapter = tmp_path / "base.onnx", tmp_path / "a.onnx_adapter"
    assert_ok(run_cli("split-adapter", model, "-o", base, "--adapter", adapter))
    names = [i.name for i in onnx.load(str(base)).graph.input]
    assert len(names) == len(set(names)) == 5
    x = RNG.standard_normal((2, 16)).astype(np.float32)
    _runs_under_multi_lora(base, adapter, x, run_ort(str(model), {"x": x})[0])


@pytest.mark.parametrize("clash", ["external data", "each other", "model"])
def test_python_refuses_what_the_command_line_refuses(tmp_path, clash):
    """``onnxfold.split_adapter`` claims through the same door as the command: an adapter
    over the input's external data (it returned, the input no longer loading) or over the
    base model (it returned, the base gone) is refused, nothing written."""
    model = lora_model(tmp_path / "m.onnx")
    proto = onnx.load(str(model))
    onnx.save(proto, str(model), save_as_external_data=True, location="m.onnx.data",
              size_threshold=0)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    base = model if clash == "model" else tmp_path / "b.onnx"
    adapter = {"external data": tmp_path / "m.onnx.data", "each other": base,
               "model": tmp_path / "a.onnx_adapter"}[clash]
    with pytest.raises(onnxfold.OutputError, match=r"refusing to overwrite an input|would also"):
        onnxfold.split_adapter(model, base, adapter)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    cli = run_cli("split-adapter", model, "-o", base, "--adapter", adapter)
    assert_one_error_line(cli, "refusing to overwrite an input" if clash != "each other"
                          else "would also")
    run_ort(str(model), {"x": RNG.standard_normal((2, 16)).astype(np.float32)})


def test_a_session_over_a_split_base_prints_no_onnxruntime_warning(tmp_path):
    """Issue 65: a Session's first run, and the first after each switch, printed one
    onnxruntime "Removing initializer" warning per LoRA weight (its default was left in the
    entry model, which no longer reads it); a Session without an adapter, one "appears in graph
    inputs" warning per weight. onnxruntime logs from C: a child's stderr."""
    import subprocess
    import sys

    model = lora_model(tmp_path / "m.onnx")
    base, adapter = tmp_path / "base.onnx", tmp_path / "a.onnx_adapter"
    assert_ok(run_cli("split-adapter", model, "-o", base, "--adapter", adapter))
    script = f"""
import numpy as np, onnxfold
from onnxfold.runtime.adapters import read_adapter
x = {{"x": np.ones((3, 16), np.float32)}}
s = onnxfold.Session({str(base)!r}, adapter={str(adapter)!r})
first = s.run(None, x)[0]
doubled = {{k: v * 2 for k, v in read_adapter({str(adapter)!r}).items()}}
s.set_adapter(doubled)
assert not np.array_equal(s.run(None, x)[0], first)
s.set_adapter({str(adapter)!r})
assert np.array_equal(s.run(None, x)[0], first)
alone = onnxfold.Session({str(base)!r})  # no adapter: the base model, quietly too
assert not np.array_equal(alone.run(None, x)[0], first)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
