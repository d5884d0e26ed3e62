"""The analysis children, each run in a fresh interpreter by ``runner.run_helper``.

Each ``_child_*`` function takes its arguments as strings and writes its result as JSON to its
last argument, ``json_out``; numpy and onnxruntime are imported only here, in the child.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from foldbench import SEED


def _write_json(path: str, data: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(data, indent=1))


def _child_stats(tools_dir: str, model: str, json_out: str) -> None:
    """(child) onnxstats.stats() of a model."""
    sys.path.insert(0, tools_dir)
    from onnxstats import stats

    _write_json(json_out, stats(model))


_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int16)": "int16",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(uint16)": "uint16",
    "tensor(uint32)": "uint32", "tensor(uint64)": "uint64", "tensor(bool)": "bool",
}


def _child_reference(model: str, npz_out: str, json_out: str) -> None:
    """(child) Seeded random inputs and the original model's outputs, saved to ``npz_out``."""
    import numpy as np
    import onnxruntime as ort

    from onnxfold.app.comparison import synthetic_feeds

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    feeds, infos = synthetic_feeds(model, SEED)  # the feeds compare and the tests use
    described = [{"name": i.name, "type": i.dtype, "shape": i.shape, "source": i.source}
                 for i in infos]
    names = [o.name for o in sess.get_outputs()]
    outs = sess.run(names, feeds)
    arrays = {f"in{i}": v for i, v in enumerate(feeds.values())}
    arrays.update({f"out{i}": v for i, v in enumerate(outs)})
    np.savez(npz_out, **arrays)
    _write_json(json_out, {"inputs": described, "input_names": list(feeds),
                           "output_names": names})


def _child_compare(model: str, npz: str, ref_json: str, json_out: str) -> None:
    """(child) Does ``model`` load in ORT, and how far are its outputs from the reference?"""
    import numpy as np
    import onnxruntime as ort

    ref = json.loads(Path(ref_json).read_text())
    result: dict[str, Any] = {"loads_in_ort": False, "max_abs_diff": None, "error": None}
    try:
        ort.InferenceSession(model, providers=["CPUExecutionProvider"])  # default options
        result["loads_in_ort"] = True
    except Exception as exc:
        result["error"] = f"default-options load: {exc}"[:600]
    try:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        data = np.load(npz)
        feeds = {n: data[f"in{i}"] for i, n in enumerate(ref["input_names"])}
        names = [o.name for o in sess.get_outputs()]
        if sorted(names) != sorted(ref["output_names"]):
            raise RuntimeError(f"output names differ: {names} vs {ref['output_names']}")
        outs = dict(zip(names, sess.run(names, feeds)))
        worst = 0.0
        for i, n in enumerate(ref["output_names"]):
            want, got = data[f"out{i}"], np.asarray(outs[n])
            if want.shape != got.shape:
                raise RuntimeError(f"output {n}: shape {got.shape} != {want.shape}")
            a, b = want.astype(np.float64), got.astype(np.float64)
            same_nan = np.isnan(a) & np.isnan(b)
            d = np.where(same_nan, 0.0, np.abs(a - b))
            d = np.where(np.isnan(d), np.inf, d)
            worst = max(worst, float(d.max()) if d.size else 0.0)
        result["max_abs_diff"] = worst
    except Exception as exc:
        result["error"] = ((result["error"] + "; ") if result["error"] else "") + \
            f"run: {exc}"[:600]
    _write_json(json_out, result)
