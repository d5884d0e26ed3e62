"""``onnxfold.simplify``: the one-call entry of onnxsim's habit, a thin layer over optimize."""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from onnxfold.options import FoldOptions
from onnxfold.pipeline import ModelInput, optimize


def simplify(model: ModelInput, check_n: int = 0, input_shapes: Sequence[str] = (),
             options: FoldOptions | None = None) -> tuple[onnx.ModelProto, bool]:
    """``(folded ModelProto, ok)``, like ``onnxsim.simplify``: ``ok`` is True unless
    ``check_n`` random input sets show an output outside tolerance in onnxruntime.
    ``input_shapes``: ``--input-shape`` strings (``"x:1,3,224,224"``, ``"batch=1"``)."""
    import dataclasses

    from onnxfold.comparison import compare

    options = dataclasses.replace(options or FoldOptions(),
                                  input_shapes=tuple(input_shapes))
    original = model if isinstance(model, onnx.ModelProto) else None
    result = optimize(model, options)
    folded = result.to_proto()
    if check_n <= 0:
        return folded, True
    reference = original if original is not None else model
    ok = compare(reference, folded, n=check_n).ok  # type: ignore[arg-type]
    return folded, ok
