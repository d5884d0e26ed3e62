"""An LLM-shaped export for the per-node cost (issue #16): a deep, narrow Llama decoder.

Usage (in a venv with torch, transformers and onnxscript, not onnxfold's; see
``make_dynamic_models.py`` for how to make one)::

    /tmp/torchvenv/bin/python bench/make_llm_model.py [OUT_DIR] [--layers 32] [--hidden 64]

OUT_DIR defaults to ``~/.cache/onnxfold-bench`` (outside git); writes ``llama_L{layers}_dyn.onnx``.

A ``transformers`` ``LlamaForCausalLM`` from a config (nothing is downloaded): ``--layers``
decoder layers (default 32), hidden size ``--hidden`` (default 64), 4 heads with 2 key/value
heads (grouped-query attention), MLP 4x hidden, vocabulary 1024, rotary embeddings,
``use_cache=False``; random weights (seed 0, every parameter from N(0, 0.02), so no bias or norm
weight is a trivial constant). Inputs ``input_ids`` and ``attention_mask`` ``[batch, seq]`` (int64),
output ``logits``. Exported with the dynamo exporter (``torch.onnx.export(..., dynamo=True,
optimize=False, dynamic_shapes=...)``, its default opset), dynamic ``batch`` and ``seq``: the
shape scaffolding (Shape, Gather, Concat, Reshape, Expand of the mask and rotary tables) stays
in the graph, as a real LLM export has it, with a few MiB of weights, so the cost is per node.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

DEFAULT_OUT = Path.home() / ".cache" / "onnxfold-bench"


def export(out_dir: Path, layers: int, hidden: int) -> Path:
    import sys

    # a torchvision built for another torch breaks transformers' import of any model (it
    # imports torchvision for its image utilities when it finds it): hide it, it is not needed
    sys.modules.setdefault("torchvision", None)  # type: ignore[arg-type]
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=1024, hidden_size=hidden, intermediate_size=4 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=2048, use_cache=False, tie_word_embeddings=False)
    cfg._attn_implementation = "eager"  # plain ops: no fused SDPA kernel to hide the graph

    class Logits(torch.nn.Module):
        def __init__(self, m: torch.nn.Module) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          use_cache=False, return_dict=False)[0]

    model = Logits(LlamaForCausalLM(cfg))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    model.eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    batch = torch.export.Dim("batch", min=1, max=64)
    seq = torch.export.Dim("seq", min=2, max=1024)
    shapes = ({0: batch, 1: seq}, {0: batch, 1: seq})
    path = out_dir / f"llama_L{layers}_dyn.onnx"
    with torch.no_grad():
        prog = torch.onnx.export(model, (ids, mask), dynamo=True, optimize=False,
                                 dynamic_shapes=shapes,
                                 input_names=["input_ids", "attention_mask"],
                                 output_names=["logits"])
    tmp = path.with_suffix(".onnx.tmp")
    prog.save(str(tmp), external_data=False)
    os.replace(tmp, path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", nargs="?", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=64)
    a = ap.parse_args()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    path = export(a.out_dir, a.layers, a.hidden)
    import onnx

    m = onnx.load(str(path))
    print(f"wrote {path}: {len(m.graph.node)} nodes, {len(m.graph.initializer)} initializers, "
          f"{path.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
