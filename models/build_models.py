"""Build the small models shipped in models/ (run once; the outputs are committed).

Usage: python models/build_models.py [OUT_DIR]      (needs torch and transformers)

- tiny_bert_ts.onnx   : a 2-layer BERT (hidden 64) from its transformers config, random weights
                        (seed 0), TorchScript export with do_constant_folding=False, opset 17:
                        the exporter's weight transposes and shape arithmetic stay in the graph.
- tiny_gpt2_ts.onnx   : the same for a 2-layer GPT-2 with a tied embedding.
- tiny_bert_ts_dynamic.onnx : tiny_bert_ts with ``batch`` and ``seq`` dynamic (exported at
                        batch 2): its attention's shapes are Shape, Gather and Concat chains.
"""

import os
import sys

import torch

SEQ = 16


class FirstOutput(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)[0]


def _bert():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, vocab_size=512, max_position_embeddings=64)
    return BertModel(cfg)


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=512, n_positions=64,
                     use_cache=False)
    return GPT2LMHeadModel(cfg)


def export(out_dir: str, name: str, factory, dynamic: bool = False) -> None:
    torch.manual_seed(0)
    model = FirstOutput(factory()).eval()
    batch = 2 if dynamic else 1
    ids = torch.randint(0, 512, (batch, SEQ))
    mask = torch.ones(batch, SEQ, dtype=torch.int64)
    path = os.path.join(out_dir, name + ".onnx")
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    with torch.no_grad():
        torch.onnx.export(model, (ids, mask), path, dynamo=False, do_constant_folding=False,
                          input_names=["input_ids", "attention_mask"], output_names=["output"],
                          opset_version=17, dynamic_axes=axes if dynamic else None)
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    export(out, "tiny_bert_ts", _bert)
    export(out, "tiny_gpt2_ts", _gpt2)
    export(out, "tiny_bert_ts_dynamic", _bert, dynamic=True)
