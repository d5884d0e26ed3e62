"""Models whose fold runs one long onnxruntime kernel, and small ones that fold at once.

``slow_conv_model`` is a constant Conv (no native rule folds Conv, so the onnxruntime fallback
runs it) of about 3e11 multiply-adds in a single kernel: 20 s or more on a desktop CPU, while
its file is 12 MB and the kernel's working memory under 100 MB. onnxruntime reads
``RunOptions.terminate`` only between kernels, so nothing inside the process can stop it.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CHANNELS, SIDE, KERNEL = 6, 512, 127
CONV_FLOPS = 2 * CHANNELS * CHANNELS * KERNEL * KERNEL * SIDE * SIDE


def slow_conv_model(path: str) -> str:
    """Save ``y = x + Conv(X, W)`` with X, W constant (folds to ``x + Y``) at ``path``."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, CHANNELS, SIDE, SIDE)).astype(np.float32)
    w = (rng.standard_normal((CHANNELS, CHANNELS, KERNEL, KERNEL)) * 1e-3).astype(np.float32)
    shape = [1, CHANNELS, SIDE, SIDE]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["X", "W"], ["c"], pads=[KERNEL // 2] * 4),
         helper.make_node("Add", ["x", "c"], ["y"])],
        "slow_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(x, "X"), numpy_helper.from_array(w, "W")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def quick_model(path: str, seed: int = 1) -> str:
    """Save ``y = x + Transpose(W)`` (W 8x8, constant): a fold that takes no time."""
    w = np.random.default_rng(seed).standard_normal((8, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["W"], ["wt"]), helper.make_node("Add", ["x", "wt"], ["y"])],
        "quick", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 8])],
        [numpy_helper.from_array(w, "W")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def processes_mentioning(text: str) -> list[int]:
    """PIDs of the live processes whose command line contains ``text`` (Linux /proc)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(pid))
    return found
