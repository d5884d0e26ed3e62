"""LoRA adapters of real peft models, exported with the adapters as graph inputs (Olive's
ExtractAdapters' form), merged into their base weights by a Session (``rules/low_rank.py``).

Linear and Conv2d adapters exported by TorchScript (``Gemm`` with a transposed weight,
``MatMul`` of ``Transpose``, peft's trailing ``Cast``) and by dynamo (``Gemm`` with ``transB``,
a zero bias computed from shapes on each Conv adapter), and a Llama-style decoder from a
transformers config (``bench/adapter_models.py``: rank 4 on every projection, a KV cache):
every branch merges on the ort and mlir backends, the results are those of the unmerged model
in onnxruntime (and of its multi-LoRA) within float rounding, and adapter files switch without
folding again.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")
pytest.importorskip("peft", reason="the LoRA exports need peft (pip install .[exports])")

from bench import adapter_models as am
from onnxfold.runtime.session import Session
from tests.support import breadth, export_models

REL = 1e-5  # largest difference relative to the largest output, float32


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert np.abs(got - want).max() <= REL * np.abs(want).max()


def _feeds(path: str, conv: bool) -> tuple[dict[str, np.ndarray], list[str]]:
    model = onnx.load(path)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((3, 4, 8, 8) if conv else (3, 16)).astype(np.float32)}
    names = [i.name for i in model.graph.input if "lora" in i.name]
    for value in model.graph.input:
        if value.name in names:
            dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
            feeds[value.name] = (rng.standard_normal(dims) * 0.1).astype(np.float32)
    return feeds, names


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    """Each LoRA net exported once per module, on first use."""
    made: dict[tuple[bool, bool], str] = {}
    directory = tmp_path_factory.mktemp("nets")

    def get(conv: bool, dynamo: bool) -> str:
        if (conv, dynamo) not in made:
            path = str(directory / f"lora_{int(conv)}{int(dynamo)}.onnx")
            export_models.lora_net(path, conv=conv, dynamo=dynamo)
            made[conv, dynamo] = path
        return made[conv, dynamo]

    return get


@pytest.mark.parametrize(("conv", "dynamo", "backend"), breadth.over([  # CI: each value twice
    pytest.param(conv, dynamo, backend, id=f"{'conv2d' if conv else 'linear'}-"
                 f"{'dynamo' if dynamo else 'torchscript'}-{backend}")
    for conv in (False, True) for dynamo in (False, True) for backend in ("ort", "mlir")],
    lambda case: (case[0] + case[1] + (case[2] == "mlir")) % 2 == 0))
def test_peft_adapters_merge(nets, conv, dynamo, backend):
    path = nets(conv, dynamo)
    feeds, names = _feeds(path, conv)
    assert len(names) == 4
    session = Session(path, names, backend=backend)
    got = session.run(None, feeds)[0]
    assert session.parts.low_rank.merged == 2, session.parts.low_rank.summary()
    layers = [n.op_type for n in session.parts.entry.graph if n.op_type in ("Gemm", "Conv")]
    assert len(layers) == 2  # the base layers alone: each branch went into its weight
    _close(got, ort.InferenceSession(path).run(None, feeds)[0])


@pytest.fixture(scope="module")
def decoder(tmp_path_factory) -> am.AdapterModels:
    return am.build("tiny_llama_lora", tmp_path_factory.mktemp("lora"))


def test_a_decoder_runs_as_its_unmerged_self(decoder):
    spec = am.DECODERS["tiny_llama_lora"]
    adapter = am.read_adapter(decoder.adapters[0])
    session = Session(str(decoder.model), adapter=decoder.adapters[0])
    assert session.parts.low_rank.merged == 2 * 7  # every projection of both layers
    plain = ort.InferenceSession(str(decoder.model))
    merged = ort.InferenceSession(str(decoder.merged))
    for past, seq in ((16, 1), (0, 8)):  # a decode step and a prefill
        step = am.example_inputs(spec, past, seq)
        want = plain.run(None, {**step, **adapter})
        for got, expected in zip(session.run(None, step), want):
            _close(got, expected)
        _close(merged.run(None, step)[0], want[0])  # peft's merge, for scale


def test_decoder_adapter_files_switch_from_kept_sets(decoder):
    spec = am.DECODERS["tiny_llama_lora"]
    step = am.example_inputs(spec, 16, 1)
    plain = ort.InferenceSession(str(decoder.model))
    session = Session(str(decoder.model), adapter=decoder.adapters[0])
    for _ in range(2):
        for path in decoder.adapters:
            session.set_adapter(path)
            want = plain.run(None, {**step, **am.read_adapter(path)})[0]
            _close(session.run(None, step)[0], want)
    assert session.folds == len(decoder.adapters)
