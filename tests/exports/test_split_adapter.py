"""``onnxfold split-adapter``: PEFT models exported as users export them (torch's defaults,
both exporters: dynamo with its optimizer, TorchScript with constant folding, which rename
the LoRA weights) split into a base model with the LoRA weights as inputs and an onnxruntime
adapter file; ``Session(BASE, adapter=FILE)`` computes what the model computes, every branch
merged into its base weight. Another adapter's export splits into the same input names, so
its file runs on the first base model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")
pytest.importorskip("peft", reason="the LoRA exports need peft (pip install .[exports])")

from bench import adapter_models as am
from onnxfold.runtime.adapters import read_adapter
from onnxfold.runtime.session import Session
from tests.support import breadth, export_models
from tests.support.cli import assert_ok, run_cli

REL = 1e-5  # largest difference relative to the largest output, float32


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert np.abs(got - want).max() <= REL * np.abs(want).max()


def _split(model: Path, tmp: Path, tag: str) -> tuple[Path, Path, str]:
    base, adapter = tmp / f"{tag}.base.onnx", tmp / f"{tag}.onnx_adapter"
    proc = run_cli("split-adapter", model, "-o", base, "--adapter", adapter)
    assert_ok(proc)
    return base, adapter, proc.stdout


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("conv", [False, True], ids=["linear", "conv2d"])
def test_a_peft_net_splits_and_the_session_computes_what_it_computes(tmp_path, conv, dynamo):
    model = tmp_path / "net.onnx"
    export_models.lora_net_as_exported(model, conv=conv, dynamo=dynamo)
    base, adapter, printed = _split(model, tmp_path, "net")
    assert "found        4 LoRA weights lifted to inputs" in printed
    lifted = read_adapter(adapter)
    inputs = {i.name for i in onnx.load(str(base)).graph.input}
    assert set(lifted) <= inputs and "x" in inputs and len(lifted) == 4
    session = Session(str(base), adapter=str(adapter))
    assert session.parts.low_rank.merged == 2, session.parts.low_rank.summary()
    x = np.random.default_rng(0).standard_normal((3, 4, 8, 8) if conv else (3, 16))
    feeds = {"x": x.astype(np.float32)}
    _close(session.run(None, feeds)[0], ort.InferenceSession(str(model)).run(None, feeds)[0])


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    """The tiny Llama with adapters 0 and 1, each exported by both exporters' defaults."""
    tmp = tmp_path_factory.mktemp("decoders")
    made = {}
    for dynamo in (False, True):
        for adapter in (0, 1):
            path = tmp / f"llama_{'dynamo' if dynamo else 'torchscript'}_{adapter}.onnx"
            am.export_as_users_do("tiny_llama_lora", path, dynamo, adapter)
            made[dynamo, adapter] = path
    return tmp, made


# CI: the dynamo export (the TorchScript decoder's export alone took 41 s: the breadth tier's)
@pytest.mark.parametrize("dynamo", breadth.over([False, True], lambda dynamo: dynamo),
                         ids=["torchscript", "dynamo"])
def test_a_decoder_exported_as_users_do_splits_into_a_base_and_its_adapters(decoders, dynamo):
    tmp, made = decoders
    spec = am.DECODERS["tiny_llama_lora"]
    base, adapter, _ = _split(made[dynamo, 0], tmp, f"{dynamo}0")
    # every projection of both layers: 14 branches, 28 weights, renamed by either exporter
    names = set(read_adapter(adapter))
    assert len(names) == 28 and not any("lora" in n for n in names)
    second_base, second_adapter, printed = _split(made[dynamo, 1], tmp, f"{dynamo}1")
    assert set(read_adapter(second_adapter)) == names  # the same inputs: one base serves both
    assert "(0 by peft's names, 28 by their low-rank structure)" in printed
    session = Session(str(base), adapter=str(adapter))
    assert session.parts.low_rank.merged == 14, session.parts.low_rank.summary()
    for which, file in ((0, adapter), (1, second_adapter)):
        session.set_adapter(str(file))
        want = ort.InferenceSession(str(made[dynamo, which]))
        for past, seq in ((16, 1), (0, 8)):  # a decode step and a prefill
            step = am.example_inputs(spec, past, seq)
            for got, expected in zip(session.run(None, step), want.run(None, step)):
                _close(got, expected)
    assert second_base.stat().st_size == base.stat().st_size
