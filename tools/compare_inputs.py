"""The models ``tools.compare_commits`` folds with both commits, and the options it folds them with.

Four sources, each a list of :class:`Input` (a name and a path):

- the models tier: ``models/*.onnx`` of the repository;
- the exports of ``tests/support/export_models.py`` (small transformers models with random
  weights, exported by torch), built once into a cache outside the tree, since an export takes
  seconds and torch's output is not byte-stable across versions;
- the wild corpus (``tools.wild_corpus``'s cache; absent: skipped, with a message);
- fuzz graphs of ``tools.fuzz.graphgen``, seeds 0..N-1, each generated once and written to the
  run's directory.

Every input is folded with the default options; the models tier, the exports, the wild corpus
and the first :data:`FLAG_SEEDS` fuzz seeds also with each of :data:`VARIANTS`, the flags the
tests set most (``--strict``, ``--allow-growth``, ``--fold-qdq --fold-fp16-casts``) and those
the run's settings carry (``--keep`` of three ops, ``--assume-named-dims-equal``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tools import wild_corpus

DEFAULT: dict[str, object] = {}
VARIANTS: dict[str, dict[str, object]] = {
    "strict": {"strict": True},
    "allow-growth": {"growth_factor": None},
    "qdq-fp16": {"fold_qdq": True, "fold_fp16_casts": True},
    # what the run's settings carry to patterns, cleanups and the dim algebra
    "keep-named-dims": {"keep": ["Identity", "Transpose", "Reshape"],
                        "assume_named_dims_equal": True},
}
FLAG_SEEDS = 200
EXPORTS = {
    "bert_float16": "m.bert_float16(p)",
    "qwen2_float16": "m.qwen2_float16(p)",
    "qwen2_kv_dynamo": "m.qwen2_kv_cache(p, dynamo=True)",
    "qwen2_kv_torchscript": "m.qwen2_kv_cache(p, dynamo=False)",
    "resnet_dynamo": "m.resnet_dynamo(p)",
    "t5_torchscript": "m.t5_torchscript(p)",
}


@dataclass(frozen=True)
class Input:
    """A model to fold, named for the report (``wild/silero_vad``, ``fuzz/17``)."""

    name: str
    path: Path
    variants: tuple[str, ...] = field(default=tuple(VARIANTS))


def models_tier(root: Path) -> list[Input]:
    return [Input(f"models/{p.stem}", p) for p in sorted((root / "models").glob("*.onnx"))]


def export_cache() -> Path:
    env = os.environ.get("ONNXFOLD_COMPARE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "onnxfold-compare"


def exports(root: Path, log) -> list[Input]:
    """The tests/exports models, built into :func:`export_cache` by a child process if missing."""
    cache = export_cache() / "exports"
    missing = [name for name in EXPORTS if not (cache / f"{name}.onnx").exists()]
    if missing:
        cache.mkdir(parents=True, exist_ok=True)
        log(f"building {len(missing)} exports into {cache} (once)")
        lines = ["import sys", "sys.path.insert(0, '.')",
                 "from tests.support import export_models as m"]
        for name in missing:
            target = cache / f"{name}.onnx"
            part = cache / f"{name}.part.onnx"
            lines += [f"p = {str(part)!r}", EXPORTS[name],
                      f"import os; os.replace(p, {str(target)!r})"]
        proc = subprocess.run([sys.executable, "-c", "\n".join(lines)], cwd=root,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
            log(f"exports not built (skipped): {tail}")
    return [Input(f"exports/{name}", cache / f"{name}.onnx") for name in EXPORTS
            if (cache / f"{name}.onnx").exists()]


def wild(log) -> list[Input]:
    models = wild_corpus.default_cache() / "models"
    found = [Input(f"wild/{entry.name}", models / f"{entry.name}.onnx")
             for entry in wild_corpus.ENTRIES if (models / f"{entry.name}.onnx").exists()]
    if not found:
        log(f"wild corpus not in {models} (skipped): python -m tools.wild_corpus fetch")
    elif len(found) < len(wild_corpus.ENTRIES):
        log(f"wild corpus: {len(found)} of {len(wild_corpus.ENTRIES)} models present")
    return found


def fuzz(count: int, directory: Path) -> list[Input]:
    """Seeds 0..count-1 of the fuzz generator, written to ``directory`` (generated once)."""
    import onnx

    from tools.fuzz import graphgen

    directory.mkdir(parents=True, exist_ok=True)
    inputs = []
    for seed in range(count):
        path = directory / f"{seed}.onnx"
        onnx.save(graphgen.generate(seed).model, path)
        variants = tuple(VARIANTS) if seed < FLAG_SEEDS else ()
        inputs.append(Input(f"fuzz/{seed}", path, variants))
    return inputs
