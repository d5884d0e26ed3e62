"""Runtime constants benchmark: onnxfold.Session against onnxruntime, in one process.

1. Transformer exports with every weight turned into a graph input (the "weights fed at the first
   call" case): steady-state latency of
   - onnxruntime on the fully pre-folded model (weights as initializers: the best case),
   - onnxruntime on the weights-as-inputs model, weights fed on every call (the status quo),
   - onnxfold.Session with the weights as runtime constants (first call reported separately),
   and the max abs difference of Session's outputs from the pre-folded model's.
2. The fold kernel alone: per-channel DequantizeLinear + Transpose of 48 BERT-size int8 weights,
   run by each backend (ort, numpy, mlir), with compile time reported apart from the fold:
   the first fold right after prepare (what a Session pays) and the best steady-state fold of
   repeated calls whose results are dropped between calls. Each backend runs in a fresh process:
   a first fold page-faults its output memory in, which costs several times more once earlier
   runs have fragmented the process's memory.

Usage: python bench/bench_runtime.py --corpus DIR [--models bert_base_ts gpt2_small_ts]
           [--runs 30] [--out bench/results]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort

import onnxfold
from onnxfold.io import load_model, save_model
from onnxfold.runtime.backends import get_backend

SEQ = 128


def weights_as_inputs(src: str, out: str) -> tuple[list[str], dict[str, np.ndarray]]:
    """Write ``src`` with its initializers (> 1 KiB) as graph inputs; return names and arrays."""
    model = load_model(src)
    graph = model.graph
    names, arrays = [], {}
    for name, value in list(graph.initializers.items()):
        tensor = value.const_value
        if tensor is None or tensor.nbytes <= 1024 or value in graph.inputs:
            continue
        arrays[name] = np.array(tensor.numpy())  # a private copy, fed by the "application"
        graph.initializers.pop(name)
        value.const_value = None
        value.type, value.shape = ir.TensorType(tensor.dtype), tensor.shape
        graph.inputs.append(value)
        names.append(name)
    save_model(model, out)
    return names, arrays


def text_feeds(path: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for i in onnx.load(path, load_external_data=False).graph.input:
        shape = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
        if "mask" in i.name:
            feeds[i.name] = np.ones(shape, np.int64)
        elif "type" in i.name:
            feeds[i.name] = np.zeros(shape, np.int64)
        elif i.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[i.name] = rng.integers(0, 1000, shape).astype(np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def latencies(fns: dict, runs: int) -> dict[str, float]:
    """Median latency of each function, measured in rotation so drift hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()  # warm-up
    for _ in range(runs):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: 1e3 * statistics.median(ts) for name, ts in times.items()}


def bench_model(corpus: str, name: str, runs: int, tmp: str) -> dict:
    src = os.path.join(corpus, name + ".onnx")
    dyn_feeds = text_feeds(src)
    folded_path = os.path.join(tmp, name + "_folded.onnx")
    save_model(onnxfold.optimize(src).model, folded_path)
    variant = os.path.join(tmp, name + "_weights_as_inputs.onnx")
    weight_names, weights = weights_as_inputs(src, variant)
    options = ort.SessionOptions()
    options.log_severity_level = 3

    prefolded = ort.InferenceSession(folded_path, options, providers=["CPUExecutionProvider"])
    plain = ort.InferenceSession(variant, options, providers=["CPUExecutionProvider"])
    all_feeds = {**dyn_feeds, **weights}
    t = time.perf_counter()
    session = onnxfold.Session(variant, weight_names)
    setup = time.perf_counter() - t
    t = time.perf_counter()
    out = session.run(None, all_feeds)[0]
    first = time.perf_counter() - t
    want = prefolded.run(None, dyn_feeds)[0]
    ms = latencies({"prefolded": lambda: prefolded.run(None, dyn_feeds),
                    "plain": lambda: plain.run(None, all_feeds),
                    "session": lambda: session.run(None, all_feeds)}, runs)
    row = {
        "model": name, "weights": len(weight_names),
        "weight_mib": round(sum(a.nbytes for a in weights.values()) / 2**20, 1),
        "ort_prefolded_ms": ms["prefolded"], "ort_weights_as_inputs_ms": ms["plain"],
        "session_ms": ms["session"],
        "session_setup_s": setup, "session_first_call_s": first,
        "fold_s": session.fold_seconds, "folds": session.folds,
        "fold_outputs": len(session.parts.fold_outputs),
        "max_abs_diff_vs_prefolded": float(np.abs(out - want).max()),
    }
    row["session_vs_prefolded"] = row["session_ms"] / row["ort_prefolded_ms"]
    row["session_vs_weights_as_inputs"] = row["session_ms"] / row["ort_weights_as_inputs_ms"]
    return row


def dq_transpose_model(n: int = 48) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """48 BERT-size int8 weights, per-channel DequantizeLinear then Transpose, as inputs."""
    rng = np.random.default_rng(0)
    shapes = [(768, 768), (768, 3072), (3072, 768)]
    nodes, inputs, outputs, feeds = [], [], [], {}
    for i in range(n):
        rows, cols = shapes[i % 3]
        q, s = f"w{i}_q", f"w{i}_scale"
        inputs += [onnx.helper.make_tensor_value_info(q, onnx.TensorProto.INT8, [rows, cols]),
                   onnx.helper.make_tensor_value_info(s, onnx.TensorProto.FLOAT, [rows])]
        feeds[q] = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
        feeds[s] = (rng.random(rows, dtype=np.float32) + 0.5) / 128
        nodes += [onnx.helper.make_node("DequantizeLinear", [q, s], [f"w{i}"], axis=0),
                  onnx.helper.make_node("Transpose", [f"w{i}"], [f"w{i}_t"], perm=[1, 0])]
        outputs.append(onnx.helper.make_tensor_value_info(f"w{i}_t", onnx.TensorProto.FLOAT,
                                                          [cols, rows]))
    graph = onnx.helper.make_graph(nodes, "dq_transpose", inputs, outputs)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, feeds


SESSION_FOLDING = "ort session-time folding (weights as initializers)"


def _measure_backend(name: str, runs: int, cache_dir: str) -> dict:
    """One backend in a fresh process (its first fold must not inherit another's memory
    state): prepare time, the first fold after it, the best of repeated folds whose results are
    dropped between calls, and a digest of each folded tensor."""
    model, feeds = dq_transpose_model()
    if name == SESSION_FOLDING:
        first, result = ort_session_folding(model, feeds)
        return {"backend": name, "prepare_s": 0.0, "first_fold_s": first, "fold_s": first,
                "digests": _digests(result), "routed_to": None}
    t = time.perf_counter()
    backend = get_backend(name, **({"cache_dir": cache_dir} if name == "mlir" else {}))
    backend.prepare(ir.from_proto(model))
    prepare = time.perf_counter() - t
    t = time.perf_counter()
    result = backend.run(feeds)  # what a Session pays: one fold, right after prepare
    first = time.perf_counter() - t
    digests = _digests(result)
    del result  # dropped, as between the repeated folds
    times = []
    for _ in range(max(3, runs // 5)):
        t = time.perf_counter()
        backend.run(feeds)
        times.append(time.perf_counter() - t)
    return {"backend": name, "prepare_s": prepare, "first_fold_s": first, "fold_s": min(times),
            "digests": digests, "routed_to": getattr(backend, "routed_to", None)}


def _digests(arrays: dict[str, np.ndarray]) -> dict[str, str]:
    return {k: hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest() + str(v.dtype)
            for k, v in arrays.items()}


def bench_backends(runs: int, tmp: str) -> list[dict]:
    context = multiprocessing.get_context("spawn")
    rows = []
    for name in ("ort", "numpy", "mlir", SESSION_FOLDING):
        with ProcessPoolExecutor(1, mp_context=context) as pool:
            rows.append(pool.submit(_measure_backend, name, runs,
                                    os.path.join(tmp, "iree")).result())
    reference = rows[0]["digests"]
    base, base_first = rows[0]["fold_s"], rows[0]["first_fold_s"]
    for row in rows:
        row["equal_to_ort"] = row.pop("digests") == reference
        row["vs_ort"] = row["fold_s"] / base
        row["first_vs_ort"] = row["first_fold_s"] / base_first
    return rows


def ort_session_folding(model: onnx.ModelProto,
                        feeds: dict[str, np.ndarray]) -> tuple[float, dict[str, np.ndarray]]:
    """The same weights as initializers, folded by onnxruntime's own session-time optimizer."""
    with_weights = onnx.ModelProto()
    with_weights.CopyFrom(model)
    graph = with_weights.graph
    graph.initializer.extend(onnx.numpy_helper.from_array(a, n) for n, a in feeds.items())
    del graph.input[:]
    data = with_weights.SerializeToString()
    t = time.perf_counter()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    fold = time.perf_counter() - t
    return fold, dict(zip([o.name for o in session.get_outputs()], session.run(None, {})))


def to_markdown(models: list[dict], backends: list[dict]) -> str:
    lines = ["| model | weights | ORT pre-folded ms | ORT weights as inputs ms | Session ms | "
             "Session / pre-folded | Session / weights as inputs | first call s | fold s | "
             "max abs diff |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    lines.extend(
        f"| {r['model']} | {r['weights']} ({r['weight_mib']} MiB) | "
                     f"{r['ort_prefolded_ms']:.1f} | {r['ort_weights_as_inputs_ms']:.1f} | "
                     f"{r['session_ms']:.1f} | {r['session_vs_prefolded']:.3f}x | "
                     f"{r['session_vs_weights_as_inputs']:.3f}x | "
                     f"{r['session_first_call_s']:.2f} | {r['fold_s']:.2f} | "
                     f"{r['max_abs_diff_vs_prefolded']:.2g} |"
        for r in models)
    lines += ["", "| backend (48 DequantizeLinear+Transpose) | prepare s | first fold s | vs ort "
              "| steady fold s | vs ort | equal to ort |", "|---|--:|--:|--:|--:|--:|:-:|"]
    for r in backends:
        lines.append(f"| {r['backend']} | {r['prepare_s']:.2f} | {r['first_fold_s']:.3f} | "
                     f"{r['first_vs_ort']:.2f}x | {r['fold_s']:.3f} | {r['vs_ort']:.2f}x | "
                     f"{'yes' if r['equal_to_ort'] else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--models", nargs="*", default=["bert_base_ts", "gpt2_small_ts"])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="onnxfold-bench-rt-") as tmp:
        models = [bench_model(args.corpus, m, args.runs, tmp) for m in args.models
                  if os.path.exists(os.path.join(args.corpus, m + ".onnx"))]
        backends = bench_backends(args.runs, tmp)
    table = to_markdown(models, backends)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "runtime.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(args.out, "runtime.json"), "w") as f:
        json.dump({"models": models, "backends": backends}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
