"""Dropout in inference mode: the identity, its mask all true from opset 12 on, all false
before, as onnxruntime computes them (its basic optimization level removes such a Dropout).

Only training mode draws a random mask: ``training_mode`` true (opset 12 on; unless its ratio
is 0, which drops nothing) or ``is_test`` false (opsets 1-6, where that is the default). The
folder declines it as non-deterministic (never handed to onnxruntime, which would freeze one
draw). The pattern removes a Dropout in
inference mode whose mask nothing reads, whatever its data: the runtime graph loses a no-op.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxfold.declare import Decline, DeclineKind, GraphView, OpBuilder, P, Var, folder, pattern

_TRAINING = "training mode draws a random mask"


def _inference(x: np.ndarray, mask_dtype: np.dtype, kept: bool = True
               ) -> tuple[np.ndarray, np.ndarray]:
    return x, np.full(x.shape, kept, mask_dtype)


# Before opset 12 onnxruntime's inference Dropout (an identity kernel) returns a mask of zeros
@folder("Dropout", since=1, until=6)
def dropout_v1(x: np.ndarray, is_test: int = 0, ratio: float = 0.5,
               consumed_inputs: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    if not is_test:
        raise Decline(_TRAINING, DeclineKind.NON_DETERMINISTIC)
    return _inference(x, x.dtype, kept=False)


@folder("Dropout", since=7, until=9)
def dropout_v7(x: np.ndarray, ratio: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    return _inference(x, x.dtype, kept=False)  # the mask has the data's type before opset 10


@folder("Dropout", since=10, until=11)
def dropout_v10(x: np.ndarray, ratio: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    return _inference(x, np.dtype(bool), kept=False)


@folder("Dropout", since=12)
def dropout_v12(x: np.ndarray, ratio: np.ndarray | None = None,
                training_mode: np.ndarray | None = None,
                seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    training = training_mode is not None and bool(np.asarray(training_mode).reshape(-1)[0])
    if training and (ratio is None or float(np.asarray(ratio).reshape(-1)[0]) != 0):
        raise Decline(_TRAINING, DeclineKind.NON_DETERMINISTIC)  # a ratio of 0 drops nothing
    return _inference(x, np.dtype(bool))


def _in_inference(ctx: GraphView, node: ir.Node, x: ir.Value) -> bool:
    """A Dropout of opset 7 on whose training mode is absent or a constant false, its mask
    unread, its data not a constant (that folds)."""
    opset = node.version or ctx.opset()
    if opset < 7 or ctx.is_constant(x):
        return False
    if len(node.outputs) > 1 and (node.outputs[1].uses() or ctx.is_graph_output(node.outputs[1])):
        return False
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        flag = ctx.array(node.inputs[2])
        if flag is None or flag.size != 1 or bool(flag.reshape(-1)[0]):
            return False
    return True


@pattern(P("Dropout", Var("x"), ..., name="node"), check=_in_inference)
def drop_inference_dropout(op: OpBuilder, x: ir.Value) -> ir.Value:
    """Dropout in inference mode is the identity."""
    return x
