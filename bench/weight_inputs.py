"""Weights fed as inputs (a training loop's evaluation): ``onnxfold.Session`` against the
pre-folded model, for ``python -m bench run adapters`` (its second table).

``python -m bench.weight_inputs NAME CACHE WORK ROUNDS THREADS`` (a child): the export NAME of
``bench/builders.py`` (built into CACHE by its own child first) with every float initializer of
1,024 elements or more made a graph input (``WORK/NAME.weights_in.onnx``, the arrays in
``WORK/NAME.weights.npz``), and the original folded by ``onnxfold.optimize`` (the pre-folded
model, ``WORK/NAME.prefolded.onnx``). Timed interleaved on the export's example inputs: the
original, the pre-folded model, a ``Session`` with every weight a runtime constant (fed each
call) and its entry session alone; prints one JSON object (medians in ms, the Session's first
call, the largest output difference from the original); each median of wall and CPU time.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

MIN_ELEMENTS = 1024


def prepare(source: Path, work: Path) -> tuple[Path, Path, Path]:
    """The weights-as-inputs model, its weights and the pre-folded model (made unless there)."""
    import onnxfold

    stem = work / source.stem
    model_in, weights, folded = (Path(f"{stem}.weights_in.onnx"), Path(f"{stem}.weights.npz"),
                                 Path(f"{stem}.prefolded.onnx"))
    if model_in.exists() and weights.exists() and folded.exists():
        return model_in, weights, folded
    work.mkdir(parents=True, exist_ok=True)
    model = onnx.load(str(source))
    graph = model.graph
    moved = [t for t in graph.initializer if t.data_type == onnx.TensorProto.FLOAT
             and int(np.prod(t.dims)) >= MIN_ELEMENTS]
    arrays = {t.name: numpy_helper.to_array(t) for t in moved}
    kept = [t for t in graph.initializer if t.name not in arrays]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    for tensor in moved:
        graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type,
                                                              list(tensor.dims)))
    onnx.save(model, str(model_in), save_as_external_data=True,
              location=model_in.name + ".data")
    np.savez(weights, **arrays)
    onnxfold.optimize(str(source)).save(str(folded))
    return model_in, weights, folded


def measure(name: str, cache: Path, work: Path, rounds: int, threads: int) -> dict[str, Any]:
    import onnxruntime as ort

    from onnxfold.app.runtime_compare import interleaved
    from onnxfold.runtime.session import Session

    source = cache / f"{name}.onnx"
    model_in, weights_path, folded = prepare(source, work)
    weights = dict(np.load(weights_path))
    inputs = dict(np.load(cache / f"{name}.inputs.npz"))
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    started = time.perf_counter()
    session = Session(str(model_in), sorted(weights), sess_options=options)
    fed = {**inputs, **weights}
    got = session.run(None, fed)[0]
    first = time.perf_counter() - started
    original = ort.InferenceSession(str(source), options)
    prefolded = ort.InferenceSession(str(folded), options)
    entry = session.entry_session
    entry_feeds = {n: inputs[n] for n in session.entry_inputs}
    want = original.run(None, inputs)[0]
    medians = interleaved({
        "original": lambda: original.run(None, inputs),
        "prefolded": lambda: prefolded.run(None, inputs),
        "session": lambda: session.run(None, fed),
        "entry": lambda: entry.run(None, entry_feeds)}, rounds)
    return {"ms": {k: {"wall": t.wall * 1e3, "cpu": t.cpu * 1e3} for k, t in medians.items()},
            "made_and_first_call_s": first,
            "fold_s": session.fold_seconds, "weights": len(weights),
            "weight_mib": sum(a.nbytes for a in weights.values()) / 2**20,
            "max_abs_diff": float(np.abs(got - want).max()),
            "max_abs": float(np.abs(want).max())}


if __name__ == "__main__":
    name, cache, work, rounds, threads = sys.argv[1:6]
    print(json.dumps(measure(name, Path(cache), Path(work), int(rounds), int(threads))))
