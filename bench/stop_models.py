"""Models whose onnxruntime inference never ends, or runs one very long kernel: what a signal
or the inference time limit must stop, in every place onnxfold runs onnxruntime
(``python -m bench run signals`` and ``tests/adversarial/test_signals_during_inference.py``).

Each ``Loop`` below counts to 1e15 (adding 1 to 64 floats per step): onnxruntime reads
``RunOptions.terminate`` between its steps, so only a stop ends it. The long kernel is a Conv
of about 3e11 multiply-adds on the model's input: one kernel, which no ``terminate`` stops
halfway (tens of seconds on a 2-core machine).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STEPS = 10**15
WIDTH = 64
CHANNELS, SIDE, KERNEL = 6, 512, 127  # the long kernel's Conv


def _counting_body(step: str, initializers: list[onnx.TensorProto]) -> onnx.GraphProto:
    """A Loop body: ``s_out = s_in + step`` (``step``: a body constant or an outer value)."""
    vector = [WIDTH]
    return helper.make_graph(
        [helper.make_node("Add", ["s_in", step], ["s_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "count", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                  helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                  helper.make_tensor_value_info("s_in", TensorProto.FLOAT, vector)],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_out", TensorProto.FLOAT, vector)], initializers)


def _save(nodes: list[onnx.NodeProto], inputs: list[str], initializers: list[onnx.TensorProto],
          path: Path) -> Path:
    """``y = ...`` of float vectors of :data:`WIDTH`, opset 17."""
    vector = [WIDTH]
    graph = helper.make_graph(
        nodes, "stop", [helper.make_tensor_value_info(n, TensorProto.FLOAT, vector)
                        for n in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, vector)], initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _loop_inputs(steps: int) -> list[onnx.TensorProto]:
    return [numpy_helper.from_array(np.array(steps, np.int64), "M"),
            numpy_helper.from_array(np.array(True), "cond"),
            numpy_helper.from_array(np.zeros(WIDTH, np.float32), "s0")]


def endless(path: Path) -> Path:
    """``y = x + Loop(1e15){s += 1}(x)``: every inference of it runs until stopped."""
    one = [numpy_helper.from_array(np.ones(WIDTH, np.float32), "one")]
    return _save([helper.make_node("Loop", ["M", "cond", "x"], ["v"],
                                   body=_counting_body("one", one)),
                  helper.make_node("Add", ["x", "v"], ["y"])], ["x"], _loop_inputs(STEPS), path)


def counting_constant(path: Path, steps: int) -> Path:
    """``y = x + Loop(steps){s += 1}(0)``: the Loop reads constants only (a fold computes it)."""
    one = [numpy_helper.from_array(np.ones(WIDTH, np.float32), "one")]
    return _save([helper.make_node("Loop", ["M", "cond", "s0"], ["v"],
                                   body=_counting_body("one", one)),
                  helper.make_node("Add", ["x", "v"], ["y"])], ["x"], _loop_inputs(steps), path)


@dataclass(frozen=True)
class FoldPair:
    """An original whose folded constant takes 1e15 steps to re-derive, and onnxfold's output
    of the same model counting 3 steps (its fold carries the provenance ``verify-folds``
    follows back into the endless Loop)."""

    original: Path
    folded: Path


def endless_to_verify(directory: Path) -> FoldPair:
    """The :class:`FoldPair` in ``directory``."""
    import onnxfold

    quick = counting_constant(directory / "counting_3.onnx", 3)
    folded = directory / "counting_folded.onnx"
    onnxfold.optimize(str(quick)).save(str(folded))
    return FoldPair(counting_constant(directory / "counting_endless.onnx", STEPS), folded)


def endless_runtime_fold(path: Path, feeds: Path) -> tuple[Path, str]:
    """``y = x + Loop(1e15){s += w}(0)`` with ``w`` a runtime constant: a Session's fold of it
    never ends; its feeds written to ``feeds`` (.npz). The model and the runtime constant's
    name."""
    model = _save([helper.make_node("Loop", ["M", "cond", "s0"], ["v"],
                                    body=_counting_body("w", [])),
                   helper.make_node("Add", ["x", "v"], ["y"])], ["x", "w"], _loop_inputs(STEPS),
                  path)
    np.savez(feeds, x=np.ones(WIDTH, np.float32), w=np.ones(WIDTH, np.float32))
    return model, "w"


def long_kernel(path: Path) -> Path:
    """``y = Conv(x, W)``, x of [1, 6, 512, 512], W of 127 x 127 kernels: one kernel of about
    3e11 multiply-adds, on the input (nothing folds it)."""
    w = (np.random.default_rng(0).standard_normal((CHANNELS, CHANNELS, KERNEL, KERNEL))
         * 1e-3).astype(np.float32)
    shape = [1, CHANNELS, SIDE, SIDE]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["y"], pads=[KERNEL // 2] * 4)], "long_kernel",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(w, "W")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path
