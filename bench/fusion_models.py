"""Transformer exports for onnxruntime's transformer optimizer (issue 81), shared by
``tests/fusions`` and ``python -m bench run fusions``.

Each family is a tiny ``transformers`` config with random weights whose biases and norm
weights are moved off their initial zeros and ones, as a trained model's are (a random
initialization's all-zero biases are ``Add(x, 0)``, which a fold removes, and the fusers match
the bias ``Add``), exported by TorchScript or dynamo as a user does, with dynamic batch and
sequence. ``optimize`` runs the optimizer as its command line does
(``python -m onnxruntime.transformers.optimizer --model_type T --num_heads H --hidden_size
D``), in a child, and ``fused`` counts the ops it fuses into.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

ROOT = Path(__file__).resolve().parent.parent
HIDDEN, HEADS, LAYERS, VOCAB = 64, 4, 2, 128
# the fusions that carry an attention's kernel choice (flash, memory-efficient) and its
# embedding: each counted apart (the others, norms and activations, are counted together: a
# LayerNormalization fused with its residual Add is one SkipLayerNormalization instead)
ATTENTION_OPS = ("Attention", "MultiHeadAttention", "GroupQueryAttention",
                 "EmbedLayerNormalization", "RotaryEmbedding")


@dataclass(frozen=True)
class Family:
    """A model family: the optimizer's ``--model_type`` for it, and how to build the model and
    its example inputs (torch tensors by name, the first dim batch, the second sequence where
    there is one)."""

    model_type: str
    build: Callable[[], tuple[Any, dict[str, Any]]]
    # dims a comparison must not guess (``--dim NAME=VALUE``), where an export names them
    dims: tuple[tuple[str, int], ...] = ()


def _text_inputs(*names: str) -> dict[str, Any]:
    import torch

    ids = torch.randint(4, VOCAB, (2, 9))
    made = {"input_ids": ids, "attention_mask": torch.ones(2, 9, dtype=torch.long),
            "token_type_ids": torch.zeros(2, 9, dtype=torch.long),
            "decoder_input_ids": torch.randint(4, VOCAB, (2, 5))}
    made["attention_mask"][1, 6:] = 0
    return {name: made[name] for name in names}


def _bert() -> tuple[Any, dict[str, Any]]:
    import transformers as tf

    model = tf.BertModel(tf.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN,
                                       num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                       intermediate_size=2 * HIDDEN))
    return model, _text_inputs("input_ids", "attention_mask", "token_type_ids")


def _distilbert() -> tuple[Any, dict[str, Any]]:
    import transformers as tf

    model = tf.DistilBertModel(tf.DistilBertConfig(vocab_size=VOCAB, dim=HIDDEN,
                                                   n_layers=LAYERS, n_heads=HEADS,
                                                   hidden_dim=2 * HIDDEN))
    return model, _text_inputs("input_ids", "attention_mask")


def _gpt2() -> tuple[Any, dict[str, Any]]:
    import transformers as tf

    model = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS,
                                             n_head=HEADS, use_cache=False))
    return model, _text_inputs("input_ids", "attention_mask")


def _vit() -> tuple[Any, dict[str, Any]]:
    import torch
    import transformers as tf

    model = tf.ViTModel(tf.ViTConfig(image_size=32, patch_size=8, hidden_size=HIDDEN,
                                     num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                     intermediate_size=2 * HIDDEN), add_pooling_layer=False)
    return model, {"pixel_values": torch.randn(2, 3, 32, 32)}


def _bart() -> tuple[Any, dict[str, Any]]:
    import transformers as tf

    model = tf.BartModel(tf.BartConfig(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS,
                                       decoder_layers=LAYERS, encoder_attention_heads=HEADS,
                                       decoder_attention_heads=HEADS,
                                       encoder_ffn_dim=2 * HIDDEN, decoder_ffn_dim=2 * HIDDEN,
                                       use_cache=False))
    return model, _text_inputs("input_ids", "attention_mask", "decoder_input_ids")


def _llama() -> tuple[Any, dict[str, Any]]:
    import transformers as tf

    model = tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=HEADS // 2,
        intermediate_size=2 * HIDDEN, use_cache=False))
    return model, _text_inputs("input_ids", "attention_mask")


def _roberta() -> tuple[Any, dict[str, Any]]:
    import transformers as tf

    model = tf.RobertaModel(tf.RobertaConfig(vocab_size=VOCAB, hidden_size=HIDDEN,
                                             num_hidden_layers=LAYERS,
                                             num_attention_heads=HEADS,
                                             intermediate_size=2 * HIDDEN, pad_token_id=1))
    return model, _text_inputs("input_ids", "attention_mask")


def _t5() -> tuple[Any, dict[str, Any]]:
    import transformers as tf

    model = tf.T5Model(tf.T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS,
                                   d_ff=2 * HIDDEN, num_layers=LAYERS, num_heads=HEADS,
                                   decoder_start_token_id=0, use_cache=False))
    return model, _text_inputs("input_ids", "attention_mask", "decoder_input_ids")


# family -> the optimizer's --model_type, its builder, optimum's task
FAMILIES = {
    "bert": Family("bert", _bert),
    "distilbert": Family("bert", _distilbert),
    "gpt2": Family("gpt2", _gpt2),
    # optimum makes every dim of pixel_values dynamic: the channels are 3, the image 32 x 32
    "vit": Family("vit", _vit, (("num_channels", 3), ("height", 32), ("width", 32))),
    "bart": Family("bart", _bart),
    "llama": Family("gpt2", _llama),
}
# held out: in no test; measured apart (``python -m bench run fusions --held-out``) to see
# whether what was fitted on the families above holds on others
HELD_OUT = {
    "roberta": Family("bert", _roberta),
    "t5": Family("t5", _t5),
}
ALL = {**FAMILIES, **HELD_OUT}
# optimum's exporter (TorchScript, the way optimum users reach the optimizer; it pins its own
# transformers: run under the clients' overlay, bench/client_models.py) and torch's dynamo
EXPORTERS = ("optimum", "dynamo")
_TASKS = {"gpt2": "text-generation", "llama": "text-generation", "t5": "text2text-generation"}


def trained_like(model: Any) -> Any:
    """``model`` with its biases and norm weights moved off 0 and 1 (seeded)."""
    import torch

    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or "norm" in name.lower() or ".ln_" in name:
                param.add_(0.1 * torch.randn(param.shape, generator=generator))
    return model.eval()


def export(name: str, exporter: str, out: Path, timeout: float = 900) -> list[Path]:
    """Family ``name`` exported by ``exporter`` into the directory ``out`` (made here), batch
    and sequence dynamic, in a child; the ``.onnx`` files written (one file each, weights
    inline)."""
    from bench import client_models

    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    paths = [str(ROOT)]
    if exporter == "optimum":
        paths.insert(0, str(client_models.optimum_overlay()))
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    subprocess.run([sys.executable, "-m", "bench.fusion_models", name, exporter, str(out)],
                   env=env, check=True, capture_output=True, text=True, timeout=timeout)
    return sorted(out.glob("*.onnx"))


def export_error(failed: subprocess.CalledProcessError) -> str:
    """The last line of an exporting child's error that names the exception (one line)."""
    lines = [line.strip() for line in (failed.stderr or "").splitlines()
             if re.match(r"\s*\w+(Error|Exception)\b", line)]
    return (lines[-1] if lines else f"exit {failed.returncode}")[:160]


def cache_dir() -> Path:
    """Where exports are kept: ``$ONNXFOLD_FUSIONS_CACHE`` or ``~/.cache/onnxfold-fusions``."""
    return Path(os.environ.get("ONNXFOLD_FUSIONS_CACHE",
                               Path.home() / ".cache" / "onnxfold-fusions"))


def cached_export(name: str, exporter: str, cache: Path | None = None) -> list[Path]:
    """:func:`export`'s files, kept under a key of this module's source, the exporting
    packages' versions and optimum's pins; made once (under a lock: xdist workers share it)."""
    import fcntl
    import hashlib
    import importlib.metadata

    from bench import client_models

    versions = [importlib.metadata.version(p) for p in ("torch", "transformers", "onnx")]
    key = hashlib.sha256("\n".join([Path(__file__).read_text(), *versions,
                                     *client_models.OPTIMUM_PINS]).encode()).hexdigest()[:16]
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    done = cache / f"{name}_{exporter}-{key}"
    with open(cache / f"{name}_{exporter}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_dir():
            staging = cache / f".{done.name}.part"
            shutil.rmtree(staging, ignore_errors=True)
            export(name, exporter, staging)
            staging.rename(done)
    return sorted(p for p in done.glob("*.onnx"))


def _export_here(name: str, exporter: str, out: Path) -> None:
    """In the child: the export, then every file rewritten with its weights inline."""
    import torch

    torch.manual_seed(0)
    model, inputs = ALL[name].build()
    model = trained_like(model)
    out.mkdir(parents=True)
    if exporter == "optimum":
        import tempfile

        from optimum.exporters.onnx import main_export

        with tempfile.TemporaryDirectory() as source:
            model.save_pretrained(source)
            main_export(source, out / "export", task=_TASKS.get(name, "feature-extraction"),
                        do_validation=False)
        files = sorted((out / "export").glob("*.onnx"))
    else:
        names = list(inputs)
        shapes = tuple({0: torch.export.Dim.DYNAMIC} if n == "pixel_values" else
                       {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
                       for n in names)
        files = [out / "export" / "model.onnx"]
        files[0].parent.mkdir()
        torch.onnx.export(_Outputs(model, names), tuple(inputs.values()), str(files[0]),
                          input_names=names, output_names=["out"], dynamo=True,
                          dynamic_shapes=(shapes,))
    for file in files:
        onnx.save(onnx.load(str(file)), str(out / file.name))
    shutil.rmtree(out / "export")


def _Outputs(model: Any, names: list[str]) -> Any:  # noqa: N802 (a class factory)
    """A module taking ``names`` positionally and giving ``model``'s first output."""
    import torch

    class Outputs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return self.model(**dict(zip(names, args)), return_dict=False)[0]

    return Outputs()


def optimize(source: Path, target: Path, name: str, python: str = sys.executable,
             timeout: float = 600) -> subprocess.CompletedProcess:
    """onnxruntime's transformer optimizer on ``source`` as its command line runs it."""
    return subprocess.run(
        [python, "-m", "onnxruntime.transformers.optimizer", "--input", str(source),
         "--output", str(target), "--model_type", ALL[name].model_type,
         "--num_heads", str(HEADS), "--hidden_size", str(HIDDEN)],
        capture_output=True, text=True, timeout=timeout)


def dim_args(name: str, source: Path) -> list[str]:
    """``--dim NAME=VALUE`` arguments for the family's fixed dims that ``source`` names."""
    named = {d.dim_param for i in onnx.load(str(source), load_external_data=False).graph.input
             for d in i.type.tensor_type.shape.dim}
    return [arg for dim, value in ALL[name].dims if dim in named
            for arg in ("--dim", f"{dim}={value}")]


def nodes(path: Path) -> int:
    """Nodes of ``path``'s main graph, Constant nodes not counted."""
    return sum(n.op_type != "Constant" for n in onnx.load(str(path)).graph.node)


def fused(path: Path) -> Counter:
    """The fused ops of ``path`` (onnxruntime's own, domain ``com.microsoft``) by op type."""
    return Counter(n.op_type for n in onnx.load(str(path)).graph.node
                   if n.domain == "com.microsoft")


def fuses_as_well(got: Counter, want: Counter) -> bool:
    """Whether ``got`` has as many fused ops as ``want`` in all, and as many of each of
    :data:`ATTENTION_OPS`."""
    return sum(got.values()) >= sum(want.values()) and \
        all(got[op] >= want[op] for op in ATTENTION_OPS)


if __name__ == "__main__":  # the export child: NAME EXPORTER OUT
    _export_here(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
