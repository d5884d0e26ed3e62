"""A ModelProto over protobuf's 2 GiB limit through the Python API (issue 14):
``onnxfold.optimize(proto).to_proto()`` with 2.15 GiB of weights in memory.

Builds the proto in this process (two 1.07 GiB weights, and a Tile that folds to a third), then
reports the time and the peak RSS over the resident size once it is built (the build's own
temporaries are freed first): what optimize + to_proto add (to_proto copies the weights into
the new proto once; the folded Tile is a new tensor).
Needs about 13 GiB of RAM. ``python bench/big_proto.py [ELEMENTS_PER_WEIGHT]``.
"""

from __future__ import annotations

import resource
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

GIB = 1 << 30


def build(n: int) -> onnx.ModelProto:
    weights = []
    for k in range(2):
        tensor = onnx.TensorProto(name=f"W{k}", data_type=TensorProto.FLOAT, dims=[n])
        tensor.raw_data = np.full(n, k + 1, np.float32).tobytes()
        weights.append(tensor)
    weights += [onnx.numpy_helper.from_array(np.ones(n // 1024, np.float32), "c0"),
                onnx.numpy_helper.from_array(np.array([1024], np.int64), "reps")]
    nodes = [helper.make_node("Tile", ["c0", "reps"], ["c"]),
             helper.make_node("Add", ["x", "W0"], ["a"]),
             helper.make_node("Mul", ["a", "W1"], ["y"]),
             helper.make_node("Neg", ["c"], ["nc"]), helper.make_node("Add", ["y", "nc"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [n])],
                              [helper.make_tensor_value_info("z", 1, [n])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def main() -> None:
    import onnxfold

    n = int(sys.argv[1]) if len(sys.argv) > 1 else (1100 << 20) // 4
    model = build(n)
    base = _resident_mib()
    print(f"proto: weights {2 * n * 4 / GIB:.2f} GiB, resident {base:.0f} MiB")
    started = time.perf_counter()
    options = onnxfold.FoldOptions(expansion_factor=float("inf"), growth_factor=None,
                                   max_tensor_bytes=None)
    out = onnxfold.optimize(model, options).to_proto()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"optimize + to_proto: {time.perf_counter() - started:.1f} s, nodes "
          f"{len(model.graph.node)} -> {len(out.graph.node)}, peak {peak:.0f} MiB "
          f"(+{peak - base:.0f} MiB over the built proto; "
          f"{(peak - base) / (2 * n * 4 / (1 << 20)):.2f}x its weights)")


def _resident_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


if __name__ == "__main__":
    main()
