"""The models the benchmarks (and some tests) build: small ONNX graphs made with
``onnx.helper``, and fresh exports of ``transformers`` models from configs with random weights.

Graph builders return an ``onnx.ModelProto`` (numpy and onnx only; deterministic: seeded
weights, fixed names). Exports need torch and transformers (imported inside ``export``, a heavy
optional dependency deferred on purpose) and write ``NAME.onnx`` plus the example inputs of the
export as ``NAME.inputs.npz``; nothing is downloaded. ``python -m bench.builders NAME DIR``
builds one of ``GRAPHS`` or ``EXPORTS`` into DIR unless it is there (``build_cached``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper, numpy_helper

SEQ = 128  # sequence length of the static exports and of the example inputs
DEEP_WIDTH, DEEP_BATCH = 16, 4


def deep_graph(layers: int) -> ModelProto:
    """``layers`` layers of 6 nodes on ``x: float[4, 16]`` (2,000 layers: the 12k-node graph)::

        wt = Transpose(W_i)      W_i: float[16, 16] initializer  -> folds
        w  = Mul(wt, S_i)        S_i: float[1, 16] initializer   -> folds
        s  = Shape(h)            h's shape is static             -> folds
        r  = Reshape(h, s)       a reshape to its own shape      -> removed
        m  = MatMul(r, w)
        h' = Tanh(m)

    Many small nodes and tiny weights: the per-node cost of a tool, not its weight handling.
    """
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    h = "x"
    for i in range(layers):
        w = (rng.standard_normal((DEEP_WIDTH, DEEP_WIDTH)) / np.sqrt(DEEP_WIDTH)).astype(np.float32)
        s = (1.0 + 0.1 * rng.standard_normal((1, DEEP_WIDTH))).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"W{i}"), numpy_helper.from_array(s, f"S{i}")]
        p = f"l{i}_"
        nodes += [
            helper.make_node("Transpose", [f"W{i}"], [p + "wt"], p + "transpose", perm=[1, 0]),
            helper.make_node("Mul", [p + "wt", f"S{i}"], [p + "w"], p + "mul"),
            helper.make_node("Shape", [h], [p + "shape"], p + "shape"),
            helper.make_node("Reshape", [h, p + "shape"], [p + "r"], p + "reshape"),
            helper.make_node("MatMul", [p + "r", p + "w"], [p + "m"], p + "matmul"),
            helper.make_node("Tanh", [p + "m"], [p + "h"], p + "tanh"),
        ]
        h = p + "h"
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes, f"deep_{layers}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [DEEP_BATCH, DEEP_WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [DEEP_BATCH, DEEP_WIDTH])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             producer_name="onnxfold-bench")


def merge_graph(layers: int) -> ModelProto:
    """``layers`` layers of dynamo's q, k, v on ``x: float[N, 8]``: three
    ``MatMul(h, Transpose(W_ij))`` reading one input, added, then ``Tanh``. Each three merge
    into one MatMul and a Split, their Transposes moved before the first: what the merges cost
    as a model gets deeper (docs/time-bounds.md)."""
    rng = np.random.default_rng(0)
    width, nodes, inits = 8, [], []
    h = "x"
    for i in range(layers):
        products = []
        for j in range(3):
            w = f"W{i}_{j}"
            inits.append(numpy_helper.from_array(
                rng.standard_normal((width, width)).astype(np.float32), w))
            nodes += [helper.make_node("Transpose", [w], [w + "_t"], f"t{i}_{j}", perm=[1, 0]),
                      helper.make_node("MatMul", [h, w + "_t"], [f"m{i}_{j}"], f"mm{i}_{j}")]
            products.append(f"m{i}_{j}")
        nodes += [helper.make_node("Add", products[:2], [f"a{i}"], f"a{i}"),
                  helper.make_node("Add", [f"a{i}", products[2]], [f"b{i}"], f"b{i}"),
                  helper.make_node("Tanh", [f"b{i}"], [f"h{i}"], f"tanh{i}")]
        h = f"h{i}"
    graph = helper.make_graph(
        nodes, f"merges_{layers}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, ["N", width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             producer_name="onnxfold-bench")


def cdist_model(rows: int) -> ModelProto:
    """``x + ReduceMax(CDist(A, A))``: a ``rows`` x ``rows`` float32 matrix from a ``rows`` x 8
    constant. ``com.microsoft::CDist``'s output has no dims onnxruntime can size before it runs,
    so this is the contrib op a pool budget must hold for (16,000 rows: 1 GB from 0.5 MB)."""
    a = np.random.default_rng(0).standard_normal((rows, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("CDist", ["A", "A"], ["d"], domain="com.microsoft"),
         helper.make_node("ReduceMax", ["d"], ["m"], keepdims=0),
         helper.make_node("Add", ["x", "m"], ["y"])], "cdist",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(a, "A")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


def many_weight_mlp(count: int, width: int = 33) -> ModelProto:
    """A chain of ``count`` MatMuls, each with its own inline ``width`` x ``width`` weight,
    ending in an Add of a folded constant (``b * b``). 33 x 33 float32 is 4,356 B, just over the
    reader's 4 KiB threshold: every weight is one the reader must map or copy on its own."""
    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    for i in range(count):
        weight = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        inits.append(numpy_helper.from_array(weight, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"]))
        prev = f"h{i}"
    inits.append(numpy_helper.from_array(np.full((width,), 0.5, np.float32), "b"))
    nodes += [helper.make_node("Mul", ["b", "b"], ["bb"]),
              helper.make_node("Add", [prev, "bb"], ["y"])]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def constant_weight_chain(count: int, width: int = 1024) -> ModelProto:
    """A chain of ``count`` ``MatMul``s, each reading a ``Transpose`` of its own ``width`` x
    ``width`` float32 weight held in a ``Constant`` node (as Paddle exports weights), with a
    dynamic batch: 24 x 1024 x 1024 is 96 MiB of weights the fold transposes."""
    rng = np.random.default_rng(0)
    nodes, prev = [], "x"
    for i in range(count):
        weight = rng.standard_normal((width, width)).astype(np.float32)
        nodes += [helper.make_node("Constant", [], [f"w{i}"],
                                   value=numpy_helper.from_array(weight, f"w{i}_value")),
                  helper.make_node("Transpose", [f"w{i}"], [f"t{i}"], perm=[1, 0]),
                  helper.make_node("MatMul", [prev, f"t{i}"], [f"h{i}"]),
                  helper.make_node("Relu", [f"h{i}"], [f"r{i}"])]
        prev = f"r{i}"
    graph = helper.make_graph(
        nodes, "constants",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["batch", width])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# --------------------------------------------------------------------------------------------
# Exports: each factory takes the torch module and returns (module, example inputs by name,
# dynamic dims by input name or None for a static export).


def _bert(torch: Any, half: bool) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    from transformers import BertConfig, BertModel

    class Hidden(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids, return_dict=False)[0]

    model = Hidden(BertModel(BertConfig()))
    if half:
        model = model.half()
    inputs = {"input_ids": torch.randint(0, 1000, (1, SEQ)),
              "attention_mask": torch.ones(1, SEQ, dtype=torch.int64),
              "token_type_ids": torch.zeros(1, SEQ, dtype=torch.int64)}
    dims = None
    if half:  # the float16 export a user ships: dynamic batch and sequence
        batch, seq = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", max=512)
        dims = {name: {0: batch, 1: seq} for name in inputs}
    return model, inputs, dims


def _distilbert(torch: Any) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    """DistilBERT-base (transformers' default config): ids and mask, static (1, 128)."""
    from transformers import DistilBertConfig, DistilBertModel

    class Hidden(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          return_dict=False)[0]

    inputs = {"input_ids": torch.randint(0, 1000, (1, SEQ)),
              "attention_mask": torch.ones(1, SEQ, dtype=torch.int64)}
    return Hidden(DistilBertModel(DistilBertConfig())), inputs, None


def _logits_of(torch: Any) -> Any:
    """A torch module class that returns only a language model's logits (no cache, no dict):
    one output for the exporters, the same for every model built here."""

    class Logits(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          use_cache=False, return_dict=False)[0]

    return Logits


def _seq2seq_logits_of(torch: Any) -> Any:
    """:func:`_logits_of` for an encoder-decoder language model (T5, BART): the decoder's
    input ids too."""

    class Logits(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids: Any, attention_mask: Any, decoder_input_ids: Any) -> Any:
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          decoder_input_ids=decoder_input_ids, use_cache=False,
                          return_dict=False)[0]

    return Logits


def _gpt2(torch: Any) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    from transformers import GPT2Config, GPT2LMHeadModel

    model = _logits_of(torch)(GPT2LMHeadModel(GPT2Config(use_cache=False)))
    inputs = {"input_ids": torch.randint(0, 1000, (1, SEQ)),
              "attention_mask": torch.ones(1, SEQ, dtype=torch.int64)}
    batch, seq = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", max=1024)
    return model, inputs, {name: {0: batch, 1: seq} for name in inputs}


def kv_step(torch: Any, model: Any, layers: int, cfg: Any) -> Any:
    """``model`` (a causal LM of ``layers`` layers, config ``cfg``) as one decoding step with
    flat tensors in and out: ids, mask, positions and every layer's past keys and values in;
    logits and the present keys and values out."""
    from transformers import DynamicCache

    class Step(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any,
                    *past: Any) -> tuple[Any, ...]:
            cache = DynamicCache(config=cfg)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.m(input_ids=input_ids, attention_mask=attention_mask,
                         position_ids=position_ids, past_key_values=cache, use_cache=True,
                         return_dict=True)
            present = [t for layer in out.past_key_values.layers
                       for t in (layer.keys, layer.values)]
            return (out.logits, *present)

    return Step(model).eval()


def _qwen2_kv(torch: Any) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    """A Qwen2-style decoder step with a KV cache: 4 layers, hidden 512, grouped-query attention."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    layers, heads, kv_heads, hidden = 4, 8, 2, 512
    cfg = Qwen2Config(vocab_size=32000, hidden_size=hidden, intermediate_size=1408,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, max_position_embeddings=4096,
                      tie_word_embeddings=False)
    cfg._attn_implementation = "eager"  # plain ops, as an export for onnxruntime has them

    past_len, seq = 16, 8
    inputs = {"input_ids": torch.randint(0, 32000, (1, seq)),
              "attention_mask": torch.ones(1, past_len + seq, dtype=torch.int64),
              "position_ids": torch.arange(past_len, past_len + seq).unsqueeze(0)}
    for i in range(layers):
        for kind in ("key", "value"):
            inputs[f"past_key_values.{i}.{kind}"] = torch.randn(1, kv_heads, past_len,
                                                                hidden // heads)
    d = torch.export.Dim
    batch, s, past = d("batch", min=1, max=64), d("seq", max=1024), d("past", max=2048)
    dims = {"input_ids": {0: batch, 1: s}, "attention_mask": {0: batch, 1: d("total", max=3072)},
            "position_ids": {0: batch, 1: s}}
    dims.update({name: {0: batch, 2: past} for name in inputs if name.startswith("past_")})
    return kv_step(torch, Qwen2ForCausalLM(cfg), layers, cfg), inputs, dims


def _t5(torch: Any) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(d_model=512, d_ff=2048, num_layers=6, num_heads=8, d_kv=64,
                   use_cache=False)  # t5-small sizes
    inputs = {"input_ids": torch.randint(0, 1000, (1, SEQ)),
              "attention_mask": torch.ones(1, SEQ, dtype=torch.int64),
              "decoder_input_ids": torch.randint(0, 1000, (1, 16))}
    return _seq2seq_logits_of(torch)(T5ForConditionalGeneration(cfg)), inputs, None


def _bart(torch: Any) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    """A small BART encoder-decoder LM (2 + 2 layers, d_model 256, 4 heads): dynamic batch,
    source and target lengths."""
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(vocab_size=1000, d_model=256, encoder_layers=2, decoder_layers=2,
                     encoder_attention_heads=4, decoder_attention_heads=4,
                     encoder_ffn_dim=512, decoder_ffn_dim=512, max_position_embeddings=512,
                     use_cache=False)
    inputs = {"input_ids": torch.randint(4, 1000, (2, 12)),
              "attention_mask": torch.ones(2, 12, dtype=torch.int64),
              "decoder_input_ids": torch.randint(4, 1000, (2, 7))}
    d = torch.export.Dim
    batch, seq, dec = d("batch", min=1, max=64), d("seq", max=512), d("dec", max=512)
    dims = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq},
            "decoder_input_ids": {0: batch, 1: dec}}
    return _seq2seq_logits_of(torch)(BartForConditionalGeneration(cfg)), inputs, dims


def _resnet(torch: Any) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    """A ResNet-50 classifier (transformers' default ResNetConfig): dynamic batch and image
    height and width (its flatten reads the batch from the input's shape)."""
    from transformers import ResNetConfig, ResNetForImageClassification

    class Logits(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, pixel_values: Any) -> Any:
            return self.m(pixel_values=pixel_values, return_dict=False)[0]

    d = torch.export.Dim
    dims = {"pixel_values": {0: d("batch", min=1, max=64), 2: d("height", min=32, max=1024),
                             3: d("width", min=32, max=1024)}}
    inputs = {"pixel_values": torch.randn(2, 3, 96, 128)}
    return Logits(ResNetForImageClassification(ResNetConfig())), inputs, dims


def _llama(torch: Any, layers: int = 32) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    """A deep, narrow Llama: ``layers`` layers, hidden 64, 4 heads / 2 key-value heads,
    vocabulary 1024; every parameter from N(0, 0.02), so no bias or norm weight is a trivial
    constant. The shape scaffolding of a real LLM export with a few MiB of weights: the cost
    is per node."""
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden = 64
    cfg = LlamaConfig(vocab_size=1024, hidden_size=hidden, intermediate_size=4 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=2048, use_cache=False, tie_word_embeddings=False)
    cfg._attn_implementation = "eager"  # plain ops: no fused SDPA kernel to hide the graph

    model = _logits_of(torch)(LlamaForCausalLM(cfg))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    inputs = {"input_ids": torch.randint(0, cfg.vocab_size, (2, 16)),
              "attention_mask": torch.ones(2, 16, dtype=torch.int64)}
    batch, seq = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=1024)
    return model, inputs, {name: {0: batch, 1: seq} for name in inputs}


# name -> (what it is, exporter "ts" (TorchScript, opset 17, do_constant_folding=False; the
# factory's dynamic dims as named dynamic_axes), "ts-folded" (the same with the exporter's
# constant folding: what users quantize), "dynamo" (optimize=False), "dynamo-data" (the same,
# its weights in NAME.onnx.data) or "dynamo-optimized" (the exporter's own optimize=True),
# the factory)
EXPORTS: dict[str, tuple[str, str, Any]] = {
    "bert_base_ts": ("BERT-base, TorchScript exporter, static (1, 128)", "ts",
                     lambda torch: _bert(torch, half=False)),
    "gpt2_small_dynamo": ("GPT-2 small LM head, dynamo exporter, dynamic batch/seq", "dynamo",
                          _gpt2),
    "qwen2_kv_dynamo": ("Qwen2-style decoder with KV cache (4 layers, hidden 512, GQA), dynamo, "
                        "dynamic batch/seq/past", "dynamo", _qwen2_kv),
    "t5_small_ts": ("T5-small encoder-decoder LM, TorchScript exporter, static", "ts", _t5),
    "bert_base_fp16_dynamo": ("BERT-base in float16 (model.half()), dynamo, dynamic batch/seq",
                              "dynamo", lambda torch: _bert(torch, half=True)),
    "bert_base_dynamo": ("BERT-base, dynamo, dynamic batch/seq, its weights in .onnx.data "
                         "as torch saves them by default", "dynamo-data",
                         lambda torch: _bert(torch, half=False)),
    # the same models as torch's defaults export them (dynamo's optimize=True, TorchScript's
    # constant folding): what users have
    "gpt2_small_dynamo_optimized": ("GPT-2 small LM head, dynamo with the exporter's "
                                    "optimize=True (its default), dynamic batch/seq",
                                    "dynamo-optimized", _gpt2),
    "t5_small_ts_folded": ("T5-small encoder-decoder LM, TorchScript with its constant folding "
                           "(its default), static", "ts-folded", _t5),
    "bert_base_fp16_dynamo_optimized": ("BERT-base in float16 (model.half()), dynamo with the "
                                        "exporter's optimize=True (its default), dynamic "
                                        "batch/seq", "dynamo-optimized",
                                        lambda torch: _bert(torch, half=True)),
    "qwen2_kv_ts": ("Qwen2-style decoder with KV cache (as qwen2_kv_dynamo), TorchScript, "
                    "dynamic batch/seq/past", "ts", _qwen2_kv),
    "qwen2_kv_dynamo_optimized": ("Qwen2-style decoder with KV cache (as qwen2_kv_dynamo), "
                                  "dynamo with the exporter's optimize=True", "dynamo-optimized",
                                  _qwen2_kv),
    "bart_dynamo": ("BART encoder-decoder LM (2+2 layers, d_model 256), dynamo, dynamic "
                    "batch/seq/dec", "dynamo", _bart),
    "resnet50_dynamo": ("ResNet-50 classifier, dynamo, dynamic batch and image size", "dynamo",
                        _resnet),
    "llama_L32_dynamo": ("Llama, 32 layers, hidden 64, GQA, dynamo, dynamic batch/seq", "dynamo",
                         _llama),
    # the same Llama at other depths: the per-layer cost (``python -m bench run layers``)
    **{f"llama_L{n}_dynamo": (f"Llama, {n} layers, hidden 64, GQA, dynamo, dynamic batch/seq",
                              "dynamo", lambda torch, n=n: _llama(torch, layers=n))
       for n in (2, 4, 64, 128)},
    "bert_base_ts_folded": ("BERT-base, TorchScript with its constant folding, static (1, 128)",
                            "ts-folded", lambda torch: _bert(torch, half=False)),
    "distilbert_ts_folded": ("DistilBERT-base, TorchScript with its constant folding, static "
                             "(1, 128)", "ts-folded", _distilbert),
    "resnet50_ts_folded": ("ResNet-50, TorchScript with its constant folding, dynamic batch and "
                           "image size", "ts-folded", _resnet),
}

# name -> (what it is, the export it quantizes, "static" (quantize_static, QDQ format, int8
# weights, uint8 activations, calibrated on 4 sets of random inputs shaped as the export's
# example) or "dynamic" (quantize_dynamic, int8 weights)): as onnxruntime.quantization's users
# ship them
QUANTIZED: dict[str, tuple[str, str, str]] = {
    "bert_base_qdq": ("BERT-base, quantize_static QDQ", "bert_base_ts_folded", "static"),
    "distilbert_qdq": ("DistilBERT-base, quantize_static QDQ", "distilbert_ts_folded", "static"),
    "resnet50_qdq": ("ResNet-50, quantize_static QDQ", "resnet50_ts_folded", "static"),
    "bert_base_qdyn": ("BERT-base, quantize_dynamic", "bert_base_ts_folded", "dynamic"),
}


def export(name: str, work: str | Path) -> Path:
    """Export ``name`` (of ``EXPORTS``) to WORK/NAME.onnx and its example inputs to
    WORK/NAME.inputs.npz; returns the model's path. Run it in a child: torch stays there."""
    sys.modules.setdefault("torchvision", None)  # type: ignore[arg-type]  # not needed, may clash
    import torch

    _, exporter, factory = EXPORTS[name]
    torch.manual_seed(0)
    model, inputs, dims = factory(torch)
    model.eval()
    path = Path(work) / f"{name}.onnx"
    tmp = path.with_suffix(".onnx.tmp")
    args = tuple(inputs.values())
    with torch.no_grad():
        if exporter in ("ts", "ts-folded"):
            axes = {name: {axis: dim.__name__ for axis, dim in by_axis.items()}
                    for name, by_axis in (dims or {}).items()}
            torch.onnx.export(model, args, str(tmp), dynamo=False,
                              do_constant_folding=exporter == "ts-folded",
                              input_names=list(inputs), opset_version=17,
                              dynamic_axes=axes or None)
        else:
            shapes: Any = None
            if dims is not None:  # positional, with the varargs (*past) as one tuple
                n_named = model.forward.__code__.co_argcount - 1
                shapes = [dims.get(n) for n in list(inputs)[:n_named]]
                if len(inputs) > n_named:
                    shapes.append(tuple(dims.get(n) for n in list(inputs)[n_named:]))
                shapes = tuple(shapes)
            prog = torch.onnx.export(model, args, dynamo=True,
                                     optimize=exporter == "dynamo-optimized",
                                     dynamic_shapes=shapes, input_names=list(inputs))
            assert prog is not None  # dynamo=True always returns the program
            if exporter == "dynamo-data":  # as torch saves it by default: NAME.onnx.data
                prog.save(str(path), external_data=True)  # (its location names the file)
            else:
                prog.save(str(tmp), external_data=False)
    if tmp.exists():
        os.replace(tmp, path)
    np.savez(Path(work) / f"{name}.inputs.npz", **{k: v.numpy() for k, v in inputs.items()})
    return path


def quantize(name: str, work: str | Path) -> Path:
    """WORK/NAME.onnx: the export ``QUANTIZED[name]`` names (built first unless it is in WORK),
    quantized by onnxruntime.quantization; its example inputs beside it."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    _, source_name, how = QUANTIZED[name]
    source = build_cached(source_name, Path(work))
    example = dict(np.load(source.with_suffix(".inputs.npz")))
    path = Path(work) / f"{name}.onnx"
    tmp = path.with_name(f"{name}.tmp.onnx")

    class Random(CalibrationDataReader):
        """4 input sets shaped as the example: floats normal, integers in its range."""

        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.sets = iter([{k: (rng.standard_normal(v.shape).astype(v.dtype)
                                   if v.dtype.kind == "f" else
                                   rng.integers(v.min(), v.max() + 1, v.shape, dtype=v.dtype))
                               for k, v in example.items()} for _ in range(4)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.sets, None)

    cwd = os.getcwd()
    os.chdir(work)  # onnxruntime.quantization leaves its scratch files in the working directory
    try:
        if how == "static":
            quantize_static(str(source), str(tmp), Random(), quant_format=QuantFormat.QDQ,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        else:
            quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8)
    finally:
        os.chdir(cwd)
    np.savez(Path(work) / f"{name}.inputs.npz", **example)
    os.replace(tmp, path)
    return path


# The graphs the benchmarks build by name (``python -m bench.builders NAME DIR``).
GRAPHS: dict[str, Callable[[], ModelProto]] = {
    "deep_12k": lambda: deep_graph(2000),
    "mlp_20k": lambda: many_weight_mlp(20_000),
    "cdist_16k": lambda: cdist_model(16_000),
    "cdist_2k": lambda: cdist_model(2_000),
    "merges_1600": lambda: merge_graph(1_600),
    "constants_96m": lambda: constant_weight_chain(24),
}


def _example_inputs(path: Path) -> dict[str, np.ndarray]:
    """Ones for each graph input of the model at ``path``, its named dims 1 (what a
    benchmark's bare onnxruntime session is run on)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    found = {}
    for value in graph.input:
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim]
        found[value.name] = np.ones(dims, helper.tensor_dtype_to_np_dtype(tensor.elem_type))
    return found


def build_cached(name: str, work: Path) -> Path:
    """WORK/NAME.onnx (a graph of ``GRAPHS``, an export of ``EXPORTS`` or a quantized model of
    ``QUANTIZED``), made now unless it
    is there. Run it in a child: building a model raises the process's peak RSS, which Linux
    carries into the children a benchmark measures, and exports import torch."""
    path = work / f"{name}.onnx"
    if name in GRAPHS:
        if not path.exists():
            work.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".onnx.tmp")
            onnx.save(GRAPHS[name](), str(tmp))
            os.replace(tmp, path)
        if not path.with_suffix(".inputs.npz").exists():
            np.savez(path.with_suffix(".inputs.npz"), **_example_inputs(path))
        return path
    if path.exists() and path.with_suffix(".inputs.npz").exists():
        return path
    work.mkdir(parents=True, exist_ok=True)
    return quantize(name, work) if name in QUANTIZED else export(name, work)


if __name__ == "__main__":  # python -m bench.builders NAME DIR: one model, in this process
    print(build_cached(sys.argv[1], Path(sys.argv[2])))
