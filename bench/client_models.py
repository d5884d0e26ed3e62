"""The clients that ship language models, and their models (issue 80): optimum's exporter and
its ``ORTModelForCausalLM``/``ORTModelForSeq2SeqLM``, onnxruntime-genai's model builder and its
generator. Used by ``tests/clients`` and ``python -m bench run clients``.

Each :class:`Flow` makes a model directory as a user gets it (tiny random-weight models from
``transformers`` configs: nothing is downloaded) and generates greedily from a fixed prompt in
the client, saving the tokens and the logits of every step. A test or benchmark copies the
directory, optimizes its ``.onnx`` files in place (the file names are the client's), and
generates again.

optimum-onnx 0.1.0 pins transformers below 4.58, while genai's builder and the exports extra
need transformers 5: optimum runs in an *overlay* of its own, its pinned packages
(:data:`OPTIMUM_PINS`) installed with ``pip --target`` (no dependencies: torch, onnx,
onnxruntime and numpy are the running venv's) into ``~/.cache/onnxfold-clients``, put first on
a child's ``PYTHONPATH``. onnxruntime-genai is a dependency of the exports extra.

Children: ``python -m bench.client_models make FLOW DIR [OUT.npz]``, ``... generate FLOW DIR
OUT.npz`` (the optimum flows under the overlay: :func:`child_command`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PROMPT = [5, 17, 42, 99, 3, 250, 7, 8]  # token ids of the prompt every flow generates from
NEW_TOKENS = 20
VOCAB = 1000

OPTIMUM_PINS = ("optimum-onnx==0.1.0", "optimum==2.1.0", "transformers==4.57.6",
                "huggingface_hub==0.36.2", "tokenizers==0.22.2", "requests==2.34.2",
                "charset_normalizer==3.5.3", "idna==3.20", "urllib3==2.8.0",
                "certifi==2026.10.19.post1")
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Flow:
    """One client's way to a model directory: ``client`` (``optimum`` or ``genai``), the
    family and, for genai, its precision; ``loads`` says which file the client's default load
    reads (what a test checks was folded)."""

    name: str
    client: str
    family: str
    precision: str = ""
    loads: str = "model.onnx"
    external: bool = False  # optimum's layout above 2 GB: ``model.onnx`` + ``model.onnx_data``


FLOWS = {flow.name: flow for flow in (
    Flow("optimum-bart", "optimum", "bart", loads="decoder_model_merged.onnx"),
    Flow("optimum-t5", "optimum", "t5", loads="decoder_model_merged.onnx"),
    Flow("optimum-llama", "optimum", "llama", external=True),
    # optimum-onnx 0.1.0 exports decoder-only models unmerged; the legacy layout (an If on
    # use_cache_branch, which ORTModelForCausalLM still loads) is made by its merge_decoders
    Flow("optimum-llama-merged", "optimum", "llama-merged", loads="decoder_model_merged.onnx"),
    Flow("genai-llama-fp32", "genai", "llama", "fp32"),
    Flow("genai-qwen2-int4", "genai", "qwen2", "int4"),
)}


def cache_dir() -> Path:
    """Where overlays and client models are kept: ``$ONNXFOLD_CLIENTS_CACHE`` or
    ``~/.cache/onnxfold-clients``."""
    return Path(os.environ.get("ONNXFOLD_CLIENTS_CACHE",
                               Path.home() / ".cache" / "onnxfold-clients"))


def optimum_overlay(cache: Path | None = None) -> Path:
    """The directory holding optimum's pinned packages, installed the first time (pip, no
    dependencies: a failure raises CalledProcessError with pip's output)."""
    cache = cache or cache_dir()
    digest = hashlib.sha256("\n".join(OPTIMUM_PINS).encode()).hexdigest()[:12]
    overlay = cache / f"optimum-{digest}"
    if overlay.is_dir():
        return overlay
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".optimum-", dir=cache))
    try:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--disable-pip-version-check", "--target", str(staging),
                        *OPTIMUM_PINS], check=True, capture_output=True, text=True)
        staging.rename(overlay)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return overlay


def child_command(flow: Flow, *args: str | Path, overlay: Path | None = None
                  ) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a child running this module for ``flow``
    (optimum's under ``overlay``, first on ``PYTHONPATH``)."""
    env = dict(os.environ)
    paths = [str(REPO)] + ([str(overlay)] if overlay is not None else [])
    env["PYTHONPATH"] = os.pathsep.join([*reversed(paths), env.get("PYTHONPATH", "")])
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="0")
    return [sys.executable, "-m", "bench.client_models", *map(str, args)], env


# --- in the child: the models ---------------------------------------------------------------

def _tokenizer(directory: Path) -> None:
    """A word-level tokenizer of :data:`VOCAB` tokens (``t3`` ... and ``<unk> <s> </s>``),
    saved as a fast tokenizer: genai's builder and configs want one; nothing downloads."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, VOCAB)}}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>", pad_token="</s>").save_pretrained(directory)


def _hf_model(family: str, directory: Path) -> None:
    """A tiny random-weight model of ``family`` saved as transformers saves one (seed 0)."""
    import torch
    import transformers as t

    torch.manual_seed(0)
    small = {"vocab_size": VOCAB, "max_position_embeddings": 256}
    decoder = {**small, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2}
    models = {
        "bart": lambda: t.BartForConditionalGeneration(t.BartConfig(
            d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, init_std=0.3,
            **small)),
        "t5": lambda: t.T5ForConditionalGeneration(t.T5Config(
            vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
            decoder_start_token_id=0, initializer_factor=4.0)),
        "llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**decoder)),
        "qwen2": lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**decoder)),
    }
    models[family]().eval().save_pretrained(directory)
    _tokenizer(directory)


def make(flow: Flow, out: Path) -> None:
    """``flow``'s model directory at ``out`` (which must not exist)."""
    work = Path(tempfile.mkdtemp(prefix="hf-"))
    try:
        family = flow.family.removesuffix("-merged")
        _hf_model(family, work)
        if flow.client == "genai":  # its builder's command line, as genai's docs run it
            subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-m",
                            str(work), "-o", str(out), "-p", flow.precision, "-e", "cpu",
                            "-c", str(work / "cache")], check=True, capture_output=True)
            return
        _optimum_export(flow, family, work, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _optimum_export(flow: Flow, family: str, source: Path, out: Path) -> None:
    from optimum.exporters.onnx import main_export

    task = "text2text-generation-with-past" if family in ("bart", "t5") else \
        "text-generation-with-past"
    main_export(str(source), out, task=task, do_validation=False)
    if flow.family.endswith("-merged"):  # the legacy decoder-only layout, by optimum's tool
        from optimum.onnx import merge_decoders

        model = out / "model.onnx"
        merge_decoders(model, model, save_path=out / "decoder_model_merged.onnx")
        model.unlink()
    if flow.external:  # as optimum saves a model above 2 GB: its data in model.onnx_data
        import onnx

        proto = onnx.load(out / "model.onnx")
        onnx.save(proto, out / "model.onnx", save_as_external_data=True,
                  location="model.onnx_data", size_threshold=1024)


def generate(flow: Flow, directory: Path, out: Path) -> None:
    """Greedy generation of :data:`NEW_TOKENS` tokens from :data:`PROMPT` in ``flow``'s
    client; ``out`` (.npz): the tokens, the logits of each step, and which files it read."""
    if flow.client == "genai":
        tokens, logits = _generate_genai(directory)
        files: list[str] = ["model.onnx"]
    else:
        tokens, logits, files = _generate_optimum(flow, directory)
    np.savez(out, tokens=np.asarray(tokens, np.int64), logits=np.stack(logits),
             files=np.asarray(json.dumps(files)))


def _generate_optimum(flow: Flow, directory: Path) -> tuple[list[int], list[Any], list[str]]:
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM, ORTModelForSeq2SeqLM

    seq2seq = flow.family in ("bart", "t5")
    loader = ORTModelForSeq2SeqLM if seq2seq else ORTModelForCausalLM
    model = loader.from_pretrained(directory)  # its default load: the merged decoder
    ids = torch.tensor([PROMPT])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                         max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                         output_scores=True, return_dict_in_generate=True)
    parts = [model, *vars(model).values()]  # a causal model is its session; a seq2seq's parts
    files = sorted({part.path.name for part in parts
                    if isinstance(getattr(part, "path", None), Path)})
    return out.sequences[0].tolist(), [s.numpy() for s in out.scores], files


def _generate_genai(directory: Path) -> tuple[list[int], list[Any]]:
    import onnxruntime_genai as og

    model = og.Model(str(directory))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(PROMPT) + NEW_TOKENS, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens([PROMPT])
    logits = []
    for _ in range(NEW_TOKENS):  # (genai's is_done does not end at max_length: a bound)
        logits.append(np.array(generator.get_logits(), copy=True))
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)], logits


def main(argv: list[str]) -> None:
    """``make FLOW DIR [OUT.npz]`` (and generate from it, in the same child: the client's
    imports are most of a tiny model's time) or ``generate FLOW DIR OUT.npz``."""
    verb, flow = argv[0], FLOWS[argv[1]]
    if verb not in ("make", "generate"):
        raise SystemExit(f"unknown verb {verb}")
    if verb == "make":
        make(flow, Path(argv[2]))
    if len(argv) > 3:
        generate(flow, Path(argv[2]), Path(argv[3]))


if __name__ == "__main__":
    main(sys.argv[1:])
