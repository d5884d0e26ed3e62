"""Dropout in inference mode: the identity, its mask all true from opset 12 on, all false
before, as onnxruntime computes them (its basic optimization level removes such a Dropout).

Only training mode draws a random mask: ``training_mode`` true (opset 12 on; unless its ratio
is 0, which drops nothing) or ``is_test`` false (opsets 1-6, where that is the default). The
folder declines it as non-deterministic (never handed to onnxruntime, which would freeze one
draw). A Dropout in inference mode whose mask nothing reads goes, whatever its data
(``drop_inference_dropout``, in ``no_ops.py`` with every no-op removal).
"""

from __future__ import annotations

import numpy as np

from onnxfold.declare import Decline, DeclineKind, folder

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


