"""A Llama-style decoder built op by op as TorchScript writes one, its weights streamed into
external data as it is built: never more than one weight in memory.

``build(path, Shape(...))`` writes ``path`` and ``path + ".data"``. The graph is what
``torch.onnx.export(..., dynamo=False, do_constant_folding=False)`` leaves for a
``LlamaForCausalLM`` with a KV cache: every projection weight stored ``[out, in]`` and
transposed in the graph, RMSNorm computed in float32 between casts, rotary embeddings from an
``inv_freq`` buffer and the positions, grouped-query attention whose key-value heads are
repeated by ``Unsqueeze``/``Expand``/``Reshape``, a causal mask from the shapes, SwiGLU, and the
shape arithmetic (``Shape``, ``Gather``, ``Unsqueeze``, ``Concat``) of every reshape. Inputs:
``input_ids`` and ``attention_mask`` (``[batch, seq]``, ``[batch, past + seq]``) and
``past_key_values.N.key``/``.value`` (``[batch, kv_heads, past, head]``); outputs ``logits``
and ``present.N.key``/``.value``. ``Shape(attention=False)`` builds the slice the projections
and MLPs alone make (every weight transposed; no cache, no attention), ``[batch, seq, hidden]``
in and out.

Weights are seeded uniform magnitudes in ``[2^-7, 2^-5)`` with random signs (written as float16
bits, no float arithmetic: 12 GB in about a minute); norms' weights near 1. Offsets in the data
file are 4 KiB aligned. ``python -m bench.llm_model OUT.onnx [--layers N] [--hidden H] ...``.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

ALIGN = 4096


@dataclass(frozen=True)
class Shape:
    """A decoder's sizes (the defaults: a 7B Llama)."""

    layers: int = 32
    hidden: int = 4096
    mlp: int = 11008
    heads: int = 32
    kv_heads: int = 8
    vocab: int = 32000
    attention: bool = True  # False: the projections and MLPs alone (the slice)
    dtype: int = TensorProto.FLOAT16

    @property
    def head(self) -> int:
        return self.hidden // self.heads

    def weight_bytes(self) -> int:
        """The bytes of every weight the model holds."""
        h, m, kv = self.hidden, self.mlp, self.kv_heads * self.head
        per_layer = 2 * h * h + 2 * kv * h + 3 * h * m + 2 * h
        embed = 2 * self.vocab * h + h if self.attention else 0
        item = 2 if self.dtype == TensorProto.FLOAT16 else 4
        return item * (self.layers * per_layer + embed)


class _Writer:
    """Nodes, initializers written to the data file as they come, and fresh names."""

    def __init__(self, data_path: str, seed: int, dtype: int) -> None:
        self.data_name = os.path.basename(data_path)
        self.fd = os.open(data_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.offset = 0
        self.rng = np.random.default_rng(seed)
        self.dtype = dtype
        self.np_dtype = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.count = 0

    def close(self) -> None:
        os.fsync(self.fd)
        os.close(self.fd)

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def node(self, op: str, inputs: list[str], scope: str, out: str | None = None,
             **attrs: object) -> str:
        """One node named as TorchScript names them (``/model/layers.0/self_attn/MatMul``);
        its single output."""
        out = out or self.name(f"{scope}/{op}_output_0")
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.name(f"{scope}/{op}"),
                                           **attrs))
        return out

    def small(self, name: str, array: np.ndarray) -> str:
        self.inits.append(onnx.numpy_helper.from_array(array, name))
        return name

    def weight(self, name: str, dims: tuple[int, ...], norm: bool = False) -> str:
        """A weight of ``dims``, its bytes written to the data file now."""
        count = int(np.prod(dims))
        if self.dtype == TensorProto.FLOAT16:
            bits = self.rng.integers(0, 1 << 16, size=count, dtype=np.uint16)
            # sign, exponent 8 or 9 (2^-7 .. 2^-5), 10 random mantissa bits; norms near 1
            exponent = np.uint16(0x3800 if norm else 0x2000)
            bits = (bits & np.uint16(0x87FF)) | exponent
            data = bits.tobytes()
        else:
            values = self.rng.uniform(0.0078, 0.031, size=count).astype(np.float32)
            values *= np.where(self.rng.integers(0, 2, size=count) == 1, 1, -1)
            data = (values + 1 if norm else values).tobytes()
        pad = -self.offset % ALIGN
        if pad:
            os.pwrite(self.fd, b"\0" * pad, self.offset)
            self.offset += pad
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.pwrite(self.fd, view[done:], self.offset + done)
        tensor = TensorProto(name=name, data_type=self.dtype, dims=dims,
                             data_location=TensorProto.EXTERNAL)
        for key, value in (("location", self.data_name), ("offset", str(self.offset)),
                           ("length", str(len(data)))):
            tensor.external_data.add(key=key, value=value)
        self.offset += len(data)
        self.inits.append(tensor)
        return name


def _int64(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


class _Decoder:
    """The graph of one model, layer by layer."""

    def __init__(self, w: _Writer, s: Shape) -> None:
        self.w, self.s = w, s
        self.zero = w.small("onnx::Gather_zero", np.array(0, np.int64))
        self.one = w.small("onnx::Gather_one", np.array(1, np.int64))
        self.axis0 = w.small("onnx::Unsqueeze_axes0", _int64([0]))

    def dim(self, value: str, index: str, scope: str) -> str:
        """``Unsqueeze(Gather(Shape(value), index))``: one dim as a 1-d tensor."""
        shape = self.w.node("Shape", [value], scope)
        got = self.w.node("Gather", [shape, index], scope, axis=0)
        return self.w.node("Unsqueeze", [got, self.axis0], scope)

    def linear(self, x: str, name: str, out_dim: int, in_dim: int, scope: str) -> str:
        """``x @ W.T`` with ``W: [out, in]`` transposed in the graph (TorchScript's Linear)."""
        weight = self.w.weight(f"{name}.weight", (out_dim, in_dim))
        transposed = self.w.node("Transpose", [weight], scope, perm=[1, 0])
        return self.w.node("MatMul", [x, transposed], scope)

    def rms_norm(self, x: str, name: str, scope: str) -> str:
        w = self.w
        weight = w.weight(f"{name}.weight", (self.s.hidden,), norm=True)
        wide = w.node("Cast", [x], scope, to=TensorProto.FLOAT)
        two = w.small(w.name("onnx::Pow"), np.array(2.0, np.float32))
        squared = w.node("Pow", [wide, two], scope)
        mean = w.node("ReduceMean", [squared], scope, axes=[-1], keepdims=1)
        eps = w.small(w.name("onnx::Add"), np.array(1e-6, np.float32))
        root = w.node("Sqrt", [w.node("Add", [mean, eps], scope)], scope)
        inverse = w.node("Reciprocal", [root], scope)
        normed = w.node("Mul", [wide, inverse], scope)
        narrow = w.node("Cast", [normed], scope, to=self.s.dtype)
        return w.node("Mul", [weight, narrow], scope)

    def heads(self, x: str, batch: str, seq: str, count: int, scope: str) -> str:
        """``[b, s, count * head]`` -> ``[b, count, s, head]``."""
        w = self.w
        fixed = w.small(w.name("onnx::Concat_heads"), _int64([count, self.s.head]))
        shape = w.node("Concat", [batch, seq, fixed], scope, axis=0)
        return w.node("Transpose", [w.node("Reshape", [x, shape], scope)], scope,
                      perm=[0, 2, 1, 3])

    def rotate(self, x: str, cos: str, sin: str, scope: str) -> str:
        """``x * cos + rotate_half(x) * sin``."""
        w, half = self.w, self.s.head // 2
        starts = w.small(w.name("onnx::Slice_starts"), _int64([0]))
        mid = w.small(w.name("onnx::Slice_mid"), _int64([half]))
        end = w.small(w.name("onnx::Slice_end"), _int64([2**62]))
        axes = w.small(w.name("onnx::Slice_axes"), _int64([3]))
        first = w.node("Slice", [x, starts, mid, axes], scope)
        second = w.node("Slice", [x, mid, end, axes], scope)
        rotated = w.node("Concat", [w.node("Neg", [second], scope), first], scope, axis=-1)
        return w.node("Add", [w.node("Mul", [x, cos], scope),
                              w.node("Mul", [rotated, sin], scope)], scope)

    def repeat_kv(self, x: str, batch: str, total: str, scope: str) -> str:
        """``[b, kv, t, head]`` -> ``[b, heads, t, head]`` as HF's ``repeat_kv`` exports."""
        w, s = self.w, self.s
        groups = s.heads // s.kv_heads
        axis2 = w.small(w.name("onnx::Unsqueeze_axes2"), _int64([2]))
        spread = w.node("Unsqueeze", [x, axis2], scope)
        kv = w.small(w.name("onnx::Concat_kv"), _int64([s.kv_heads, groups]))
        head = w.small(w.name("onnx::Concat_head"), _int64([s.head]))
        expanded = w.node("Expand", [spread, w.node("Concat", [batch, kv, total, head], scope,
                                                    axis=0)], scope)
        heads = w.small(w.name("onnx::Concat_heads"), _int64([s.heads]))
        return w.node("Reshape", [expanded, w.node("Concat", [batch, heads, total, head], scope,
                                                   axis=0)], scope)

    def attention(self, h: str, i: int, rope: tuple[str, str], mask: str,
                  graph: onnx.GraphProto) -> str:
        w, s = self.w, self.s
        scope = f"/model/layers.{i}/self_attn"
        prefix = f"model.layers.{i}.self_attn"
        batch, seq = self.dim(h, self.zero, scope), self.dim(h, self.one, scope)
        kv = s.kv_heads * s.head
        q = self.heads(self.linear(h, f"{prefix}.q_proj", s.hidden, s.hidden, scope),
                       batch, seq, s.heads, scope)
        k = self.heads(self.linear(h, f"{prefix}.k_proj", kv, s.hidden, scope),
                       batch, seq, s.kv_heads, scope)
        v = self.heads(self.linear(h, f"{prefix}.v_proj", kv, s.hidden, scope),
                       batch, seq, s.kv_heads, scope)
        q, k = self.rotate(q, *rope, scope), self.rotate(k, *rope, scope)
        past_k, past_v = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        cache_shape = ["batch", s.kv_heads, "past", s.head]
        graph.input.extend(helper.make_tensor_value_info(n, s.dtype, cache_shape)
                           for n in (past_k, past_v))
        present_k = w.node("Concat", [past_k, k], scope, out=f"present.{i}.key", axis=2)
        present_v = w.node("Concat", [past_v, v], scope, out=f"present.{i}.value", axis=2)
        graph.output.extend(helper.make_tensor_value_info(n, s.dtype, ["batch", s.kv_heads,
                                                                       "total", s.head])
                            for n in (present_k, present_v))
        total = self.dim(present_k, w.small(w.name("onnx::Gather_two"), np.array(2, np.int64)),
                         scope)
        keys = self.repeat_kv(present_k, batch, total, scope)
        values = self.repeat_kv(present_v, batch, total, scope)
        scores = w.node("MatMul", [q, w.node("Transpose", [keys], scope, perm=[0, 1, 3, 2])],
                        scope)
        scale = w.small(w.name("onnx::Div"), np.array(np.sqrt(s.head), np.float16
                                                      if s.dtype == TensorProto.FLOAT16
                                                      else np.float32))
        scores = w.node("Add", [w.node("Div", [scores, scale], scope), mask], scope)
        probs = w.node("Softmax", [w.node("Cast", [scores], scope, to=TensorProto.FLOAT)],
                       scope, axis=-1)
        probs = w.node("Cast", [probs], scope, to=s.dtype)
        mixed = w.node("Transpose", [w.node("MatMul", [probs, values], scope)], scope,
                       perm=[0, 2, 1, 3])
        width = w.small(w.name("onnx::Concat_hidden"), _int64([s.hidden]))
        merged = w.node("Reshape", [mixed, w.node("Concat", [batch, seq, width], scope, axis=0)],
                        scope)
        return self.linear(merged, f"{prefix}.o_proj", s.hidden, s.hidden, scope)

    def mlp(self, h: str, i: int) -> str:
        w, s = self.w, self.s
        scope, prefix = f"/model/layers.{i}/mlp", f"model.layers.{i}.mlp"
        gate = self.linear(h, f"{prefix}.gate_proj", s.mlp, s.hidden, scope)
        silu = w.node("Mul", [gate, w.node("Sigmoid", [gate], scope)], scope)
        up = self.linear(h, f"{prefix}.up_proj", s.mlp, s.hidden, scope)
        return self.linear(w.node("Mul", [silu, up], scope), f"{prefix}.down_proj", s.hidden,
                           s.mlp, scope)

    def slice_layer(self, h: str, i: int) -> str:
        """The projections of one layer and its MLP, without attention (the slice)."""
        w, s = self.w, self.s
        scope, prefix = f"/model/layers.{i}/self_attn", f"model.layers.{i}.self_attn"
        kv = s.kv_heads * s.head
        q = self.linear(h, f"{prefix}.q_proj", s.hidden, s.hidden, scope)
        k = self.linear(h, f"{prefix}.k_proj", kv, s.hidden, scope)
        v = self.linear(h, f"{prefix}.v_proj", kv, s.hidden, scope)
        kv_sum = w.node("Add", [k, v], scope)
        tiled = w.node("Tile", [kv_sum, w.small(w.name("onnx::Tile_repeats"),
                                                _int64([1, 1, s.heads // s.kv_heads]))], scope)
        attn = self.linear(w.node("Mul", [q, tiled], scope), f"{prefix}.o_proj", s.hidden,
                           s.hidden, scope)
        h = w.node("Add", [h, attn], f"/model/layers.{i}")
        return w.node("Add", [h, self.mlp(h, i)], f"/model/layers.{i}")

    def rope_and_mask(self, ids: str, mask_in: str) -> tuple[tuple[str, str], str]:
        """cos and sin ``[1, 1, seq, head]`` of the positions ``past .. past + seq``, and the
        additive mask ``[batch, 1, seq, total]`` (causal, and the attention mask's zeros)."""
        w, s = self.w, self.s
        scope = "/model/rotary_emb"
        past = w.node("Gather", [w.node("Shape", ["past_key_values.0.key"], scope),
                                 w.small("onnx::Gather_past", np.array(2, np.int64))], scope,
                      axis=0)
        seq = w.node("Gather", [w.node("Shape", [ids], scope), self.one], scope, axis=0)
        total = w.node("Add", [past, seq], scope)
        positions = w.node("Range", [past, total, self.one], scope)
        inv_freq = w.small("model.rotary_emb.inv_freq", (1.0 / (10000 ** (
            np.arange(0, s.head, 2, dtype=np.float32) / s.head))).astype(np.float32))
        wide = w.node("Cast", [positions], scope, to=TensorProto.FLOAT)
        axis1 = w.small("onnx::Unsqueeze_axes1", _int64([1]))
        freqs = w.node("Mul", [w.node("Unsqueeze", [wide, axis1], scope), inv_freq], scope)
        emb = w.node("Concat", [freqs, freqs], scope, axis=-1)
        axes01 = w.small("onnx::Unsqueeze_axes01", _int64([0, 1]))
        cos = w.node("Unsqueeze", [w.node("Cast", [w.node("Cos", [emb], scope)], scope,
                                          to=s.dtype), axes01], scope)
        sin = w.node("Unsqueeze", [w.node("Cast", [w.node("Sin", [emb], scope)], scope,
                                          to=s.dtype), axes01], scope)
        scope = "/model/causal_mask"
        every = w.node("Range", [self.zero, total, self.one], scope)
        later = w.node("Greater", [every, w.node("Unsqueeze", [positions, axis1], scope)], scope)
        big = np.array(-65504.0 if s.dtype == TensorProto.FLOAT16 else -3.4e38,
                       np.float16 if s.dtype == TensorProto.FLOAT16 else np.float32)
        low = w.small("onnx::Where_low", big)
        zero = w.small("onnx::Where_zero", np.zeros((), big.dtype))
        causal = w.node("Where", [later, low, zero], scope)
        causal = w.node("Unsqueeze", [causal, axes01], scope)
        axes12 = w.small("onnx::Unsqueeze_axes12", _int64([1, 2]))
        kept = w.node("Cast", [w.node("Unsqueeze", [mask_in, axes12], scope)], scope,
                      to=TensorProto.BOOL)
        padding = w.node("Where", [kept, zero, low], scope)
        return (cos, sin), w.node("Add", [causal, padding], scope)


def build(path: str, shape: Shape, seed: int = 0) -> int:
    """Write the decoder of ``shape`` to ``path`` and ``path + ".data"``; returns the bytes of
    its weights. A failure leaves neither file."""
    data_path = path + ".data"
    w = _Writer(data_path, seed, shape.dtype)
    try:
        model = _graph(w, shape)
        w.close()
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(model.SerializeToString())
        os.replace(tmp, path)
    except BaseException:
        for leftover in (data_path, path + ".tmp"):
            if os.path.exists(leftover):
                os.unlink(leftover)
        raise
    return w.offset


def _graph(w: _Writer, s: Shape) -> onnx.ModelProto:
    graph = onnx.GraphProto(name="main_graph")
    d = _Decoder(w, s)
    if s.attention:
        graph.input.extend([
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                          ["batch", "total"])])
        embed = w.weight("model.embed_tokens.weight", (s.vocab, s.hidden))
        h = w.node("Gather", [embed, "input_ids"], "/model/embed_tokens")
        rope, mask = d.rope_and_mask("input_ids", "attention_mask")
    else:
        graph.input.append(helper.make_tensor_value_info("hidden_states", s.dtype,
                                                         ["batch", "seq", s.hidden]))
        h = "hidden_states"
    for i in range(s.layers):
        if not s.attention:
            h = d.slice_layer(h, i)
            continue
        scope = f"/model/layers.{i}"
        normed = d.rms_norm(h, f"model.layers.{i}.input_layernorm", f"{scope}/input_layernorm")
        h = w.node("Add", [h, d.attention(normed, i, rope, mask, graph)], scope)
        normed = d.rms_norm(h, f"model.layers.{i}.post_attention_layernorm",
                            f"{scope}/post_attention_layernorm")
        h = w.node("Add", [h, d.mlp(normed, i)], scope)
    if s.attention:
        h = d.rms_norm(h, "model.norm", "/model/norm")
        logits = d.linear(h, "lm_head", s.vocab, s.hidden, "/lm_head")
        w.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="/lm_head/out"))
        graph.output.insert(0, helper.make_tensor_value_info("logits", s.dtype,
                                                             ["batch", "seq", s.vocab]))
    else:
        w.nodes.append(helper.make_node("Identity", [h], ["output"], name="/out"))
        graph.output.append(helper.make_tensor_value_info("output", s.dtype,
                                                          ["batch", "seq", s.hidden]))
    graph.node.extend(w.nodes)
    graph.initializer.extend(w.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="pytorch", producer_version="2.13.0")
    model.ir_version = 8
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.llm_model", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("output")
    defaults = Shape()
    for field in ("layers", "hidden", "mlp", "heads", "kv_heads", "vocab"):
        ap.add_argument(f"--{field.replace('_', '-')}", type=int, default=getattr(defaults, field))
    ap.add_argument("--slice", action="store_true", help="projections and MLPs only")
    ap.add_argument("--float32", action="store_true")
    a = ap.parse_args(argv)
    shape = Shape(a.layers, a.hidden, a.mlp, a.heads, a.kv_heads, a.vocab, not a.slice,
                  TensorProto.FLOAT if a.float32 else TensorProto.FLOAT16)
    print(f"{build(a.output, shape) / 2**30:.2f} GiB of weights")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
