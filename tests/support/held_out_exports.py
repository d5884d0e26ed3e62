"""Held-out exports: architectures and sizes that no test and no rule was written against.

The export matrix (``export_matrix.MATRIX``) is what the tests hold onnxfold to; a change tuned
until the matrix passes can still fit it and nothing else. These exports are the control:
families the matrix does not have (Bloom's ALiBi, OPT, GPT-NeoX, StableLM, Qwen3 decoders with
a KV cache; RoBERTa, ALBERT, ELECTRA, DeBERTa-v2, MPNet encoders; MobileNetV2, SegFormer, Swin,
DeiT, BiT; Marian and Pegasus), at other sizes (hidden 48-64, vocabulary 500, a past of 4 and a
sequence of 3), by both exporters. No test runs them (CI time); ``python -m tools.check_matrix
--held-out`` does, before a change to the check or the fold is called done.

Each builder writes the .onnx at ``path``; ``export_matrix.HELD_OUT`` registers them as
``Export`` entries (same cache, same keys).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

VOCAB = 500
KV_NAMES = ["input_ids", "attention_mask", "past_key.0", "past_value.0", "past_key.1",
            "past_value.1"]


def _causal_lm(kind: str) -> tuple[Any, int, int]:
    """(model, key-value heads, head dim) of a 2-layer causal LM of the family ``kind``."""
    import transformers as tf

    if kind == "bloom":
        return tf.BloomForCausalLM(tf.BloomConfig(vocab_size=VOCAB, hidden_size=64, n_layer=2,
                                                  n_head=4)), 4, 16
    if kind == "opt":
        return tf.OPTForCausalLM(tf.OPTConfig(
            vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            ffn_dim=128, max_position_embeddings=128, word_embed_proj_dim=64)), 4, 16
    if kind == "neox":
        return tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(
            vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, max_position_embeddings=128)), 4, 16
    if kind == "stablelm":
        return tf.StableLmForCausalLM(tf.StableLmConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128)), 4, 16
    if kind == "qwen3":
        return tf.Qwen3ForCausalLM(tf.Qwen3Config(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=128)), 2, 16
    raise ValueError(kind)


def causal_kv(path: Path, kind: str, dynamo: bool) -> None:
    """A decoding step with a KV cache (past 4, sequence 3 in the example), every length
    dynamic."""
    import torch

    from tests.support.export_matrix import _export
    from tests.support.export_models import _Decoder

    model, kv_heads, head_dim = _causal_lm(kind)
    ids = torch.randint(0, VOCAB, (2, 3))
    mask = torch.ones(2, 7, dtype=torch.long)
    cache = [torch.randn(2, kv_heads, 4, head_dim) for _ in range(4)]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"}}
    axes.update({name: {0: "batch", 2: "past"} for name in KV_NAMES[2:]})
    _export(_Decoder(model.eval()).eval(), (ids, mask, *cache), path, KV_NAMES, dynamo=dynamo,
            axes=axes)


def _encoder(kind: str) -> Any:
    import transformers as tf

    sizes = {"vocab_size": VOCAB, "hidden_size": 48, "num_hidden_layers": 2,
             "num_attention_heads": 4, "intermediate_size": 96}
    if kind == "roberta":
        return tf.RobertaModel(tf.RobertaConfig(**sizes, max_position_embeddings=130))
    if kind == "albert":
        return tf.AlbertModel(tf.AlbertConfig(**sizes, embedding_size=16))
    if kind == "electra":
        return tf.ElectraModel(tf.ElectraConfig(**sizes, embedding_size=32))
    if kind == "deberta":
        return tf.DebertaV2Model(tf.DebertaV2Config(**sizes, max_position_embeddings=128))
    if kind == "mpnet":
        return tf.MPNetModel(tf.MPNetConfig(**sizes))
    raise ValueError(kind)


def encoder(path: Path, kind: str, dynamo: bool) -> None:
    """A text encoder's last hidden state; dynamic batch and sequence."""
    import torch

    from tests.support.export_matrix import _export
    from tests.support.export_models import _LastHidden

    names = ["input_ids", "attention_mask"]
    args = (torch.randint(3, VOCAB, (2, 7)), torch.ones(2, 7, dtype=torch.long))
    _export(_LastHidden(_encoder(kind).eval()).eval(), args, path, names, dynamo=dynamo,
            axes={name: {0: "batch", 1: "seq"} for name in names})


def _vision(kind: str) -> Any:
    import transformers as tf

    if kind == "mobilenetv2":
        return tf.MobileNetV2ForImageClassification(tf.MobileNetV2Config(
            depth_multiplier=0.35, num_labels=5))
    if kind == "segformer":
        return tf.SegformerForSemanticSegmentation(tf.SegformerConfig(
            hidden_sizes=[16, 32], depths=[1, 1], num_encoder_blocks=2, sr_ratios=[2, 1],
            num_attention_heads=[1, 2], decoder_hidden_size=32, strides=[4, 2],
            patch_sizes=[7, 3], num_labels=3))
    if kind == "swin":
        return tf.SwinForImageClassification(tf.SwinConfig(
            image_size=64, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
            window_size=4, num_labels=5))
    if kind == "bit":  # weight-standardized convolutions (issue 67), GroupNorm of 32 groups
        return tf.BitForImageClassification(tf.BitConfig(
            embedding_size=32, hidden_sizes=[128, 256], depths=[1, 1],
            layer_type="preactivation", num_labels=5))
    if kind == "deit":
        return tf.DeiTForImageClassification(tf.DeiTConfig(
            hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
            image_size=64, patch_size=16, num_labels=5))
    raise ValueError(kind)


STATIC_IMAGES = ("swin", "deit")  # their position tables fix the image size


def vision(path: Path, kind: str, dynamo: bool) -> None:
    """A vision model's logits; dynamic batch, and dynamic height and width where the model
    allows them (64 x 96 in the example; Swin and DeiT 64 x 64, static)."""
    import torch

    from tests.support.export_matrix import _export
    from tests.support.export_models import _ImageLogits

    static = kind in STATIC_IMAGES
    pixels = torch.randn(2, 3, 64, 64 if static else 96)
    axes = {"pixel_values": {0: "batch"} if static else {0: "batch", 2: "height", 3: "width"}}
    _export(_ImageLogits(_vision(kind).eval()).eval(), (pixels,), path, ["pixel_values"],
            dynamo=dynamo, axes=axes)


def seq2seq(path: Path, kind: str, dynamo: bool) -> None:
    """A Marian or Pegasus encoder-decoder LM without cache; dynamic batch, source and target
    lengths."""
    import torch
    import transformers as tf

    from tests.support.export_matrix import _export
    from tests.support.export_models import _Seq2SeqLogits

    sizes = {"vocab_size": VOCAB, "d_model": 48, "encoder_layers": 2, "decoder_layers": 2,
             "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 96,
             "decoder_ffn_dim": 96, "max_position_embeddings": 128, "pad_token_id": 0,
             "decoder_start_token_id": 0, "use_cache": False}
    model = (tf.MarianMTModel(tf.MarianConfig(**sizes)) if kind == "marian" else
             tf.PegasusForConditionalGeneration(tf.PegasusConfig(**sizes)))
    names = ["input_ids", "attention_mask", "decoder_input_ids"]
    args = (torch.randint(3, VOCAB, (2, 7)), torch.ones(2, 7, dtype=torch.long),
            torch.randint(3, VOCAB, (2, 4)))
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
            "decoder_input_ids": {0: "batch", 1: "dec"}}
    _export(_Seq2SeqLogits(model.eval()).eval(), args, path, names, dynamo=dynamo, axes=axes)


# name stem -> (what it is, builder, kind); each is exported by dynamo and by TorchScript
FAMILIES: dict[str, tuple[str, Any, str]] = {
    **{f"{k}_kv": (f"{what} decoder, KV cache", causal_kv, k) for k, what in (
        ("bloom", "Bloom (ALiBi)"), ("opt", "OPT"), ("neox", "GPT-NeoX"),
        ("stablelm", "StableLM"), ("qwen3", "Qwen3 (GQA, q/k norms)"))},
    **{k: (f"{what} encoder", encoder, k) for k, what in (
        ("roberta", "RoBERTa"), ("albert", "ALBERT (shared layers)"), ("electra", "ELECTRA"),
        ("deberta", "DeBERTa-v2 (relative positions)"), ("mpnet", "MPNet"))},
    **{k: (what, vision, k) for k, what in (
        ("mobilenetv2", "MobileNetV2, dynamic H/W"), ("segformer", "SegFormer, dynamic H/W"),
        ("swin", "Swin, static 64x64"), ("deit", "DeiT, static 64x64"),
        ("bit", "BiT (weight-standardized convolutions), dynamic H/W"))},
    **{k: (f"{what} encoder-decoder LM, no cache", seq2seq, k) for k, what in (
        ("marian", "Marian"), ("pegasus", "Pegasus"))},
}
