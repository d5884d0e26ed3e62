"""Save a folded model only if it still computes what the original did (``optimize --check``).

The model is written to a temporary file beside the output, compared with the original in
onnxruntime, and only then moved into place; on failure (or any error) the temporary files are
removed and the output is neither created nor overwritten.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import onnx_ir as ir

from onnxfold.check.comparison import CompareResult, compare
from onnxfold.fold.recipes import RECIPES_KEY
from onnxfold.io import save_model
from onnxfold.io.outputs import OutputGuard
from onnxfold.io.tempfiles import temp_beside, write_failed
from onnxfold.io.writer import SaveInfo, input_files


def save_checked(model: ir.Model, original: str | os.PathLike, path: str | os.PathLike, *,
                 n: int, external_data: bool | None = None, protect: set[str] | None = None,
                 replaces: tuple[str, ...] = (),
                 saving: Callable[[int, int], None] | None = None,
                 checking: Callable[[str], None] | None = None,
                 compare_options: Mapping[str, Any] | None = None
                 ) -> tuple[SaveInfo | None, CompareResult]:
    """Write ``model`` to ``path`` if it matches ``original`` on ``n`` input sets.

    Returns the save info (None when nothing was written) and the comparison. ``saving`` and
    ``checking`` are the progress callbacks of :func:`save_model` and :func:`compare`;
    ``compare_options`` the rest of :func:`compare`'s keywords (inputs, seed, dims, ...).
    """
    path = os.fspath(path)
    guard = OutputGuard(input_files(model), replaces)
    guard.protect(protect or ())
    target = guard.claim(path, "output model")
    fd, tmp = temp_beside(target, suffix=".check.onnx")
    os.close(fd)
    tmp_data = None
    try:
        info = save_model(model, tmp, external_data=external_data, protect=protect,
                          progress=saving)
        tmp_data = info.data_path
        result = compare(original, tmp, n=n, progress=checking,
                         recipes=model.meta.get(RECIPES_KEY), **(compare_options or {}))
        result.model_b = path  # report the output, not the temporary name
        if not result.ok:
            return None, result
        if tmp_data is None:
            os.replace(tmp, target)
            return SaveInfo(path, None, info.bytes_written, info.streamed_tensors), result
        # The .onnx names its data file, so external data is written again under the final name.
        return save_model(model, path, external_data=True, protect=protect,
                          replaces=replaces), result
    except OSError as e:
        raise write_failed(path, e) from None
    finally:
        for leftover in (tmp, tmp_data):
            if leftover and os.path.exists(leftover):
                os.unlink(leftover)
