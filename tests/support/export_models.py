"""Tiny real exports for the check tier: transformers models from configs with random weights
(hidden 32, 2 layers, vocab 100), exported by torch.onnx (dynamo or TorchScript) with dynamic
dims, as users export them (one also quantized by onnxruntime's ``quantize_static``). Each
export takes a few seconds."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import BertConfig, BertModel, Qwen2Config, Qwen2ForCausalLM
from transformers.cache_utils import DynamicCache

LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 2, 4, 2, 8, 100


class _LastHidden(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class _Logits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).logits


class _Decoder(torch.nn.Module):
    """One decoding call with a KV cache: past keys/values in, logits and present out."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, k0, v0, k1, v1):
        cache = DynamicCache()
        for layer, (k, v) in enumerate(((k0, v0), (k1, v1))):
            cache.update(k, v, layer)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         past_key_values=cache, use_cache=True)
        present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
        return (out.logits, *present)


def _qwen2(use_cache: bool) -> Qwen2ForCausalLM:
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=HEADS * HEAD_DIM, intermediate_size=64,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, max_position_embeddings=64,
                         use_cache=use_cache)
    return Qwen2ForCausalLM(config).eval()


def bert_float16(path: str | os.PathLike) -> None:
    """A ``model.half()`` BERT, dynamo export, dynamic batch and sequence."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=LAYERS,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    model = _LastHidden(BertModel(config).eval().half()).eval()
    ids, mask = torch.randint(0, VOCAB, (2, 8)), torch.ones(2, 8, dtype=torch.long)
    dyn = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
    torch.onnx.export(model, (ids, mask), str(path), input_names=["input_ids", "attention_mask"],
                      dynamic_shapes=(dyn, dyn), dynamo=True, external_data=False)


def bert_dynamo(path: str | os.PathLike) -> None:
    """A float32 BERT encoder, dynamo export, dynamic batch and sequence (dims s-named)."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=LAYERS,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    model = _LastHidden(BertModel(config).eval()).eval()
    ids, mask = torch.randint(0, VOCAB, (2, 8)), torch.ones(2, 8, dtype=torch.long)
    dyn = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
    torch.onnx.export(model, (ids, mask), str(path), input_names=["input_ids", "attention_mask"],
                      dynamic_shapes=(dyn, dyn), dynamo=True, external_data=False)


def qwen2_float16(path: str | os.PathLike) -> None:
    """A float16 Qwen2-style decoder without a cache, dynamo export."""
    torch.manual_seed(0)
    model = _Logits(_qwen2(use_cache=False).half()).eval()
    dyn = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
    torch.onnx.export(model, (torch.randint(0, VOCAB, (2, 8)),), str(path),
                      input_names=["input_ids"], dynamic_shapes=(dyn,), dynamo=True,
                      external_data=False)


KV_INPUTS = ["input_ids", "attention_mask"] + [
    f"past_key_values.{i}.{kind}" for i in range(LAYERS) for kind in ("key", "value")]
KV_OUTPUTS = ["logits"] + [f"present.{i}.{kind}" for i in range(LAYERS)
                           for kind in ("key", "value")]


def qwen2_kv_cache(path: str | os.PathLike, dynamo: bool) -> None:
    """A float32 Qwen2-style decoder with past_key_values inputs, every dim dynamic."""
    torch.manual_seed(0)
    model = _Decoder(_qwen2(use_cache=True)).eval()
    past, seq = 3, 5
    ids = torch.randint(0, VOCAB, (2, seq))
    mask = torch.ones(2, past + seq, dtype=torch.long)
    cache = [torch.randn(2, KV_HEADS, past, HEAD_DIM) for _ in range(2 * LAYERS)]
    if dynamo:
        d = torch.export.Dim.DYNAMIC
        shapes = ({0: d, 1: d}, {0: d, 1: d}, *[{0: d, 2: d}] * (2 * LAYERS))
        torch.onnx.export(model, (ids, mask, *cache), str(path), input_names=KV_INPUTS,
                          output_names=KV_OUTPUTS, dynamic_shapes=shapes, dynamo=True,
                          external_data=False)
        return
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"}}
    axes.update({name: {0: "batch", 2: "past"} for name in KV_INPUTS[2:]})
    torch.onnx.export(model, (ids, mask, *cache), str(path), input_names=KV_INPUTS,
                      output_names=KV_OUTPUTS, dynamic_axes=axes, dynamo=False)


def resnet_dynamo(path: str | os.PathLike) -> None:
    """A ResNet classifier (2 stages), dynamo export, dynamic batch and image size: its
    flatten is ``Reshape(pool, Concat(Shape(x)[0:1], [C]), allowzero=1)``."""
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    config = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                          num_labels=10)
    model = _ImageLogits(ResNetForImageClassification(config).eval()).eval()
    dyn = torch.export.Dim.DYNAMIC
    torch.onnx.export(model, (torch.randn(2, 3, 64, 64),), str(path),
                      input_names=["pixel_values"], dynamic_shapes=({0: dyn, 2: dyn, 3: dyn},),
                      dynamo=True, optimize=False, external_data=False)


class _ImageLogits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).logits


class _Seq2SeqLogits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          decoder_input_ids=decoder_input_ids, use_cache=False,
                          return_dict=False)[0]


T5_INPUTS = ["input_ids", "attention_mask", "decoder_input_ids"]


def t5_torchscript(path: str | os.PathLike) -> None:
    """A T5 encoder-decoder LM, TorchScript export (opset 17, no exporter folding), dynamic
    batch, source and target lengths: its layer norms' ReduceMean sit in every shape chain."""
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    config = T5Config(vocab_size=VOCAB, d_model=32, d_ff=64, num_layers=2, num_heads=4,
                      d_kv=8, use_cache=False)
    model = _Seq2SeqLogits(T5ForConditionalGeneration(config).eval()).eval()
    args = (torch.randint(0, VOCAB, (2, 8)), torch.ones(2, 8, dtype=torch.long),
            torch.randint(0, VOCAB, (2, 5)))
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
            "decoder_input_ids": {0: "batch", 1: "dec"}}
    torch.onnx.export(model, args, str(path), input_names=T5_INPUTS, dynamic_axes=axes,
                      dynamo=False, do_constant_folding=False, opset_version=17)


def albert_torchscript(path: str | os.PathLike, opset: int) -> None:
    """An ALBERT encoder (layers sharing their weights), TorchScript export at ``opset`` with
    eager attention (no exporter folding), dynamic batch and sequence. Its attention mask is
    ``Reshape(x, Concat(Shape(y)))``: before Reshape-14 onnx infers no rank for it. Untrained,
    its biases are zeros and its norm scales ones: neutral elements to drop."""
    from transformers import AlbertConfig, AlbertModel

    torch.manual_seed(0)
    config = AlbertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=LAYERS,
                          num_attention_heads=HEADS, intermediate_size=64, embedding_size=16,
                          attn_implementation="eager")
    model = _LastHidden(AlbertModel(config).eval()).eval()
    args = (torch.randint(0, VOCAB, (2, 7)), torch.ones(2, 7, dtype=torch.long))
    names = ["input_ids", "attention_mask"]
    torch.onnx.export(model, args, str(path), input_names=names,
                      dynamic_axes={name: {0: "batch", 1: "seq"} for name in names},
                      dynamo=False, do_constant_folding=False, opset_version=opset)


class _BertFeeds:
    """onnxruntime.quantization's CalibrationDataReader protocol: ``count`` batches of random
    token ids and full masks."""

    def __init__(self, batch: int, seq: int, count: int) -> None:
        rng = torch.Generator().manual_seed(1)
        self._batches = iter([
            {"input_ids": torch.randint(0, VOCAB, (batch, seq), generator=rng).numpy(),
             "attention_mask": torch.ones(batch, seq, dtype=torch.long).numpy()}
            for _ in range(count)])

    def get_next(self) -> dict | None:
        return next(self._batches, None)


def bert_static_qdq(path: str | os.PathLike, *, hidden: int = 32, layers: int = LAYERS,
                    heads: int = 2, seq: int = 8) -> None:
    """A float32 BERT encoder (TorchScript, opset 17, dynamic batch and sequence) quantized by
    ``onnxruntime.quantization.quantize_static`` in the QDQ format, as a user ships it for an
    integer CPU kernel or an NPU: every MatMul reads ``DequantizeLinear`` outputs (int8
    weights, uint8 activations) and feeds a ``QuantizeLinear``. Calibrated on 4 random
    batches of ``seq`` tokens."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=2 * hidden,
                        max_position_embeddings=max(64, seq))
    model = _LastHidden(BertModel(config).eval()).eval()
    ids, mask = torch.randint(0, VOCAB, (2, seq)), torch.ones(2, seq, dtype=torch.long)
    axes = {name: {0: "batch", 1: "seq"} for name in ("input_ids", "attention_mask")}
    float_path = f"{os.fspath(path)}.float.onnx"
    with torch.no_grad():
        torch.onnx.export(model, (ids, mask), float_path,
                          input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], dynamic_axes=axes, dynamo=False,
                          opset_version=17)
    try:
        quantize_static(float_path, os.fspath(path), _BertFeeds(2, seq, 4),
                        quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8)
    finally:
        os.remove(float_path)


class _LoraNet(torch.nn.Module):
    """Two Linear layers (2-D input: TorchScript exports them as Gemm) or two Conv2d layers
    (a 3x3 with padding, then a 1x1), for peft's LoRA on each."""

    def __init__(self, conv: bool) -> None:
        super().__init__()
        if conv:
            self.first = torch.nn.Conv2d(4, 8, 3, padding=1)
            self.second = torch.nn.Conv2d(8, 6, 1)
        else:
            self.first = torch.nn.Linear(16, 24)
            self.second = torch.nn.Linear(24, 12)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


class _Wrapped(torch.nn.Module):
    """One positional input (peft's model takes ``*args, **kwargs``)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)


def _peft_net(conv: bool, seed: int = 0):
    """``_LoraNet`` with peft LoRA (rank 4) on both layers, B drawn from ``seed`` (non-zero,
    as a trained adapter's), and an example input."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(_LoraNet(conv), LoraConfig(r=4, lora_alpha=8,
                                                      target_modules=["first", "second"]))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    model = _Wrapped(model.eval()).eval()
    return model, torch.randn(2, 4, 8, 8) if conv else torch.randn(2, 16)


def lora_net(path: str | os.PathLike, conv: bool, dynamo: bool) -> None:
    """``_LoraNet`` with peft LoRA (rank 4, B non-zero) on both layers, exported with the
    adapters' weights as graph inputs (as Olive's ExtractAdapters makes them); dynamic batch."""
    from bench.adapter_models import adapters_as_inputs

    model, x = _peft_net(conv)
    if dynamo:
        program = torch.onnx.export(model, (x,), dynamo=True, optimize=False,
                                    input_names=["x"],
                                    dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
        assert program is not None
        program.save(str(path), external_data=False)
    else:
        torch.onnx.export(model, (x,), str(path), input_names=["x"], dynamo=False,
                          dynamic_axes={"x": {0: "batch"}}, opset_version=17,
                          do_constant_folding=False)
    adapters_as_inputs(Path(path))


def lora_net_as_exported(path: str | os.PathLike, conv: bool, dynamo: bool,
                         seed: int = 0) -> None:
    """``_LoraNet`` with peft LoRA (adapter ``seed``) exported with torch's defaults, the
    LoRA weights inside (dynamo keeps peft's names here; TorchScript's constant folding
    renames a Linear adapter's ``onnx::MatMul_N``): what ``split-adapter`` takes."""
    model, x = _peft_net(conv, seed)
    if dynamo:
        program = torch.onnx.export(model, (x,), dynamo=True, input_names=["x"],
                                    dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
        assert program is not None
        program.save(str(path), external_data=False)
    else:
        torch.onnx.export(model, (x,), str(path), input_names=["x"], dynamo=False,
                          dynamic_axes={"x": {0: "batch"}})
