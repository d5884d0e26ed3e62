"""Fresh exports: a second control set of families that neither the export matrix nor the
held-out set has.

The matrix (``export_matrix.MATRIX``) and the held-out exports (``held_out_exports``) have both
been looked at many times; a change can fit them without meaning to. These are families no
test, rule or check was written against: KV-cache decoders (Gemma2's soft-capping and sliding
window, Phi's partial rotary and parallel block, GPT-J's interleaved rotary, CodeGen's fused
QKV, OLMo's clipped QKV, Granite's multipliers, Falcon's multi-query attention, GPTBigCode's
fused multi-query projection), encoders (XLM-RoBERTa, ConvBERT, Funnel's pooling, ModernBERT's
local and global attention), vision (DINOv2, SigLIP's vision tower and its attention pooling,
BEiT's relative position bias, EfficientNet, ConvNeXt, DPT, Swin2SR, DETR), audio (WavLM,
HuBERT, AST) and time series (PatchTST, PatchTSMixer), at sizes of their own (hidden 40-48,
vocabulary 300, batch 3, a past of 2 and a sequence of 4, images 40 x 56), from configs with
random weights, by both exporters. No test runs them; ``python -m tools.check_matrix --fresh``
does.

Each builder writes the .onnx at ``path``; ``export_matrix.FRESH`` registers them as
``Export`` entries (same cache, same keys), ``export_matrix.FRESH_UNEXPORTABLE`` those torch
cannot export here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.export_models import _Decoder, _ImageLogits, _LastHidden

VOCAB = 300
PAST, SEQ, BATCH = 2, 4, 3  # the example lengths of a decoding step (every dim dynamic)
KV_NAMES = ["input_ids", "attention_mask", "past_key.0", "past_value.0", "past_key.1",
            "past_value.1"]
IMAGE = (40, 56)  # the example image (every transformer here has patches of 8)


# -- decoders with a KV cache -------------------------------------------------------------------


def _causal_lm(kind: str) -> tuple[Any, int, int]:
    """(model, key-value heads, head dim) of a 2-layer causal LM of the family ``kind``:
    hidden 48, 4 heads of 12."""
    import transformers as tf

    common: dict[str, Any] = {
        "vocab_size": VOCAB, "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 64, "pad_token_id": 0,
        "bos_token_id": 1, "eos_token_id": 2, "use_cache": True}
    if kind == "gemma2":
        return tf.Gemma2ForCausalLM(tf.Gemma2Config(
            **common, num_key_value_heads=2, head_dim=12, sliding_window=4,
            attn_logit_softcapping=50.0, final_logit_softcapping=30.0)), 2, 12
    if kind == "phi":
        rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
        return tf.PhiForCausalLM(tf.PhiConfig(**common, num_key_value_heads=4, qk_layernorm=True,
                                              rope_parameters=rope)), 4, 12
    if kind == "olmo":
        return tf.OlmoForCausalLM(tf.OlmoConfig(**common, num_key_value_heads=2,
                                                clip_qkv=4.0)), 2, 12
    if kind == "granite":
        return tf.GraniteForCausalLM(tf.GraniteConfig(
            **common, num_key_value_heads=2, embedding_multiplier=6.0, residual_multiplier=0.3,
            attention_multiplier=0.05, logits_scaling=4.0)), 2, 12
    gpt: dict[str, Any] = {"vocab_size": VOCAB, "n_embd": 48, "n_layer": 2, "n_head": 4,
                           "n_positions": 64, "bos_token_id": 1, "eos_token_id": 2,
                           "use_cache": True}
    if kind == "gptj":
        return tf.GPTJForCausalLM(tf.GPTJConfig(**gpt, rotary_dim=6, n_inner=96)), 4, 12
    if kind == "codegen":
        return tf.CodeGenForCausalLM(tf.CodeGenConfig(**gpt, n_ctx=64, rotary_dim=6,
                                                      n_inner=96)), 4, 12
    if kind == "gpt_bigcode":
        return tf.GPTBigCodeForCausalLM(tf.GPTBigCodeConfig(
            **gpt, n_inner=96, multi_query=True)), 1, 12
    if kind == "falcon":
        return tf.FalconForCausalLM(tf.FalconConfig(
            vocab_size=VOCAB, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
            multi_query=True, parallel_attn=True, alibi=False, new_decoder_architecture=False,
            bias=False, max_position_embeddings=64, bos_token_id=1, eos_token_id=2,
            use_cache=True)), 1, 12
    raise ValueError(kind)


def causal_kv(path: Path, kind: str, dynamo: bool) -> None:
    """A decoding step with a KV cache (batch 3, past 2, sequence 4 in the example), every
    length dynamic."""
    import torch

    from tests.support.export_matrix import _export

    model, kv_heads, head_dim = _causal_lm(kind)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    mask = torch.ones(BATCH, PAST + SEQ, dtype=torch.long)
    cache = [torch.randn(BATCH, kv_heads, PAST, head_dim) for _ in range(4)]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"}}
    axes.update({name: {0: "batch", 2: "past"} for name in KV_NAMES[2:]})
    _export(_Decoder(model.eval()).eval(), (ids, mask, *cache), path, KV_NAMES, dynamo=dynamo,
            axes=axes)


# -- encoders -----------------------------------------------------------------------------------


def _encoder(kind: str) -> Any:
    """A 2-layer text encoder: hidden 40, 4 heads of 10."""
    import transformers as tf

    sizes: dict[str, Any] = {"vocab_size": VOCAB, "hidden_size": 40, "num_hidden_layers": 2,
                             "num_attention_heads": 4, "intermediate_size": 80}
    if kind == "xlm_roberta":
        return tf.XLMRobertaModel(tf.XLMRobertaConfig(**sizes, max_position_embeddings=66))
    if kind == "convbert":
        return tf.ConvBertModel(tf.ConvBertConfig(**sizes, embedding_size=24, head_ratio=2,
                                                  conv_kernel_size=5))
    if kind == "funnel":
        return tf.FunnelModel(tf.FunnelConfig(
            vocab_size=VOCAB, block_sizes=[1, 1], num_decoder_layers=1, d_model=40, n_head=4,
            d_head=10, d_inner=80, attention_type="factorized"))
    if kind == "modernbert":
        return tf.ModernBertModel(tf.ModernBertConfig(
            **sizes, max_position_embeddings=64, local_attention=4,
            layer_types=["full_attention", "sliding_attention"], pad_token_id=0,
            bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2))
    raise ValueError(kind)


def encoder(path: Path, kind: str, dynamo: bool) -> None:
    """A text encoder's last hidden state; dynamic batch and sequence (3 x 9 in the example)."""
    import torch

    from tests.support.export_matrix import _export

    names = ["input_ids", "attention_mask"]
    args = (torch.randint(3, VOCAB, (BATCH, 9)), torch.ones(BATCH, 9, dtype=torch.long))
    _export(_LastHidden(_encoder(kind).eval()).eval(), args, path, names, dynamo=dynamo,
            axes={name: {0: "batch", 1: "seq"} for name in names})


# -- vision -------------------------------------------------------------------------------------


class _Interpolated(_ImageLogits):
    """A vision transformer's last hidden state and pooled output, its position table
    interpolated to the image."""

    def forward(self, pixel_values):
        out = self.model(pixel_values=pixel_values, interpolate_pos_encoding=True)
        return out.last_hidden_state, out.pooler_output


class _Hidden(_ImageLogits):
    """A vision model's last hidden state (DINOv2 interpolates its positions always)."""

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).last_hidden_state


class _Depth(_ImageLogits):
    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).predicted_depth


class _Reconstruction(_ImageLogits):
    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).reconstruction


class _Detections(_ImageLogits):
    """A detector's class logits and boxes (DETR: its mask of ones, its sine positions)."""

    def forward(self, pixel_values):
        out = self.model(pixel_values=pixel_values)
        return out.logits, out.pred_boxes


def _torch_init(model: Any) -> Any:
    """``model`` with every submodule's parameters drawn by torch's own ``reset_parameters``
    (BatchNorm weights 1, Kaiming-uniform convolutions): transformers' initialization (std
    0.02, BatchNorm weights too) shrinks EfficientNet's and DPT's signal to exactly zero, every
    output 0, which no check can tell from a wrong one."""
    for module in model.modules():
        if module is not model and hasattr(module, "reset_parameters"):
            module.reset_parameters()
    return model


def _calibrated(model: Any) -> Any:
    """``model`` (torch's initialization) with its BatchNorm statistics those of 4 batches of
    random 40 x 56 images, as a trained model's are of its data: with the initial ones
    (mean 0, variance 1) EfficientNet's signal shrinks layer after layer to nothing, and its
    logits are its classifier's bias whatever the image."""
    import torch

    model = _torch_init(model)
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.momentum = None  # a cumulative average of the batches
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(pixel_values=torch.randn(4, 3, *IMAGE))
    return model.eval()


def _vision(kind: str) -> Any:
    import transformers as tf

    vit: dict[str, Any] = {"hidden_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
                           "intermediate_size": 80, "image_size": 32, "patch_size": 8}
    if kind == "dinov2":
        return _Hidden(tf.Dinov2Model(tf.Dinov2Config(**vit, layerscale_value=0.1)))
    if kind == "siglip_vision":
        return _Interpolated(tf.SiglipVisionModel(tf.SiglipVisionConfig(**vit)))
    if kind == "beit":
        return _ImageLogits(tf.BeitForImageClassification(tf.BeitConfig(
            **vit, use_relative_position_bias=True, use_mean_pooling=True, num_labels=5)))
    if kind == "efficientnet":
        return _ImageLogits(_calibrated(tf.EfficientNetForImageClassification(
            tf.EfficientNetConfig(image_size=64, width_coefficient=0.25, depth_coefficient=0.25,
                                  hidden_dim=320, num_labels=5))))
    if kind == "convnext":
        return _ImageLogits(tf.ConvNextForImageClassification(tf.ConvNextConfig(
            hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, num_labels=5)))
    if kind == "dpt":
        # a DINOv2 backbone, as Depth Anything: DPT's own ViT reads its patch grid as a square
        return _Depth(_torch_init(tf.DPTForDepthEstimation(tf.DPTConfig(
            backbone_config=tf.Dinov2Config(**vit, out_features=["stage1", "stage2"],
                                            reshape_hidden_states=False),
            hidden_size=40, neck_hidden_sizes=[8, 16], reassemble_factors=[2, 1],
            fusion_hidden_size=16, head_in_index=-1))))
    if kind == "swin2sr":
        return _Reconstruction(tf.Swin2SRForImageSuperResolution(tf.Swin2SRConfig(
            image_size=32, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4,
            upscale=2, upsampler="pixelshuffledirect")))
    if kind == "detr":
        return _Detections(tf.DetrForObjectDetection(tf.DetrConfig(
            backbone_config=tf.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32],
                                            depths=[1, 1], out_features=["stage2"]),
            d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
            num_queries=5, num_labels=3)))
    raise ValueError(kind)


# (family, dynamo) whose export is valid at its example's image size only, with dynamic H/W:
# the dynamo exporter bakes the example's patch grid into BEiT's interpolated relative position
# bias, TorchScript the key length into the pooling head's nn.MultiheadAttention of SigLIP
# (both export, and fail at any other size); they are exported at 32 x 32, dynamic batch only
STATIC_IMAGES = (("beit", True), ("siglip_vision", False))


def vision(path: Path, kind: str, dynamo: bool) -> None:
    """A vision model's outputs; dynamic batch, height and width (40 x 56 in the example) where
    the export allows them (``STATIC_IMAGES``: 32 x 32, dynamic batch only)."""
    import torch

    from tests.support.export_matrix import _export

    static = (kind, dynamo) in STATIC_IMAGES
    pixels = torch.randn(BATCH, 3, *((32, 32) if static else IMAGE))
    axes = {"pixel_values": {0: "batch"} if static else {0: "batch", 2: "height", 3: "width"}}
    _export(_vision(kind).eval(), (pixels,), path, ["pixel_values"], dynamo=dynamo, axes=axes)


# -- audio --------------------------------------------------------------------------------------


class _Waveform(_ImageLogits):
    def forward(self, input_values):
        return self.model(input_values).last_hidden_state


class _Spectrogram(_ImageLogits):
    def forward(self, input_values):
        return self.model(input_values).logits


def _speech(kind: str) -> Any:
    """WavLM or HuBERT: a 2-layer convolutional feature encoder (stride 15), positional
    convolution, 2 layers of hidden 40."""
    import transformers as tf

    speech: dict[str, Any] = {
        "hidden_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 80, "conv_dim": (16, 16), "conv_stride": (5, 3),
        "conv_kernel": (10, 3), "num_conv_pos_embeddings": 8, "num_conv_pos_embedding_groups": 4,
        "vocab_size": VOCAB}
    if kind == "wavlm":
        return tf.WavLMModel(tf.WavLMConfig(**speech, num_buckets=32, max_bucket_distance=64))
    if kind == "hubert":
        return tf.HubertModel(tf.HubertConfig(**speech, feat_extract_norm="layer",
                                              do_stable_layer_norm=True))
    raise ValueError(kind)


def audio(path: Path, kind: str, dynamo: bool) -> None:
    """WavLM or HuBERT (dynamic batch and number of samples, 3 x 1200 in the example), or the
    Audio Spectrogram Transformer (32 frames x 16 mel bins, fixed by its position table;
    dynamic batch)."""
    import torch
    import transformers as tf

    from tests.support.export_matrix import _export

    if kind == "ast":
        model = tf.ASTForAudioClassification(tf.ASTConfig(
            hidden_size=40, num_hidden_layers=2, num_attention_heads=4, intermediate_size=80,
            patch_size=8, frequency_stride=8, time_stride=8, max_length=32, num_mel_bins=16,
            num_labels=5))
        _export(_Spectrogram(model.eval()).eval(), (torch.randn(BATCH, 32, 16),), path,
                ["input_values"], dynamo=dynamo, axes={"input_values": {0: "batch"}})
        return
    _export(_Waveform(_speech(kind).eval()).eval(), (torch.randn(BATCH, 1200),), path,
            ["input_values"], dynamo=dynamo, axes={"input_values": {0: "batch", 1: "samples"}})


# -- time series --------------------------------------------------------------------------------


class _Forecast(_ImageLogits):
    def forward(self, past_values):
        return self.model(past_values=past_values).prediction_outputs


def _forecaster(kind: str) -> Any:
    """A forecaster of 8 steps of 3 channels from 32, in patches of 8 by stride 4, its input
    scaled by its own mean and std."""
    import transformers as tf

    sizes: dict[str, Any] = {"num_input_channels": 3, "context_length": 32, "patch_length": 8,
                             "patch_stride": 4, "prediction_length": 8, "d_model": 40,
                             "scaling": "std"}
    if kind == "patchtst":
        return tf.PatchTSTForPrediction(tf.PatchTSTConfig(
            **sizes, num_attention_heads=4, num_hidden_layers=2, ffn_dim=80))
    if kind == "patchtsmixer":
        return tf.PatchTSMixerForPrediction(tf.PatchTSMixerConfig(**sizes, num_layers=2))
    raise ValueError(kind)


def series(path: Path, kind: str, dynamo: bool) -> None:
    """A time-series forecaster's prediction; dynamic batch (the context length is the
    config's)."""
    import torch

    from tests.support.export_matrix import _export

    model = _Forecast(_forecaster(kind).eval()).eval()
    _export(model, (torch.randn(BATCH, 32, 3),), path, ["past_values"], dynamo=dynamo,
            axes={"past_values": {0: "batch"}})


# name stem -> (what it is, builder, kind); each is exported by dynamo and by TorchScript
FAMILIES: dict[str, tuple[str, Any, str]] = {
    **{f"{k}_kv": (f"{what} decoder, KV cache", causal_kv, k) for k, what in (
        ("gemma2", "Gemma2 (soft-capping, sliding window 4)"),
        ("phi", "Phi (partial rotary, parallel block, q/k norms)"),
        ("gptj", "GPT-J (interleaved partial rotary)"),
        ("codegen", "CodeGen (fused QKV)"),
        ("olmo", "OLMo (clipped QKV, plain layer norm)"),
        ("granite", "Granite (multipliers)"),
        ("falcon", "Falcon (multi-query)"),
        ("gpt_bigcode", "GPTBigCode (multi-query)"))},
    **{k: (f"{what} encoder", encoder, k) for k, what in (
        ("xlm_roberta", "XLM-RoBERTa"),
        ("convbert", "ConvBERT (span convolutions)"),
        ("funnel", "Funnel (factorized attention, pooled, upsampled)"),
        ("modernbert", "ModernBERT (local window 4, global)"))},
    **{k: (what, vision, k) for k, what in (
        ("dinov2", "DINOv2, dynamic H/W"),
        ("siglip_vision", "SigLIP vision (+ pooling head), dynamic H/W (TorchScript: static)"),
        ("beit", "BEiT (relative position bias) classifier, dynamic H/W (dynamo: static)"),
        ("efficientnet", "EfficientNet classifier, dynamic H/W"),
        ("convnext", "ConvNeXt classifier, dynamic H/W"),
        ("dpt", "DPT depth (DINOv2 backbone), dynamic H/W"),
        ("swin2sr", "Swin2SR x2 super-resolution, dynamic H/W"),
        ("detr", "DETR detector (ResNet backbone), dynamic H/W"))},
    **{k: (what, audio, k) for k, what in (
        ("wavlm", "WavLM, dynamic samples"),
        ("hubert", "HuBERT (stable layer norm), dynamic samples"),
        ("ast", "Audio Spectrogram Transformer classifier"))},
    **{k: (what, series, k) for k, what in (
        ("patchtst", "PatchTST forecaster (std scaling)"),
        ("patchtsmixer", "PatchTSMixer forecaster (std scaling)"))},
}
