"""Synthetic deep graphs for the per-node cost (issue #16): many small nodes, tiny weights.

Usage: python bench/make_deep_models.py [OUT_DIR] [--only NAME ...] [--check]

OUT_DIR defaults to ``~/.cache/onnxfold-bench`` (outside git). Deterministic: the same bytes on
every run (seeded weights, fixed names, onnx's own serializer). Needs only onnx and numpy.

- ``deep_12k`` / ``deep_48k``: 2,000 / 8,000 layers of 6 nodes on ``x: float[4, 16]``::

      wt = Transpose(W_i)            W_i: float[16, 16] initializer  -> folds
      w  = Mul(wt, S_i)              S_i: float[1, 16] initializer   -> folds
      s  = Shape(h)                  h's shape is static             -> folds
      r  = Reshape(h, s)             a reshape to its own shape      -> removed
      m  = MatMul(r, w)
      h' = Tanh(m)

  The folded model keeps 2 nodes a layer (MatMul, Tanh) and one 16x16 weight a layer.
- ``chain_200k``: 200,000 unary nodes on ``x: float[4, 16]`` (Tanh and Sigmoid alternating),
  no initializer: nothing to fold or rewrite; the pure per-node overhead.

``--check`` runs each model once in onnxruntime (``ORT_DISABLE_ALL``) and, for the deep graphs,
compares with numpy.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

DEFAULT_OUT = Path.home() / ".cache" / "onnxfold-bench"
SEED = 0
WIDTH, BATCH = 16, 4
MODELS = {"deep_12k": 2000, "deep_48k": 8000, "chain_200k": 200_000}


def deep_model(layers: int):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(SEED)
    nodes, inits = [], []
    h = "x"
    for i in range(layers):
        w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        s = (1.0 + 0.1 * rng.standard_normal((1, WIDTH))).astype(np.float32)
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
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, WIDTH])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             producer_name="onnxfold-bench")


def chain_model(n: int):
    from onnx import TensorProto, helper

    nodes = []
    prev = "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"c{i}"
        nodes.append(helper.make_node("Tanh" if i % 2 == 0 else "Sigmoid", [prev], [out],
                                      f"n{i}"))
        prev = out
    graph = helper.make_graph(
        nodes, f"chain_{n}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, WIDTH])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             producer_name="onnxfold-bench")


def reference(model, layers: int):
    """The deep graph's output on the check input, in numpy."""
    import numpy as np
    from onnx import numpy_helper

    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    x = check_input()
    for i in range(layers):
        x = np.tanh(x @ (w[f"W{i}"].T * w[f"S{i}"]))
    return x


def check_input():
    import numpy as np

    return np.random.default_rng(1).standard_normal((BATCH, WIDTH)).astype(np.float32)


def run_ort(model_or_path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    src = model_or_path if isinstance(model_or_path, str) else \
        model_or_path.SerializeToString()
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": check_input()})[0]


def check(path: Path, name: str) -> None:
    """Run the model in onnxruntime; for the deep graphs also compare a 20-layer one with
    numpy (through thousands of layers the signal decays towards 0, which checks nothing)."""
    import numpy as np

    y = run_ort(str(path))
    print(f"  {name}: ran in ORT, output {y.shape}, mean |y| {float(np.abs(y).mean()):.3g}")
    if name.startswith("deep_"):
        small = deep_model(20)
        diff = float(np.abs(run_ort(small) - reference(small, 20)).max())
        print(f"  20 layers: ORT vs numpy max abs diff {diff:.3g}")
        assert diff < 1e-4, diff


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", nargs="?", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", nargs="+", choices=list(MODELS))
    ap.add_argument("--check", action="store_true", help="run each in onnxruntime")
    a = ap.parse_args()
    import onnx

    a.out_dir.mkdir(parents=True, exist_ok=True)
    for name in a.only or MODELS:
        n = MODELS[name]
        model = chain_model(n) if name.startswith("chain") else deep_model(n)
        path = a.out_dir / f"{name}.onnx"
        tmp = path.with_suffix(".onnx.tmp")
        onnx.save(model, str(tmp))
        os.replace(tmp, path)
        print(f"wrote {path}: {len(model.graph.node)} nodes, "
              f"{path.stat().st_size / 1e6:.1f} MB")
        if a.check:
            check(path, name)


if __name__ == "__main__":
    main()
