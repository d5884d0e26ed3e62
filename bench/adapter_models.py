"""Decoders with LoRA adapters fed as graph inputs, as Olive's ``ExtractAdapters`` makes them
and onnxruntime's multi-LoRA runs them, for ``python -m bench run adapters`` and the tests.

A Llama-style or Qwen2-style decoder from a ``transformers`` config (random weights, seed 0;
nothing is downloaded) gets peft LoRA adapters on every attention and MLP projection (random
init, B non-zero: an untrained adapter's B is zero, which merges to nothing). One decoding step
with a KV cache (``input_ids``, ``attention_mask``, ``position_ids``, past keys and values ->
logits, present keys and values; batch, sequence and past dynamic) is exported by torch's dynamo
exporter without its optimizer (which would fold each ``Transpose`` of a LoRA weight into an
unnamed initializer, so that no adapter input could be named). Then, as ``ExtractAdapters``
does, every ``lora_A`` / ``lora_B`` initializer becomes a graph input of the same name.

Written into the work directory (outside git), by ``build(NAME, DIR)``:

- ``NAME.onnx``: the decoder with the adapters as inputs;
- ``NAME.adapter{i}.onnx_adapter``, i = 0..3: four adapters (seeds 0..3), written by
  ``onnxruntime.AdapterFormat`` (what ``onnxruntime.LoraAdapter`` reads);
- ``NAME.merged.onnx``: the same decoder with adapter 0 merged by peft (``merge_and_unload``)
  and exported alike: the speed a merged model runs at.

``python -m bench.adapter_models NAME DIR`` builds one in this process (torch stays there: a
benchmark builds in a child).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bench.builders import kv_step

ADAPTERS = 4
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass(frozen=True)
class Decoder:
    """A decoder's config and its adapters' rank."""

    family: str  # "llama" or "qwen2"
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    rank: int = 16
    alpha: int = 32

    def describe(self) -> str:
        return (f"{'Llama' if self.family == 'llama' else 'Qwen2'}-style, {self.layers} layers, "
                f"hidden {self.hidden}, {self.heads}/{self.kv_heads} heads, MLP "
                f"{self.intermediate}, vocabulary {self.vocab}; LoRA rank {self.rank} on q, k, "
                "v, o, gate, up, down")


DECODERS = {
    "llama_lora": Decoder("llama", hidden=1024, layers=8, heads=16, kv_heads=4,
                          intermediate=2816, vocab=4096),
    "qwen2_lora": Decoder("qwen2", hidden=896, layers=8, heads=14, kv_heads=2,
                          intermediate=2432, vocab=4096),
    # the tests' (seconds to export)
    "tiny_llama_lora": Decoder("llama", hidden=64, layers=2, heads=4, kv_heads=2,
                               intermediate=128, vocab=256, rank=4, alpha=8),
    "tiny_qwen2_lora": Decoder("qwen2", hidden=64, layers=2, heads=4, kv_heads=2,
                               intermediate=128, vocab=256, rank=4, alpha=8),
}


@dataclass(frozen=True)
class AdapterModels:
    """The files of one built decoder."""

    model: Path
    merged: Path
    adapters: tuple[Path, ...]

    @property
    def adapter_names(self) -> list[str]:
        """The adapters' input names (the graph inputs that are runtime constants)."""
        return lora_inputs(onnx.load(str(self.model), load_external_data=False))


def paths(name: str, work: Path) -> AdapterModels:
    return AdapterModels(work / f"{name}.onnx", work / f"{name}.merged.onnx",
                         tuple(work / f"{name}.adapter{i}.onnx_adapter"
                               for i in range(ADAPTERS)))


def lora_inputs(model: onnx.ModelProto) -> list[str]:
    """The graph inputs that are LoRA weights (by peft's parameter names)."""
    return [i.name for i in model.graph.input if ".lora_A." in i.name or ".lora_B." in i.name]


def _config(spec: Decoder) -> Any:
    from transformers import LlamaConfig, Qwen2Config

    kind = LlamaConfig if spec.family == "llama" else Qwen2Config
    cfg = kind(vocab_size=spec.vocab, hidden_size=spec.hidden,
               intermediate_size=spec.intermediate, num_hidden_layers=spec.layers,
               num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
               max_position_embeddings=4096, tie_word_embeddings=False)
    cfg._attn_implementation = "eager"  # plain ops, as an export for onnxruntime has them
    return cfg


def example_inputs(spec: Decoder, past: int, seq: int, batch: int = 1,
                   seed: int = 0) -> dict[str, np.ndarray]:
    """Feeds for one step: ``seq`` new tokens after a cache of ``past`` (random keys/values)."""
    rng = np.random.default_rng(seed)
    head_dim = spec.hidden // spec.heads
    feeds = {"input_ids": rng.integers(0, spec.vocab, (batch, seq)).astype(np.int64),
             "attention_mask": np.ones((batch, past + seq), np.int64),
             "position_ids": np.arange(past, past + seq, dtype=np.int64)[None].repeat(batch, 0)}
    for i in range(spec.layers):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = rng.standard_normal(
                (batch, spec.kv_heads, past, head_dim)).astype(np.float32)
    return feeds


def _export(torch: Any, step: Any, spec: Decoder, path: Path) -> None:
    feeds = example_inputs(spec, past=16, seq=8)
    args = tuple(torch.from_numpy(a) for a in feeds.values())
    d = torch.export.Dim
    batch, seq, past = d("batch", min=1, max=64), d("seq", max=1024), d("past", max=2048)
    shapes = ({0: batch, 1: seq}, {0: batch, 1: d("total", max=3072)}, {0: batch, 1: seq},
              tuple({0: batch, 2: past} for _ in range(2 * spec.layers)))
    with torch.no_grad():
        program = torch.onnx.export(step, args, dynamo=True, optimize=False,
                                    dynamic_shapes=shapes, input_names=list(feeds))
    assert program is not None
    tmp = path.with_suffix(".tmp")
    program.save(str(tmp), external_data=False)
    os.replace(tmp, path)


def _randomize_adapters(torch: Any, model: Any, seed: int) -> None:
    """peft's init for A, a non-zero B (as a trained adapter has), both from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_A." in name or ".lora_B." in name:
                bound = 1.0 / param.shape[1] ** 0.5
                param.copy_((torch.rand(param.shape, generator=generator) * 2 - 1) * bound)


def adapters_as_inputs(path: Path) -> None:
    """Every LoRA initializer of the model at ``path`` becomes a graph input (Olive's
    ``ExtractAdapters``)."""
    model = onnx.load(str(path))
    graph = model.graph
    lora = [t for t in graph.initializer if ".lora_A." in t.name or ".lora_B." in t.name]
    kept = [t for t in graph.initializer if t not in lora]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    for tensor in lora:
        graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type,
                                                              list(tensor.dims)))
    tmp = path.with_suffix(".tmp")
    onnx.save(model, str(tmp))
    os.replace(tmp, path)


def _write_adapter(arrays: dict[str, np.ndarray], path: Path) -> None:
    import onnxruntime as ort

    adapter = ort.AdapterFormat()
    adapter.set_adapter_version(1)
    adapter.set_model_version(1)
    adapter.set_parameters({n: ort.OrtValue.ortvalue_from_numpy(a) for n, a in arrays.items()})
    tmp = path.with_suffix(".tmp")
    adapter.export_adapter(str(tmp))
    os.replace(tmp, path)


def _peft_model(name: str) -> tuple[Any, Any, Any]:
    """``name``'s decoder (of ``DECODERS``, seed 0) with peft LoRA on every projection:
    (torch, its config, the peft model)."""
    sys.modules.setdefault("torchvision", None)  # type: ignore[arg-type]  # unused, may clash
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM

    spec = DECODERS[name]
    torch.manual_seed(0)
    cfg = _config(spec)
    base = (LlamaForCausalLM if spec.family == "llama" else Qwen2ForCausalLM)(cfg).eval()
    lora = LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=0.05,
                      target_modules=LORA_TARGETS)
    return torch, cfg, get_peft_model(base, lora).eval()


def peft_decoder(name: str, adapter: int = 0) -> tuple[Any, Any, Any]:
    """``name``'s decoder with peft LoRA on every projection, adapter ``adapter``'s weights in
    it (its seed), as one decoding step: (torch, the step module, the peft model)."""
    torch, cfg, model = _peft_model(name)
    _randomize_adapters(torch, model, adapter)
    return torch, kv_step(torch, model, DECODERS[name].layers, cfg), model


def export_as_users_do(name: str, path: Path, dynamo: bool, adapter: int = 0) -> None:
    """``name``'s decoder with adapter ``adapter`` inside, exported with torch's defaults, as
    a user exports a PEFT model: dynamo with its optimizer (which folds each LoRA weight's
    Transpose into a new initializer) or TorchScript with constant folding (which renames the
    LoRA weights ``onnx::MatMul_N``): the input of ``onnxfold split-adapter``."""
    torch, step, _ = peft_decoder(name, adapter)
    spec = DECODERS[name]
    feeds = example_inputs(spec, past=16, seq=8)
    args = tuple(torch.from_numpy(a) for a in feeds.values())
    names = list(feeds)
    with torch.no_grad():
        if dynamo:
            d = torch.export.Dim
            batch, seq, past = d("batch", min=1, max=64), d("seq", max=1024), d("past",
                                                                                  max=2048)
            shapes = ({0: batch, 1: seq}, {0: batch, 1: d("total", max=3072)},
                      {0: batch, 1: seq}, tuple({0: batch, 2: past}
                                                for _ in range(2 * spec.layers)))
            program = torch.onnx.export(step, args, dynamo=True, dynamic_shapes=shapes,
                                        input_names=names)
            assert program is not None
            program.save(str(path), external_data=False)
        else:
            axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch",
                                                                             1: "total"},
                    "position_ids": {0: "batch", 1: "seq"},
                    **{n: {0: "batch", 2: "past"} for n in names[3:]}}
            torch.onnx.export(step, args, str(path), dynamo=False, input_names=names,
                              dynamic_axes=axes)


def build(name: str, work: str | Path) -> AdapterModels:
    """Build ``name`` (of ``DECODERS``) into ``work`` unless its files are there."""
    work = Path(work)
    out = paths(name, work)
    if all(p.exists() for p in (out.model, out.merged, *out.adapters)):
        return out
    work.mkdir(parents=True, exist_ok=True)
    spec = DECODERS[name]
    torch, cfg, model = _peft_model(name)
    for seed in (*range(1, ADAPTERS), 0):  # adapter 0 last: it is exported, then merged
        _randomize_adapters(torch, model, seed)
        arrays = {f"m.{n}": p.detach().numpy().copy() for n, p in model.named_parameters()
                  if ".lora_A." in n or ".lora_B." in n}
        _write_adapter(arrays, out.adapters[seed])
    _export(torch, kv_step(torch, model, spec.layers, cfg), spec, out.model)
    adapters_as_inputs(out.model)
    _export(torch, kv_step(torch, model.merge_and_unload(), spec.layers, cfg), spec, out.merged)
    missing = set(out.adapter_names) - set(read_adapter(out.adapters[0]))
    assert not missing, f"adapter inputs not in the adapter file: {sorted(missing)[:3]}"
    return out


def read_adapter(path: Path) -> dict[str, np.ndarray]:
    """An ``.onnx_adapter`` file's parameters as arrays."""
    import onnxruntime as ort

    adapter = ort.AdapterFormat.read_adapter(str(path))
    # copies: numpy() views the file's mapping, which goes with the last OrtValue
    return {n: np.array(v.numpy()) for n, v in adapter.get_parameters().items()}


if __name__ == "__main__":  # python -m bench.adapter_models NAME DIR
    print(build(sys.argv[1], Path(sys.argv[2])).model)
