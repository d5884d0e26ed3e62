"""The export matrix: real exports of transformers models, built from configs with random
weights (fixed seeds, small sizes, nothing downloaded), by both of torch's exporters, as users
export them: KV-cache decoders (mixture-of-experts ones too), encoders, an encoder-decoder,
vision with dynamic height and width, speech, a static-QDQ and a dynamically quantized model,
float16; and small torch models of kinds transformers does not cover: GRU/LSTM encoders, a
VAE-style upsampling decoder, weight-standardized convolutions.

``MATRIX`` maps a name to an :class:`Export`; ``build(name)`` returns the path of its .onnx in
the cache (``$ONNXFOLD_MATRIX_CACHE`` or ``~/.cache/onnxfold-matrix``), exporting it first
unless a file of the same key is there. The key holds the versions of torch, transformers,
onnx and onnxruntime and a hash of the builder's source (the builder, the functions and classes
of ``tests.support`` it reads, its arguments), so a changed builder rebuilds. Builds of one name
are serialized by a lock file (pytest-xdist workers share the cache).

``UNEXPORTABLE`` lists the models of the matrix that torch cannot export here, with the error;
``KNOWN_CHECK_FAILURES`` the exports whose ``optimize --check 3`` fails today for a known
reason of the check's feeds (not of the fold): ``tests/exports/test_check_matrix.py`` makes them
strict xfails, ``python -m tools.check_matrix`` marks them ``known``.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib.metadata
import inspect
import io
import os
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import breadth, fresh_exports, held_out_exports, peer_gap_exports
from tests.support.export_models import (
    _Decoder,
    _ImageLogits,
    _LastHidden,
    _Seq2SeqLogits,
    bert_float16,
    bert_static_qdq,
    qwen2_float16,
    qwen2_kv_cache,
    resnet_dynamo,
    t5_torchscript,
)

LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 2, 4, 2, 8, 100
HIDDEN = HEADS * HEAD_DIM
PAST, SEQ = 3, 5  # the example lengths of a decoding step (every dim dynamic)


@dataclass(frozen=True)
class Export:
    what: str  # the model, for the table
    exporter: str  # "dynamo" (optimize=False), "dynamo-opt" (the exporter's optimize=True),
    # "torchscript" (opset 17, do_constant_folding=False), or how the file was made
    build: Callable[[Path], None]  # writes the .onnx at the path


# -- wrappers and helpers ------------------------------------------------------------------------


def _dyn() -> Any:
    import torch

    return torch.export.Dim.DYNAMIC


def _export(model: Any, args: tuple, path: Path, names: list[str], *, dynamo: bool,
            axes: dict[str, dict[int, str]], outputs: list[str] | None = None,
            optimize: bool = False) -> None:
    """torch.onnx.export with the dims of ``axes`` dynamic: dynamic_shapes (positional, one
    Dim.DYNAMIC per named axis) for dynamo, dynamic_axes for TorchScript."""
    import torch

    with torch.no_grad():
        if dynamo:
            shapes = tuple({axis: _dyn() for axis in axes.get(name, {})} or None
                           for name in names)
            torch.onnx.export(model, args, str(path), input_names=names, output_names=outputs,
                              dynamic_shapes=shapes, dynamo=True, optimize=optimize,
                              external_data=False)
        else:
            torch.onnx.export(model, args, str(path), input_names=names, output_names=outputs,
                              dynamic_axes=axes, dynamo=False, do_constant_folding=False,
                              opset_version=17)


KV_NAMES = ["input_ids", "attention_mask"] + [
    f"past_key_values.{i}.{kind}" for i in range(LAYERS) for kind in ("key", "value")]
KV_OUTPUTS = ["logits"] + [f"present.{i}.{kind}" for i in range(LAYERS)
                           for kind in ("key", "value")]


def _kv_decoder(model: Any, path: Path, dynamo: bool, kv_heads: int = KV_HEADS,
                head_dim: int = HEAD_DIM, optimize: bool = False) -> None:
    """A decoding step of ``model`` (a causal LM, LAYERS layers): input ids, a mask of past +
    sequence, the past keys and values of every layer in; logits and the present out. Batch,
    sequence, past and total lengths dynamic."""
    import torch

    wrapped = _Decoder(model.eval()).eval()
    ids = torch.randint(0, VOCAB, (2, SEQ))
    mask = torch.ones(2, PAST + SEQ, dtype=torch.long)
    cache = [torch.randn(2, kv_heads, PAST, head_dim) for _ in range(2 * LAYERS)]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"}}
    axes.update({name: {0: "batch", 2: "past"} for name in KV_NAMES[2:]})
    _export(wrapped, (ids, mask, *cache), path, KV_NAMES, dynamo=dynamo, axes=axes,
            outputs=KV_OUTPUTS, optimize=optimize)


def _causal_lm(kind: str) -> Any:
    """A small causal LM of the family ``kind`` (random weights, seed 0)."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    common = {"vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": 64,
              "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "num_key_value_heads": KV_HEADS, "max_position_embeddings": 64,
              "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "use_cache": True}
    if kind == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(**common))
    if kind == "mistral":
        return tf.MistralForCausalLM(tf.MistralConfig(**common, sliding_window=None))
    if kind == "phi3":
        return tf.Phi3ForCausalLM(tf.Phi3Config(**common))
    if kind == "gemma":
        return tf.GemmaForCausalLM(tf.GemmaConfig(**common, head_dim=HEAD_DIM))
    if kind == "qwen2":
        return tf.Qwen2ForCausalLM(tf.Qwen2Config(**common))
    raise ValueError(kind)


def causal_kv(path: Path, kind: str, dynamo: bool, optimize: bool = False) -> None:
    """A KV-cache decoding step of a causal LM: Llama (GQA, 4 heads / 2 key-value heads),
    Mistral, Phi-3, Gemma, Qwen2; hidden 32, 2 layers, vocabulary 100."""
    _kv_decoder(_causal_lm(kind), path, dynamo, optimize=optimize)


def gpt2_kv(path: Path, dynamo: bool) -> None:
    """GPT-2 (learned position table of 64) decoding step with a KV cache."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                        n_positions=64, use_cache=True)
    _kv_decoder(GPT2LMHeadModel(config), path, dynamo, kv_heads=HEADS)


class _WhisperDecoderStep(_Decoder):
    """A Whisper decoding step: decoder ids, the encoder's states and the self-attention's past
    keys/values in; logits and the self-attention's present out."""

    def forward(self, input_ids, encoder_hidden_states, k0, v0, k1, v1):
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        for layer, (k, v) in enumerate(((k0, v0), (k1, v1))):
            cache.self_attention_cache.update(k, v, layer)
        out = self.model(encoder_outputs=(encoder_hidden_states,), decoder_input_ids=input_ids,
                         past_key_values=cache, use_cache=True)
        present = [t for layer in out.past_key_values.self_attention_cache.layers
                   for t in (layer.keys, layer.values)]
        return (out.logits, *present)


def _whisper_config() -> Any:
    from transformers import WhisperConfig

    return WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, d_model=HIDDEN, encoder_layers=LAYERS,
                         decoder_layers=LAYERS, encoder_attention_heads=HEADS,
                         decoder_attention_heads=HEADS, encoder_ffn_dim=64, decoder_ffn_dim=64,
                         max_source_positions=16, max_target_positions=64, pad_token_id=0,
                         bos_token_id=1, eos_token_id=2, decoder_start_token_id=3,
                         use_cache=True)


def whisper_decoder_kv(path: Path, dynamo: bool) -> None:
    """Whisper's decoder (with its LM projection), a decoding step with a self-attention KV
    cache; batch, sequence, past and the encoder's length dynamic."""
    import torch
    from transformers import WhisperForConditionalGeneration

    torch.manual_seed(0)
    model = _WhisperDecoderStep(WhisperForConditionalGeneration(_whisper_config()).eval())
    names = ["input_ids", "encoder_hidden_states", *KV_NAMES[2:]]
    ids = torch.randint(0, VOCAB, (2, SEQ))
    states = torch.randn(2, 16, HIDDEN)
    cache = [torch.randn(2, HEADS, PAST, HEAD_DIM) for _ in range(2 * LAYERS)]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "encoder_hidden_states": {0: "batch", 1: "enc"}}
    axes.update({name: {0: "batch", 2: "past"} for name in KV_NAMES[2:]})
    _export(model.eval(), (ids, states, *cache), path, names, dynamo=dynamo, axes=axes,
            outputs=KV_OUTPUTS)


class _Hidden(_LastHidden):
    """An encoder's last hidden state from its ids and mask (no token type ids)."""


class _TextStates(_LastHidden):
    """A text encoder's last hidden state and pooled output."""

    def forward(self, input_ids, attention_mask):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        return out.last_hidden_state, out.pooler_output


def _text_encoder(kind: str) -> Any:
    import torch
    import transformers as tf

    torch.manual_seed(0)
    if kind == "bert":
        return _Hidden(tf.BertModel(tf.BertConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, intermediate_size=64, max_position_embeddings=64)))
    if kind == "distilbert":
        return _Hidden(tf.DistilBertModel(tf.DistilBertConfig(
            vocab_size=VOCAB, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=64,
            max_position_embeddings=64, pad_token_id=0)))
    if kind == "clip_text":
        return _TextStates(tf.CLIPTextModel(tf.CLIPTextConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, intermediate_size=64, max_position_embeddings=64,
            pad_token_id=0, bos_token_id=1, eos_token_id=2)))
    raise ValueError(kind)


def text_encoder(path: Path, kind: str, dynamo: bool) -> None:
    """BERT, DistilBERT or CLIP's text tower: ids and mask in, dynamic batch and sequence."""
    import torch

    model = _text_encoder(kind).eval()
    args = (torch.randint(0, VOCAB, (2, 8)), torch.ones(2, 8, dtype=torch.long))
    names = ["input_ids", "attention_mask"]
    _export(model, args, path, names, dynamo=dynamo,
            axes={name: {0: "batch", 1: "seq"} for name in names})


def bart(path: Path, dynamo: bool) -> None:
    """A BART encoder-decoder LM, no cache: dynamic batch, source and target lengths."""
    import torch
    from transformers import BartConfig, BartForConditionalGeneration

    torch.manual_seed(0)
    config = BartConfig(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS,
                        decoder_layers=LAYERS, encoder_attention_heads=HEADS,
                        decoder_attention_heads=HEADS, encoder_ffn_dim=64, decoder_ffn_dim=64,
                        max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
                        eos_token_id=2, decoder_start_token_id=2, use_cache=False)
    model = _Seq2SeqLogits(BartForConditionalGeneration(config).eval()).eval()
    args = (torch.randint(3, VOCAB, (2, 8)), torch.ones(2, 8, dtype=torch.long),
            torch.randint(3, VOCAB, (2, 5)))
    names = ["input_ids", "attention_mask", "decoder_input_ids"]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
            "decoder_input_ids": {0: "batch", 1: "dec"}}
    _export(model, args, path, names, dynamo=dynamo, axes=axes)


class _Pixels(_ImageLogits):
    """A vision model's last hidden state, its position table interpolated to the image."""

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values,
                          interpolate_pos_encoding=True).last_hidden_state


def _vision(kind: str) -> Any:
    import torch
    import transformers as tf

    torch.manual_seed(0)
    sizes = {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
             "intermediate_size": 64, "image_size": 32, "patch_size": 8}
    if kind == "vit":
        return _Pixels(tf.ViTModel(tf.ViTConfig(**sizes), add_pooling_layer=False))
    if kind == "clip_vision":
        return _Pixels(tf.CLIPVisionModel(tf.CLIPVisionConfig(**sizes)))
    if kind == "yolos":
        return _ImageLogits(tf.YolosForObjectDetection(tf.YolosConfig(
            **{**sizes, "image_size": [32, 32]}, num_detection_tokens=4, num_labels=3)))
    if kind == "resnet":
        return _ImageLogits(tf.ResNetForImageClassification(tf.ResNetConfig(
            embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10)))
    raise ValueError(kind)


def vision(path: Path, kind: str, dynamo: bool) -> None:
    """ViT, YOLOS, CLIP's vision tower or a ResNet: dynamic batch, height and width (the
    example image is 48 x 64; the transformers' position tables are interpolated)."""
    import torch

    model = _vision(kind).eval()
    _export(model, (torch.randn(2, 3, 48, 64),), path, ["pixel_values"], dynamo=dynamo,
            axes={"pixel_values": {0: "batch", 2: "height", 3: "width"}})


class _Audio(_ImageLogits):
    def forward(self, input_values):
        return self.model(input_values).last_hidden_state


def wav2vec2(path: Path, dynamo: bool) -> None:
    """Wav2Vec2 (convolutional feature encoder, positional conv, 2 layers): dynamic batch and
    number of samples."""
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    torch.manual_seed(0)
    config = Wav2Vec2Config(hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                            num_attention_heads=HEADS, intermediate_size=64,
                            conv_dim=(16, 16, 16), conv_stride=(5, 2, 2),
                            conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                            num_conv_pos_embedding_groups=2, vocab_size=VOCAB)
    model = _Audio(Wav2Vec2Model(config).eval()).eval()
    _export(model, (torch.randn(2, 1600),), path, ["input_values"], dynamo=dynamo,
            axes={"input_values": {0: "batch", 1: "samples"}})


def whisper_encoder(path: Path, dynamo: bool, dynamic_frames: bool = False) -> None:
    """Whisper's encoder: 16 mel bins x 32 frames (it accepts only 2 x max_source_positions
    frames), dynamic batch (and frames when ``dynamic_frames``: not exportable)."""
    import torch
    from transformers import WhisperForConditionalGeneration

    torch.manual_seed(0)
    encoder = WhisperForConditionalGeneration(_whisper_config()).eval().get_encoder()
    model = _Audio(encoder).eval()
    _export(model, (torch.randn(2, 16, 32),), path, ["input_features"], dynamo=dynamo,
            axes={"input_features": {0: "batch", 2: "frames"} if dynamic_frames
                  else {0: "batch"}})


def bert_dynamic_quant(path: Path) -> None:
    """A TorchScript BERT (dynamic batch and sequence; the exporter's constant folding on, as
    before a quantization: a weight must be an initializer to be quantized) quantized by
    onnxruntime's ``quantize_dynamic``: int8 weights, MatMulInteger and DynamicQuantizeLinear."""
    import onnx
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = _text_encoder("bert").eval()
    args = (torch.randint(0, VOCAB, (2, 8)), torch.ones(2, 8, dtype=torch.long))
    names = ["input_ids", "attention_mask"]
    float_path = Path(f"{path}.float.onnx")
    try:
        with torch.no_grad():
            torch.onnx.export(model, args, str(float_path), input_names=names,
                              dynamic_axes={name: {0: "batch", 1: "seq"} for name in names},
                              dynamo=False, opset_version=17)
        quantize_dynamic(str(float_path), str(path), weight_type=QuantType.QInt8)
    finally:
        float_path.unlink(missing_ok=True)
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    if ops.count("MatMulInteger") < 6 * LAYERS:
        raise RuntimeError(f"quantize_dynamic quantized {ops.count('MatMulInteger')} MatMuls")


def bert_float16_torchscript(path: Path) -> None:
    """A ``model.half()`` BERT, TorchScript export, dynamic batch and sequence."""
    import torch

    model = _text_encoder("bert").half().eval()
    args = (torch.randint(0, VOCAB, (2, 8)), torch.ones(2, 8, dtype=torch.long))
    names = ["input_ids", "attention_mask"]
    _export(model, args, path, names, dynamo=False,
            axes={name: {0: "batch", 1: "seq"} for name in names})


def _moe_lm(kind: str) -> Any:
    """A small mixture-of-experts causal LM (4 experts, 2 per token; the experts computed by
    transformers' ``batched_mm``, which torch.export can trace): Mixtral, OLMoE, Qwen2-MoE
    (with its shared expert)."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    common = {"vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": 64,
              "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "num_key_value_heads": KV_HEADS, "max_position_embeddings": 64,
              "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "use_cache": True,
              "experts_implementation": "batched_mm"}
    if kind == "mixtral":
        return tf.MixtralForCausalLM(tf.MixtralConfig(
            **common, num_local_experts=4, num_experts_per_tok=2, sliding_window=None))
    if kind == "olmoe":
        return tf.OlmoeForCausalLM(tf.OlmoeConfig(**common, num_experts=4,
                                                  num_experts_per_tok=2))
    if kind == "qwen2_moe":
        return tf.Qwen2MoeForCausalLM(tf.Qwen2MoeConfig(
            **common, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=64))
    raise ValueError(kind)


def moe_kv(path: Path, kind: str, dynamo: bool, optimize: bool = False) -> None:
    """A KV-cache decoding step of a mixture-of-experts LM: the router's Softmax -> TopK, the
    chosen experts' weights gathered per token."""
    _kv_decoder(_moe_lm(kind), path, dynamo, optimize=optimize)


def recurrent_encoder(path: Path, kind: str, dynamo: bool) -> None:
    """Linear -> a 2-layer bidirectional GRU or LSTM started from ``torch.zeros(4, batch,
    32)`` -> Linear, batch first: dynamic batch and sequence."""
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Linear(16, 32)
            recurrent = torch.nn.GRU if kind == "gru" else torch.nn.LSTM
            self.rnn = recurrent(32, 32, num_layers=2, batch_first=True, bidirectional=True)
            self.head = torch.nn.Linear(64, 8)

        def forward(self, x):
            h0 = torch.zeros(4, x.size(0), 32)
            state = h0 if kind == "gru" else (h0, torch.zeros(4, x.size(0), 32))
            return self.head(self.rnn(self.embed(x), state)[0])

    _export(Encoder().eval(), (torch.randn(2, 7, 16),), path, ["x"], dynamo=dynamo,
            axes={"x": {0: "batch", 1: "seq"}})


def upsample_decoder(path: Path, dynamo: bool) -> None:
    """A VAE-style decoder (diffusers' blocks in plain torch): Conv -> GroupNorm -> SiLU ->
    Conv -> nearest upsampling x2 -> GroupNorm -> SiLU -> Conv, from a 4-channel latent:
    dynamic batch, height and width."""
    import torch

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv_in = torch.nn.Conv2d(4, 32, 3, padding=1)
            self.norm = torch.nn.GroupNorm(8, 32)
            self.conv = torch.nn.Conv2d(32, 32, 3, padding=1)
            self.norm_out = torch.nn.GroupNorm(8, 32)
            self.conv_out = torch.nn.Conv2d(32, 3, 3, padding=1)

        def forward(self, z):
            h = self.conv(torch.nn.functional.silu(self.norm(self.conv_in(z))))
            h = torch.nn.functional.interpolate(h, scale_factor=2.0, mode="nearest")
            return self.conv_out(torch.nn.functional.silu(self.norm_out(h)))

    _export(Decoder().eval(), (torch.randn(1, 4, 8, 8),), path, ["z"], dynamo=dynamo,
            axes={"z": {0: "batch", 2: "height", 3: "width"}})


def weight_standardized(path: Path, form: str, dynamo: bool) -> None:
    """Weight-standardized convolutions (BiT's StdConv2d; issue 67): Conv 3->16 7x7, ReLU,
    Conv 16->32 3x3, no bias, each weight standardized per output channel as it is read.
    ``batch_norm``: by a training-mode ``F.batch_norm`` over the weight's rows (TorchScript
    writes a training-mode BatchNormalization, dynamo its ReduceMean/Sub/Mul decomposition);
    ``mean_var``: ``(w - mean) / sqrt(var + eps)`` written out (ReduceMean, Sub, Sqrt, Div).
    The standardized weights near zero carry large relative errors that the convolutions'
    sums cancel. Dynamic batch, 32 x 32 images."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    class StdConv(torch.nn.Conv2d):
        def forward(self, x):
            if form == "batch_norm":
                w = F.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None,
                                 training=True, momentum=0.0, eps=1e-8).reshape_as(self.weight)
            else:
                mean = self.weight.mean(dim=(1, 2, 3), keepdim=True)
                var = ((self.weight - mean) ** 2).mean(dim=(1, 2, 3), keepdim=True)
                w = (self.weight - mean) / torch.sqrt(var + 1e-8)
            return F.conv2d(x, w, self.bias, self.stride, self.padding)

    model = torch.nn.Sequential(StdConv(3, 16, 7, padding=3, bias=False), torch.nn.ReLU(),
                                StdConv(16, 32, 3, padding=1, bias=False)).eval()
    _export(model, (torch.randn(2, 3, 32, 32),), path, ["x"], dynamo=dynamo,
            axes={"x": {0: "batch"}, "y": {0: "batch"}}, outputs=["y"])


def _seeded(builder: Callable[..., None], *args: Any, **kwargs: Any) -> Callable[[Path], None]:
    """``builder(path, *args, **kwargs)`` after seeding torch (the builders of export_models
    seed themselves)."""
    return functools.partial(_run_seeded, builder, args, kwargs)


def _run_seeded(builder: Callable[..., None], args: tuple, kwargs: dict, path: Path) -> None:
    import torch

    torch.manual_seed(0)
    builder(path, *args, **kwargs)


# -- the matrix ---------------------------------------------------------------------------------

_DECODERS = {"llama": "Llama, GQA (4 heads, 2 KV heads)", "mistral": "Mistral",
             "phi3": "Phi-3", "gemma": "Gemma", "qwen2": "Qwen2"}

ENTRIES: dict[str, Export] = {}
for _kind, _what in _DECODERS.items():
    ENTRIES[f"{_kind}_kv_dynamo"] = Export(f"{_what} decoder, KV cache", "dynamo",
                                           _seeded(causal_kv, _kind, True))
    ENTRIES[f"{_kind}_kv_torchscript"] = Export(f"{_what} decoder, KV cache", "torchscript",
                                                _seeded(causal_kv, _kind, False))
ENTRIES.update({
    "llama_kv_dynamo_opt": Export("Llama, GQA decoder, KV cache", "dynamo-opt",
                                  _seeded(causal_kv, "llama", True, optimize=True)),
    "gpt2_kv_dynamo": Export("GPT-2 decoder, KV cache", "dynamo", _seeded(gpt2_kv, True)),
    "gpt2_kv_torchscript": Export("GPT-2 decoder, KV cache", "torchscript",
                                  _seeded(gpt2_kv, False)),
    "whisper_decoder_kv_dynamo": Export("Whisper decoder, self-attention KV cache", "dynamo",
                                        _seeded(whisper_decoder_kv, True)),
    "whisper_decoder_kv_torchscript": Export("Whisper decoder, self-attention KV cache",
                                             "torchscript", _seeded(whisper_decoder_kv, False)),
    "bert_dynamo": Export("BERT encoder", "dynamo", _seeded(text_encoder, "bert", True)),
    "bert_torchscript": Export("BERT encoder", "torchscript",
                               _seeded(text_encoder, "bert", False)),
    "distilbert_dynamo": Export("DistilBERT encoder", "dynamo",
                                _seeded(text_encoder, "distilbert", True)),
    "distilbert_torchscript": Export("DistilBERT encoder", "torchscript",
                                     _seeded(text_encoder, "distilbert", False)),
    "clip_text_dynamo": Export("CLIP text encoder (+ pooled)", "dynamo",
                               _seeded(text_encoder, "clip_text", True)),
    "t5_torchscript": Export("T5 encoder-decoder LM, no cache", "torchscript",
                             _seeded(t5_torchscript)),
    "bart_dynamo": Export("BART encoder-decoder LM, no cache", "dynamo", _seeded(bart, True)),
    "resnet_dynamo": Export("ResNet classifier, dynamic H/W", "dynamo",
                            _seeded(resnet_dynamo)),
    "resnet_torchscript": Export("ResNet classifier, dynamic H/W", "torchscript",
                                 _seeded(vision, "resnet", False)),
    "vit_dynamo": Export("ViT, dynamic H/W (interpolated positions)", "dynamo",
                         _seeded(vision, "vit", True)),
    "yolos_dynamo": Export("YOLOS detector, dynamic H/W", "dynamo",
                           _seeded(vision, "yolos", True)),
    "clip_vision_dynamo": Export("CLIP vision encoder, dynamic H/W", "dynamo",
                                 _seeded(vision, "clip_vision", True)),
    "wav2vec2_dynamo": Export("Wav2Vec2, dynamic samples", "dynamo", _seeded(wav2vec2, True)),
    "wav2vec2_torchscript": Export("Wav2Vec2, dynamic samples", "torchscript",
                                   _seeded(wav2vec2, False)),
    "whisper_encoder_dynamo": Export("Whisper encoder, dynamic batch", "dynamo",
                                     _seeded(whisper_encoder, True)),
    "whisper_encoder_frames_dynamo": Export("Whisper encoder, dynamic batch and frames",
                                            "dynamo", _seeded(whisper_encoder, True, True)),
    "bert_static_qdq": Export("BERT, quantize_static QDQ (TorchScript)", "quantize_static",
                              _seeded(bert_static_qdq)),
    "bert_dynamic_quant": Export("BERT, quantize_dynamic (TorchScript)", "quantize_dynamic",
                                 _seeded(bert_dynamic_quant)),
    "bert_float16_dynamo": Export("BERT, model.half()", "dynamo-opt", _seeded(bert_float16)),
    "bert_float16_torchscript": Export("BERT, model.half()", "torchscript",
                                       _seeded(bert_float16_torchscript)),
    "qwen2_float16_dynamo": Export("Qwen2 decoder, model.half(), no cache", "dynamo-opt",
                                   _seeded(qwen2_float16)),
    "qwen2_kv_dynamo_opt": Export("Qwen2 decoder, KV cache", "dynamo-opt",
                                  _seeded(qwen2_kv_cache, dynamo=True)),
    "mixtral_kv_dynamo": Export("Mixtral (4 experts, top 2) decoder, KV cache", "dynamo",
                                _seeded(moe_kv, "mixtral", True)),
    "olmoe_kv_torchscript": Export("OLMoE (4 experts, top 2) decoder, KV cache",
                                   "torchscript", _seeded(moe_kv, "olmoe", False)),
    "qwen2_moe_kv_dynamo_opt": Export("Qwen2-MoE (4 experts + shared) decoder, KV cache",
                                      "dynamo-opt", _seeded(moe_kv, "qwen2_moe", True,
                                                            optimize=True)),
    "gru_encoder_torchscript": Export("bidirectional GRU encoder, zero initial state",
                                      "torchscript", _seeded(recurrent_encoder, "gru", False)),
    "lstm_encoder_dynamo": Export("bidirectional LSTM encoder, zero initial states", "dynamo",
                                  _seeded(recurrent_encoder, "lstm", True)),
    "upsample_decoder_dynamo": Export("VAE-style decoder (GroupNorm, nearest x2), dynamic H/W",
                                      "dynamo", _seeded(upsample_decoder, True)),
    **{f"stdconv_{form}_{tag}": Export(f"weight-standardized convolutions ({what})", tag,
                                       _seeded(weight_standardized, form, tag == "dynamo"))
       for form, what in (("batch_norm", "training-mode batch_norm"),
                          ("mean_var", "mean and variance written out"))
       for tag in ("dynamo", "torchscript")},
})

def transformers_exporter(path: Path, family: str, fused: bool) -> None:
    """transformers' own ONNX exporter (``transformers.exporters.exporter_onnx``, the path a
    transformers user now takes to ONNX), dynamic dims, with onnxruntime's CPU fusions
    (``SkipLayerNormalization``, ``BiasGelu`` of com.microsoft) or without: a BERT encoder,
    or a Llama decoder with a KV cache of 5 steps. Saved as one file (the exporter writes a
    directory, weights apart)."""
    import tempfile

    import onnx
    import torch
    import transformers as tf
    from transformers.exporters.exporter_onnx import OnnxConfig, OnnxExporter

    if family == "bert":
        model: Any = tf.BertModel(tf.BertConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, intermediate_size=2 * HIDDEN)).eval()
        inputs: dict[str, Any] = {"input_ids": torch.randint(0, VOCAB, (2, 8)),
                                  "attention_mask": torch.ones(2, 8, dtype=torch.long)}
    else:
        config = tf.LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                                intermediate_size=2 * HIDDEN)
        model = tf.LlamaForCausalLM(config).eval()
        cache = tf.cache_utils.DynamicCache(config=config)
        for layer in range(LAYERS):
            cache.update(torch.randn(2, KV_HEADS, 5, HEAD_DIM),
                         torch.randn(2, KV_HEADS, 5, HEAD_DIM), layer)
        inputs = {"input_ids": torch.randint(0, VOCAB, (2, 3)),
                  "attention_mask": torch.ones(2, 8, dtype=torch.long),
                  "past_key_values": cache, "use_cache": True}
    exported = OnnxExporter().export(model, inputs, config=OnnxConfig(
        dynamic=True, ort_fusions="cpu" if fused else None))
    with tempfile.TemporaryDirectory() as directory:
        exported.save_pretrained(directory)
        (written,) = Path(directory).glob("*.onnx")
        onnx.save(onnx.load(str(written)), str(path))


for _family, _what in (("bert", "BERT encoder"), ("llama", "Llama decoder, KV cache")):
    ENTRIES[f"{_family}_tf_exporter"] = Export(
        f"{_what}, transformers' exporter", "transformers", _seeded(
            transformers_exporter, _family, False))
    ENTRIES[f"{_family}_tf_exporter_fused"] = Export(
        f"{_what}, transformers' exporter with onnxruntime fusions", "transformers",
        _seeded(transformers_exporter, _family, True))

# name -> the error of the export, or of onnxruntime loading it, on this torch/transformers
# (tests/exports/test_check_matrix.py checks that it still fails with it)
UNEXPORTABLE: dict[str, str] = {
    # the TorchScript exporter writes a model.half() BERT's LayerNormalization with a float16
    # input and float32 scale
    "bert_float16_torchscript": (
        "Type Error: Type parameter (T) of Optype (LayerNormalization) bound to different types "
        "(tensor(float) and tensor(float16) in node (/model/encoder/layer.0/attention/output/"
        "LayerNorm/LayerNormalization)"),
    # WhisperEncoder raises unless the input has exactly 2 x max_source_positions frames
    "whisper_encoder_frames_dynamo": (
        "Received user-specified dim hint Dim.DYNAMIC(min=None, max=None), but tracing "
        "inferred a static shape of 32 for dimension inputs['input_values'].shape[2]."),
}

# name -> a line of ``optimize --check 3``'s output that says why it fails today: the check's
# feeds (guessed dims and integer ranges), not the fold. The test tier makes them strict
# xfails, so an entry must go when a fix of the feeds lands.
KNOWN_CHECK_FAILURES: dict[str, str] = {}

MATRIX: dict[str, Export] = {n: e for n, e in ENTRIES.items() if n not in UNEXPORTABLE}

# one export of each family the check knows: KV-cache decoders of both exporters,
# mixture-of-experts, encoders, encoder-decoders, vision, speech, quantized, float16, recurrent
# and upsampling models, transformers' own exporter. The tiers that run several checks per
# export (planted folds, stages) run on these; ``python -m tools.check_matrix --mutations
# --stages`` runs every export
FAMILY_REPRESENTATIVES = [
    "llama_kv_dynamo", "llama_kv_torchscript", "gpt2_kv_torchscript", "mixtral_kv_dynamo",
    "olmoe_kv_torchscript", "qwen2_float16_dynamo", "whisper_decoder_kv_torchscript",
    "bert_torchscript", "t5_torchscript", "bart_dynamo", "resnet_dynamo", "vit_dynamo",
    "wav2vec2_dynamo", "bert_static_qdq", "bert_dynamic_quant", "lstm_encoder_dynamo",
    "gru_encoder_torchscript", "upsample_decoder_dynamo", "stdconv_batch_norm_dynamo",
    "llama_tf_exporter_fused"]

# The exports CI builds and runs (tests/support/breadth.py): both exporters, GQA and GPT-2
# decoders with a KV cache, mixture-of-experts, encoders, an encoder-decoder, vision with
# dynamic H/W, static QDQ, float16 and convolutional models (speech, recurrent, dynamically
# quantized and the other decoders in the breadth tier); every one cheap to build (the
# TorchScript exports take a few seconds, these dynamo ones 13-30 s, the rest of the matrix up
# to 62 s). A test parametrized over matrix exports runs the others only in the breadth tier
# (``--breadth``).
CORE = frozenset({
    "llama_kv_dynamo", "llama_kv_torchscript", "gpt2_kv_torchscript", "olmoe_kv_torchscript",
    "bert_torchscript", "bert_dynamo", "t5_torchscript", "vit_dynamo", "bert_static_qdq",
    "bert_float16_dynamo", "upsample_decoder_dynamo", "stdconv_batch_norm_torchscript"})


# The core of the checks that plant wrong folds (whole and in stages) and of the staged
# verdict: a decoder of each exporter, an encoder, QDQ and vision; the whole check with the
# defaults runs on all of CORE (its planted fold costs a second check: 53 s on a MoE decoder)
PLANTED_CORE = frozenset({
    "llama_kv_torchscript", "gpt2_kv_torchscript", "llama_kv_dynamo", "bert_torchscript",
    "bert_static_qdq", "vit_dynamo"})


def families(cases: Iterable[Any], name: Callable[[Any], str] = lambda case: case,
             core: frozenset[str] = CORE) -> list:
    """Test parameters over matrix exports (``name`` of a case: its export): the ``core``'s
    in CI, the others' in the breadth tier. An export outside the matrix (a regression export
    of its own) stays in CI."""
    return breadth.over(cases, lambda case: name(case) in core or name(case) not in MATRIX)


# The held-out exports (tests/support/held_out_exports.py): in ENTRIES (built and cached like
# the rest), in no test; ``python -m tools.check_matrix --held-out`` runs them.
HELD_OUT: dict[str, Export] = {
    f"{stem}_{tag}": Export(what, exporter, _seeded(builder, kind, exporter == "dynamo"))
    for stem, (what, builder, kind) in held_out_exports.FAMILIES.items()
    for tag, exporter in (("dynamo", "dynamo"), ("torchscript", "torchscript"))}
ENTRIES.update(HELD_OUT)

# The fresh exports (tests/support/fresh_exports.py): a second control set of families neither
# the matrix nor the held-out set has, in ENTRIES, in no test; ``python -m tools.check_matrix
# --fresh`` runs them. FRESH_UNEXPORTABLE: those torch cannot export usably here, with the
# error (``--only`` still builds them: do they export now?).
_FRESH_ALL: dict[str, Export] = {
    f"{stem}_{tag}": Export(what, exporter, _seeded(builder, kind, exporter == "dynamo"))
    for stem, (what, builder, kind) in fresh_exports.FAMILIES.items()
    for tag, exporter in (("dynamo", "dynamo"), ("torchscript", "torchscript"))}
if set(_FRESH_ALL) & set(ENTRIES):
    raise RuntimeError(f"fresh exports already in the matrix: {set(_FRESH_ALL) & set(ENTRIES)}")
FRESH_UNEXPORTABLE: dict[str, str] = {
    # the TorchScript exporter's aten::unfold with a negative dimension (the patchifier's
    # unfold(-2, ...)) slices the wrong axis: onnxruntime refuses the model
    "patchtst_torchscript": (
        "Node (/model/model/encoder/positional_encoder/Add) Op (Add) [ShapeInferenceError] "
        "Incompatible dimensions"),
    "patchtsmixer_torchscript": (
        "Node (/model/model/encoder/mlp_mixer_encoder/mixers.0/patch_mixer/mlp/fc1/MatMul) Op "
        "(MatMul) [ShapeInferenceError] Incompatible dimensions for matrix multiplication"),
}
FRESH: dict[str, Export] = {n: e for n, e in _FRESH_ALL.items() if n not in FRESH_UNEXPORTABLE}
ENTRIES.update(_FRESH_ALL)


def mobilebert(path: Path, dynamo: bool) -> None:
    """MobileBERT (bottlenecks, NoNorm) declaring its output ``out [batch, seq, 64]``: a fold
    once wrote ``[unk__17, unk__18, 64]`` (issue 55; tests/exports/test_interface_on_exports.py)."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    model = _Hidden(tf.MobileBertModel(tf.MobileBertConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=64, embedding_size=32, intra_bottleneck_size=32,
        max_position_embeddings=64, num_feedforward_networks=2))).eval()
    names = ["input_ids", "attention_mask"]
    args = (torch.randint(0, VOCAB, (2, 8)), torch.ones(2, 8, dtype=torch.long))
    _export(model, args, path, names, dynamo=dynamo, outputs=["out"],
            axes={name: {0: "batch", 1: "seq"} for name in [*names, "out"]})


# in ENTRIES (built and cached like the rest) for the tests that name it, in no matrix
ENTRIES["mobilebert_out_torchscript"] = Export("MobileBERT encoder, named output", "torchscript",
                                               _seeded(mobilebert, False))


# The exports of issue 56's node gaps (tests/support/peer_gap_exports.py): in ENTRIES, held to
# their node counts by tests/exports/test_peer_gaps.py.
GAPS: dict[str, Export] = {
    "mobilebert_torchscript": Export("MobileBERT encoder (trigram embedding)", "torchscript",
                                     _seeded(peer_gap_exports.mobilebert, False)),
    "fnet_dynamo": Export("FNet encoder (Fourier mixing)", "dynamo",
                          _seeded(peer_gap_exports.fnet, True)),
}
ENTRIES.update(GAPS)


# -- the cache ----------------------------------------------------------------------------------


def default_cache() -> Path:
    env = os.environ.get("ONNXFOLD_MATRIX_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "onnxfold-matrix"


_OWN = ("tests.support.",)


def _referenced(obj: Any) -> list[Any]:
    """The functions, classes and constants of ``tests.support`` modules that ``obj``'s source
    names (its module's globals)."""
    module = sys.modules[obj.__module__]
    names = {node.id for node in ast.walk(ast.parse(_dedented(obj))) if isinstance(node, ast.Name)}
    found = []
    for name in sorted(names):
        value = getattr(module, name, None)
        if (inspect.isfunction(value) or inspect.isclass(value)) and \
                value.__module__.startswith(_OWN):
            found.append(value)
        elif isinstance(value, int | str | float | tuple | list) and name.isupper():
            found.append((f"{module.__name__}.{name}", repr(value)))
    return found


def _dedented(obj: Any) -> str:
    import textwrap

    return textwrap.dedent(inspect.getsource(obj))


def source_parts(builder: Callable[[Path], None]) -> dict[str, str]:
    """``builder``'s source by qualified name: the function (a partial's function and
    arguments) and every function, class and upper-case constant of ``tests.support`` it
    reaches."""
    parts: dict[str, str] = {}
    stack: list[Any] = [builder]
    while stack:
        obj = stack.pop()
        if isinstance(obj, functools.partial):
            parts[f"partial {obj.func.__qualname__}"] = repr((obj.args[1:], obj.keywords))
            stack += [obj.func, obj.args[0]]
            continue
        if isinstance(obj, tuple):
            parts[obj[0]] = obj[1]
            continue
        key = f"{obj.__module__}.{obj.__qualname__}"
        if key in parts:
            continue
        parts[key] = _dedented(obj)
        stack += _referenced(obj)
    return parts


def source_hash(builder: Callable[[Path], None]) -> str:
    """A hash of :func:`source_parts`: a changed builder, or anything of ``tests.support`` it
    reads, changes it."""
    parts = source_parts(builder)
    digest = hashlib.sha256()
    for key in sorted(parts):
        digest.update(f"{key}\n{parts[key]}\n".encode())
    return digest.hexdigest()


def versions() -> str:
    found = []
    for dist in ("torch", "transformers", "onnx", "onnxruntime", "onnxscript"):
        try:
            found.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{dist} -")
    return ", ".join(found)


def cache_key(name: str) -> str:
    """What an export depends on: the versions of the exporting packages, the builder's source
    hash, Python's minor version."""
    text = f"{name}|{versions()}|{sys.version_info[:2]}|{source_hash(ENTRIES[name].build)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_path(name: str, cache: Path | None = None) -> Path:
    return (cache or default_cache()) / f"{name}-{cache_key(name)}.onnx"


def build(name: str, cache: Path | None = None, *, quiet: bool = True) -> Path:
    """The path of export ``name`` in the cache, exported now unless it is there. Older exports
    of the same name (other keys) are removed. ``quiet``: the exporter's progress lines and
    warnings are swallowed."""
    import fcntl

    if name not in ENTRIES:
        raise KeyError(f"no export {name!r} in the matrix")
    cache = cache or default_cache()
    path = cached_path(name, cache)
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():  # another process built it while this one waited
            return path
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.onnx")
        try:
            _run_builder(name, tmp, quiet)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        for old in cache.glob(f"{name}-*.onnx"):
            if old != path:
                old.unlink(missing_ok=True)
    return path


def _run_builder(name: str, path: Path, quiet: bool) -> None:
    sys.modules.setdefault("torchvision", None)  # type: ignore[arg-type]  # unused, may clash
    if not quiet:
        ENTRIES[name].build(path)
        return
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ENTRIES[name].build(path)


def staged_compare(source, fold, n: int = 2):
    """``fold`` compared with ``source`` stage by stage, stages of an eighth of the
    model's weights (7 to 20 stages a model): the ``CompareResult``, or the line of a check
    that could not run (the original fails at the guessed dims)."""
    from onnxfold.check.compare import CheckCouldNotRun, compare_models
    from onnxfold.check.running.memory import weighed
    from onnxfold.check.running.models import graph_of
    from onnxfold.check.running.options import CompareOptions

    options = CompareOptions(window_bytes=max(weighed(graph_of(str(source), "a"))[0] // 8, 1))
    try:
        return compare_models(str(source), str(fold), n, options)
    except CheckCouldNotRun as e:
        return str(e)
