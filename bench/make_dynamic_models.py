"""Export models whose batch / sequence axes stay dynamic (issue #13's benchmark models).

Usage: python bench/make_dynamic_models.py OUT_DIR [--only NAME ...] [--layers L]

Needs torch (CPU: ``pip install torch==2.13.0``, installed BEFORE transformers), then
``transformers`` and ``onnxscript`` (the dynamo exporter imports it); run it in a venv of its
own, not onnxfold's. Random weights (seed 0; every transformer parameter drawn from
N(0, 0.02), so no bias is all zeros and no peer gets credit for x + 0 -> x); nothing is
downloaded. Each export runs in its own child process (RAM stays low).

- ``cnn_dyn``: small CNN with ``x.view(x.size(0), -1)`` and
  ``F.interpolate(y, size=a.shape[-2:])``; TorchScript exporter, opset 17,
  ``do_constant_folding=False``, ``dynamic_axes``; dynamic ``N``.
- ``gpt2_ts_dyn``: GPT-2 small sizes (768 wide, 12 heads, vocab 50257), ``--layers`` blocks
  (default 2), ``use_cache=False``; TorchScript exporter as above; dynamic ``N`` and ``seq``.
- ``gpt2_dynamo_dyn``: the same GPT-2, dynamo exporter (``dynamo=True, optimize=False,
  dynamic_shapes=``, its default opset); dynamic ``batch`` and ``seq``.
- ``bert_ts_dyn``: BERT-base sizes, ``--layers`` blocks, sequence 128; TorchScript exporter as
  above; dynamic ``N``.
"""
import argparse
import os
import subprocess
import sys

NAMES = ["cnn_dyn", "gpt2_ts_dyn", "gpt2_dynamo_dyn", "bert_ts_dyn"]


def _cnn():
    import torch
    import torch.nn.functional as F  # noqa: N812 - torch's own spelling

    class SmallCNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1, stride=2)
            self.c3 = torch.nn.Conv2d(8, 4, 3, padding=1, stride=2)
            self.fc = torch.nn.Linear(4 * 16 * 16, 10)

        def forward(self, x):
            a = F.relu(self.c1(x))                              # [N, 8, 32, 32]
            y = F.relu(self.c2(a))                              # [N, 8, 16, 16]
            y = F.interpolate(y, size=a.shape[-2:], mode="nearest")
            z = F.relu(self.c3(a + y))                          # [N, 4, 16, 16]
            return self.fc(z.view(z.size(0), -1))

    return SmallCNN(), (torch.randn(2, 3, 32, 32),), ["x"], {"x": {0: "N"}}, None


def _gpt2(layers):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    class GPT2Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          return_dict=False)[0]

    m = GPT2LMHeadModel(GPT2Config(n_layer=layers, use_cache=False))
    ids = torch.randint(0, 1000, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    axes = {"input_ids": {0: "N", 1: "seq"}, "attention_mask": {0: "N", 1: "seq"}}
    batch = torch.export.Dim("batch", min=1, max=64)
    seq = torch.export.Dim("seq", min=2, max=1024)
    shapes = ({0: batch, 1: seq}, {0: batch, 1: seq})
    return GPT2Logits(m), (ids, mask), ["input_ids", "attention_mask"], axes, shapes


def _bert(layers):
    import torch
    from transformers import BertConfig, BertModel

    class FirstOutput(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *args):
            return self.m(*args, return_dict=False)[0]

    m = BertModel(BertConfig(num_hidden_layers=layers))
    ids = torch.randint(0, 1000, (2, 128))
    mask = torch.ones(2, 128, dtype=torch.int64)
    tt = torch.zeros(2, 128, dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    return FirstOutput(m), (ids, mask, tt), names, {n: {0: "N"} for n in names}, None


def export(out_dir, name, layers):
    import torch

    torch.manual_seed(0)
    if name == "cnn_dyn":
        model, args, in_names, axes, shapes = _cnn()
    elif name in ("gpt2_ts_dyn", "gpt2_dynamo_dyn"):
        model, args, in_names, axes, shapes = _gpt2(layers)
    else:
        model, args, in_names, axes, shapes = _bert(layers)
    if name != "cnn_dyn":  # transformers initialise biases to 0 (and LayerNorm to 1): a
        with torch.no_grad():  # peer's x + 0 -> x would count as scaffolding removed
            for p in model.parameters():
                p.normal_(0.0, 0.02)
    model.eval()
    path = os.path.join(out_dir, name + ".onnx")
    axes = {**axes, "output": {0: "N"} if name != "gpt2_ts_dyn" else {0: "N", 1: "seq"}}
    with torch.no_grad():
        if name.endswith("_dynamo_dyn"):
            prog = torch.onnx.export(model, args, dynamo=True, optimize=False,
                                     dynamic_shapes=shapes, input_names=in_names,
                                     output_names=["output"])
            prog.save(path, external_data=False)
        else:
            torch.onnx.export(model, args, path, dynamo=False, do_constant_folding=False,
                              input_names=in_names, output_names=["output"],
                              dynamic_axes=axes, opset_version=17)
    print("wrote", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--only", nargs="*", choices=NAMES)
    ap.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    if a.child:
        export(a.out_dir, a.child, a.layers)
        return
    for n in a.only or NAMES:
        subprocess.run([sys.executable, os.path.abspath(__file__), a.out_dir, "--child", n,
                        "--layers", str(a.layers)], check=True)


if __name__ == "__main__":
    main()
