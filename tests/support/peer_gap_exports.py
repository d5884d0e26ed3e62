"""Exports where onnxfold once left more nodes than a peer (issue 56): a TorchScript MobileBERT
(its trigram embedding pads ``x[:, 1:]`` with computed pads, so every attention Reshape target
was read back from Shape: 140 nodes against onnxslim's 125) and a dynamo FNet (three zero
biases before its Fourier mixing, a DFT: 58 against onnxsim's 55). Configs with random
weights (seed 0, vocabulary 300, 2 layers), dynamic batch and sequence; ``export_matrix.GAPS``
registers them (same cache, same keys) and ``tests/exports/test_peer_gaps.py`` holds the
counts."""

from __future__ import annotations

from pathlib import Path

from tests.support.export_models import _ImageLogits, _LastHidden

VOCAB = 300


class _IdsHidden(_ImageLogits):
    """FNet reads token ids only (no attention mask): its last hidden state."""

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).last_hidden_state


def mobilebert(path: Path, dynamo: bool) -> None:
    """MobileBERT (hidden 64, embedding 32, bottlenecks of 32): ids and mask in."""
    import torch
    import transformers as tf

    from tests.support.export_matrix import _export

    model = tf.MobileBertModel(tf.MobileBertConfig(
        vocab_size=VOCAB, hidden_size=64, embedding_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, true_hidden_size=32,
        intra_bottleneck_size=32, num_feedforward_networks=2))
    names = ["input_ids", "attention_mask"]
    args = (torch.randint(3, VOCAB, (3, 9)), torch.ones(3, 9, dtype=torch.long))
    _export(_LastHidden(model.eval()).eval(), args, path, names, dynamo=dynamo,
            axes={name: {0: "batch", 1: "seq"} for name in names})


def fnet(path: Path, dynamo: bool) -> None:
    """FNet (hidden 40; torch.fft.fftn exported as DFT nodes: dynamo only)."""
    import torch
    import transformers as tf

    from tests.support.export_matrix import _export

    model = tf.FNetModel(tf.FNetConfig(vocab_size=VOCAB, hidden_size=40, num_hidden_layers=2,
                                       intermediate_size=80,
                                       use_tpu_fourier_optimizations=False))
    _export(_IdsHidden(model.eval()).eval(), (torch.randint(3, VOCAB, (3, 9)),), path,
            ["input_ids"], dynamo=dynamo, axes={"input_ids": {0: "batch", 1: "seq"}})
