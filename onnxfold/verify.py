"""After writing, before the output replaces anything: does onnxruntime load what we wrote?

A folded model must compute what the original computes in onnxruntime; the cheapest part of
that promise to check on every run is that onnxruntime accepts the new graph at all (graph
optimizations off, so its own rewrites cannot hide ours). Outputs above ``VERIFY_LIMIT`` bytes
or ``VERIFY_MAX_NODES`` nodes skip this by default (onnxruntime then takes about as long to load
them as onnxfold to fold them); ``--check N`` compares outputs.
"""

from __future__ import annotations

import os

VERIFY_LIMIT = 64 << 20  # bytes of output
VERIFY_MAX_NODES = 5000  # nodes of output (all graphs)


class OutputRejected(RuntimeError):
    """onnxruntime loads the input but not the folded output: a bug in onnxfold."""


def ort_load_error(model: str | bytes) -> str | None:
    """Why onnxruntime cannot create a session for ``model`` (a path or bytes), or None."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises several exception types
        return " ".join(str(e).split())[:300] or type(e).__name__
    return None


def verifier(original: str | os.PathLike, limit: int = VERIFY_LIMIT):
    """A ``verify(path)`` for ``save_model``: raise OutputRejected if onnxruntime refuses the
    output but loads ``original``; outputs over ``limit`` bytes are not checked."""

    def verify(path: str) -> None:
        if os.path.getsize(path) > limit:
            return
        problem = ort_load_error(path)
        if problem is not None and ort_load_error(os.fspath(original)) is None:
            raise OutputRejected(f"onnxruntime refuses the folded model ({problem}); nothing "
                                 "was written")

    return verify
