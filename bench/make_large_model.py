"""Generate a large (default >= 8 GiB) LLM-like ONNX model with external data, in little RAM.

The graph is a stack of decoder-like blocks on an input ``x [1, d]`` (one token, so attention over
one position), with the weight patterns that exporters leave for a constant folder:

* ``ln1 = LayerNormalization(x)``; ``q, k, v = ln1 @ Transpose(Wq_t | Wk_t | Wv_t)``;
  ``attn = Softmax(q @ k^T / sqrt(d)) @ v``; ``x += attn @ Transpose(Wo_t)``: fp32 ``[d, d]``
  weights stored transposed (as PyTorch's Linear keeps them) and fed through Transpose;
* ``ln2 = LayerNormalization(x)``; ``up = Tanh(ln2 @ Transpose(Cast(Wup_t, FLOAT)) + b_up)``:
  an fp16 ``[4d, d]`` weight cast to fp32, then transposed;
* ``x += up @ Transpose(DequantizeLinear(Wdown_t, scale, zero_point, axis=0))``: an int8
  ``[d, 4d]`` weight with per-output-channel scales;
* ``y = LayerNormalization(x)`` at the end.

Bytes per layer: 28 d^2 (16 fp32 + 8 fp16 + 4 int8); layers are added until ``--gib`` is reached
(d = 4096 by default from 2 GiB on: 19 layers, 8.3 GiB for ``--gib 8``; smaller targets get a
smaller power-of-two d and at least 4 layers). Weights are scaled by 1/sqrt(fan_in), so the
activations stay in a sane range and the model runs in onnxruntime.

Every weight is generated with a seeded numpy RNG (one stream per weight) in chunks of at most
``--chunk-mib`` and appended to ``OUT_DIR/NAME.onnx.data`` (offsets aligned to 4 KiB); its
TensorProto only carries ``data_location = EXTERNAL`` with location/offset/length entries. At most
one chunk of one weight is in memory, so building needs a few hundred MiB whatever ``--gib`` is.
Small tensors (LayerNorm parameters, biases, scales, zero points) stay inside the .onnx. The model
is checked with ``onnx.checker.check_model(path)``.

``--check`` then also runs the model in onnxruntime on a seeded random ``x`` and compares ``y``
with a numpy re-implementation that reads the weights back through ``np.memmap`` one at a time
(onnxruntime itself needs about the model's size in RAM for this).

Usage::

    python bench/make_large_model.py OUT_DIR [--gib 8] [--d 4096] [--layers N] [--seed 0]
                                     [--name llm_stack_ext] [--check]
    python bench/make_large_model.py /tmp/small --gib 0.05 --check     # a quick test
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MiB = 1 << 20
GiB = 1 << 30
OPSET = 17
ALIGN = 4096
BYTES_PER_D2 = 4 * 4 + 4 * 2 + 4 * 1  # q, k, v, o fp32 + up fp16 (4d x d) + down int8 (d x 4d)
INT8_STD = math.sqrt((255**2 - 1) / 12)  # std of integers uniform in [-127, 127]
NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
              np.dtype(np.int8): TensorProto.INT8}


class ExternalData:
    """Appends tensors to one external data file; returns TensorProtos that point into it."""

    def __init__(self, path: Path, chunk_bytes: int) -> None:
        self.path = path
        self.location = path.name
        self.chunk_bytes = chunk_bytes
        self.f = open(path, "wb")  # noqa: SIM115 - closed by close()
        self.offset = 0
        self.entries: dict[str, tuple[np.dtype, tuple[int, int], int]] = {}

    def add(self, name: str, dtype: np.dtype, shape: tuple[int, int], seed: list[int],
            kind: str, std: float = 1.0) -> TensorProto:
        """Write a ``[rows, cols]`` tensor, row chunk by row chunk, from its own RNG stream."""
        dtype = np.dtype(dtype)
        pad = -self.offset % ALIGN
        if pad:
            self.f.write(b"\0" * pad)
            self.offset += pad
        start = self.offset
        rows, cols = shape
        rng = np.random.default_rng(seed)
        step = max(1, self.chunk_bytes // (cols * 4))
        for r0 in range(0, rows, step):
            n = min(step, rows - r0)
            if kind == "normal":
                chunk = rng.standard_normal((n, cols), dtype=np.float32)
                chunk *= np.float32(std)
                if dtype != chunk.dtype:
                    chunk = chunk.astype(dtype)
            elif kind == "int8":
                chunk = rng.integers(-127, 128, size=(n, cols), dtype=np.int8)
            else:
                raise ValueError(kind)
            self.f.write(chunk.tobytes())
            del chunk
        length = rows * cols * dtype.itemsize
        self.offset += length
        self.entries[name] = (dtype, shape, start)
        t = TensorProto()
        t.name = name
        t.data_type = NP_TO_ONNX[dtype]
        t.dims.extend(shape)
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.location), ("offset", str(start)),
                           ("length", str(length))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        return t

    def close(self) -> None:
        self.f.close()

    def read(self, name: str) -> np.ndarray:
        """The tensor back from disk (memory-mapped, for --check)."""
        dtype, shape, start = self.entries[name]
        return np.memmap(self.path, dtype=dtype, mode="r", offset=start, shape=shape)


def small_params(layer: int, d: int, seed: int) -> dict[str, np.ndarray]:
    """The per-layer tensors kept inside the .onnx (LayerNorm, bias, int8 scales)."""
    rng = np.random.default_rng([seed, layer, 99])
    f = 4 * d
    return {
        f"l{layer}.ln1_g": (1 + 0.1 * rng.standard_normal(d)).astype(np.float32),
        f"l{layer}.ln1_b": (0.1 * rng.standard_normal(d)).astype(np.float32),
        f"l{layer}.ln2_g": (1 + 0.1 * rng.standard_normal(d)).astype(np.float32),
        f"l{layer}.ln2_b": (0.1 * rng.standard_normal(d)).astype(np.float32),
        f"l{layer}.b_up": (0.1 * rng.standard_normal(f)).astype(np.float32),
        # per output channel; uniform factor in [0.5, 1.5] so channels differ
        f"l{layer}.down_scale": (rng.uniform(0.5, 1.5, d) / (INT8_STD * math.sqrt(f))
                                 ).astype(np.float32),
        f"l{layer}.down_zp": np.zeros(d, np.int8),
    }


def build(out_dir: Path, name: str, d: int, layers: int, seed: int,
          chunk_bytes: int) -> tuple[Path, ExternalData]:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.onnx"
    data = ExternalData(out_dir / f"{name}.onnx.data", chunk_bytes)
    f = 4 * d
    inits: list[TensorProto] = [
        numpy_helper.from_array(np.float32(1 / math.sqrt(d)), "attn_scale"),
        numpy_helper.from_array(np.ones(d, np.float32), "lnf_g"),
        numpy_helper.from_array(np.zeros(d, np.float32), "lnf_b"),
    ]
    nodes: list[onnx.NodeProto] = []
    x = "x"
    t0 = time.perf_counter()

    def node(op: str, ins: list[str], out: str, **attrs: object) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    try:
        for i in range(layers):
            p = f"l{i}."
            inits += [numpy_helper.from_array(v, k) for k, v in small_params(i, d, seed).items()]
            for j, w in enumerate(("Wq_t", "Wk_t", "Wv_t", "Wo_t")):
                inits.append(data.add(p + w, np.float32, (d, d), [seed, i, j], "normal",
                                      1 / math.sqrt(d)))
            inits.append(data.add(p + "Wup_t", np.float16, (f, d), [seed, i, 4], "normal",
                                  1 / math.sqrt(d)))
            inits.append(data.add(p + "Wdown_t", np.int8, (d, f), [seed, i, 5], "int8"))

            ln1 = node("LayerNormalization", [x, p + "ln1_g", p + "ln1_b"], p + "ln1",
                       axis=-1, epsilon=1e-5)
            proj = {}
            for w in ("q", "k", "v"):
                wt = node("Transpose", [p + f"W{w}_t"], p + f"W{w}", perm=[1, 0])
                proj[w] = node("MatMul", [ln1, wt], p + w)
            kt = node("Transpose", [proj["k"]], p + "kT", perm=[1, 0])
            sc = node("MatMul", [proj["q"], kt], p + "scores")
            sc = node("Mul", [sc, "attn_scale"], p + "scores_scaled")
            pr = node("Softmax", [sc], p + "probs", axis=-1)
            att = node("MatMul", [pr, proj["v"]], p + "attn")
            wo = node("Transpose", [p + "Wo_t"], p + "Wo", perm=[1, 0])
            att = node("MatMul", [att, wo], p + "attn_out")
            x = node("Add", [x, att], p + "res1")

            ln2 = node("LayerNormalization", [x, p + "ln2_g", p + "ln2_b"], p + "ln2",
                       axis=-1, epsilon=1e-5)
            up32 = node("Cast", [p + "Wup_t"], p + "Wup_t_f32", to=TensorProto.FLOAT)
            up_w = node("Transpose", [up32], p + "Wup", perm=[1, 0])
            up = node("MatMul", [ln2, up_w], p + "up")
            up = node("Add", [up, p + "b_up"], p + "up_b")
            up = node("Tanh", [up], p + "act")
            dq = node("DequantizeLinear", [p + "Wdown_t", p + "down_scale", p + "down_zp"],
                      p + "Wdown_t_f32", axis=0)
            dn_w = node("Transpose", [dq], p + "Wdown", perm=[1, 0])
            dn = node("MatMul", [up, dn_w], p + "down")
            x = node("Add", [x, dn], p + "res2")
            print(f"layer {i + 1}/{layers}: {data.offset / GiB:.2f} GiB written "
                  f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    finally:
        data.close()
    nodes.append(helper.make_node("LayerNormalization", [x, "lnf_g", "lnf_b"], ["y"],
                                  name="lnf", axis=-1, epsilon=1e-5))
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, d])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="onnxfold-bench-make_large_model")
    model.ir_version = 8
    # the tensors are already external (no raw_data): serialize the small proto as is
    path.write_bytes(model.SerializeToString())
    onnx.checker.check_model(str(path))
    return path, data


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * g + b


def reference(data: ExternalData, d: int, layers: int, seed: int,
              x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy forward pass in float64, one memory-mapped weight at a time: (y, stream)."""
    x = x.astype(np.float64)
    for i in range(layers):
        p = f"l{i}."
        sp = {k.removeprefix(p): v.astype(np.float64) for k, v in small_params(i, d, seed).items()}
        ln1 = _layer_norm(x, sp["ln1_g"], sp["ln1_b"])
        q, k, v = (ln1 @ data.read(p + w).T.astype(np.float64) for w in ("Wq_t", "Wk_t", "Wv_t"))
        s = q @ k.T / math.sqrt(d)
        pr = np.exp(s - s.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        x = x + (pr @ v) @ data.read(p + "Wo_t").T.astype(np.float64)
        ln2 = _layer_norm(x, sp["ln2_g"], sp["ln2_b"])
        up = np.tanh(ln2 @ data.read(p + "Wup_t").T.astype(np.float64) + sp["b_up"])
        wd = data.read(p + "Wdown_t").astype(np.float64) * sp["down_scale"][:, None]
        x = x + up @ wd.T
    return _layer_norm(x, np.ones(d), np.zeros(d)), x


def check(path: Path, data: ExternalData, d: int, layers: int, seed: int) -> float:
    import onnxruntime as ort

    x = np.random.default_rng([seed, 12345]).standard_normal((1, d)).astype(np.float32)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (y,) = sess.run(["y"], {"x": x})
    want, stream = reference(data, d, layers, seed, x)
    diff = float(np.abs(y.astype(np.float64) - want).max())
    print(f"onnxruntime ran it: y finite: {bool(np.isfinite(y).all())}, "
          f"max abs diff vs numpy: {diff:.3g}; residual stream before the final LayerNorm: "
          f"std {stream.std():.3g}, max |.| {np.abs(stream).max():.3g}", file=sys.stderr)
    if not np.isfinite(y).all() or diff > 1e-2:
        raise SystemExit("check FAILED")
    return diff


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--gib", type=float, default=8.0, help="target weight size (default 8)")
    ap.add_argument("--d", type=int, default=None,
                    help="model width (default: 4096 from 2 GiB on, else the largest power of "
                         "two giving >= 4 layers)")
    ap.add_argument("--layers", type=int, default=None,
                    help="number of layers (default: enough to reach --gib)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="llm_stack_ext", help="writes NAME.onnx + NAME.onnx.data")
    ap.add_argument("--chunk-mib", type=int, default=64, help="RNG chunk size (default 64)")
    ap.add_argument("--check", action="store_true",
                    help="run it in onnxruntime and compare with a numpy reference")
    a = ap.parse_args(argv)
    target = a.gib * GiB
    d = a.d
    if d is None:
        d = 4096
        if target < 2 * GiB:
            d = 64
            while BYTES_PER_D2 * (2 * d) ** 2 * 4 <= target:
                d *= 2
    if d % 64 or d <= 0:
        ap.error("--d must be a positive multiple of 64")
    layers = a.layers or max(1, math.ceil(target / (BYTES_PER_D2 * d * d)))
    total = BYTES_PER_D2 * d * d * layers
    free = os.statvfs(a.out_dir if a.out_dir.exists() else a.out_dir.parent)
    if free.f_bavail * free.f_frsize < total * 1.02:
        ap.error(f"not enough free disk in {a.out_dir} for {total / GiB:.2f} GiB")
    print(f"d={d}, {layers} layers, {total / GiB:.2f} GiB of weights -> "
          f"{a.out_dir / (a.name + '.onnx')}(.data)", file=sys.stderr, flush=True)
    path, data = build(a.out_dir, a.name, d, layers, a.seed, a.chunk_mib * MiB)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size = path.stat().st_size + data.path.stat().st_size
    print(f"wrote {path} ({size / GiB:.2f} GiB with data); check_model ok; "
          f"peak RSS while building: {rss:.0f} MiB", file=sys.stderr)
    if a.check:
        check(path, data, d, layers, a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
