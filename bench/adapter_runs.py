"""The child processes of ``python -m bench run adapters`` (``bench/adapters.py``).

``python -m bench.adapter_runs latency NAME WORK PAST PREFILL ROUNDS THREADS`` makes every
row's sessions in this process and times them interleaved (``onnxfold.app.runtime_compare``),
a decode step and a prefill, then the Sessions' costs, switching and the outputs' differences;
it prints one JSON object. ``python -m bench.adapter_runs rss ROW NAME WORK PAST PREFILL
THREADS`` makes one row's sessions and runs three decode steps and one prefill: its parent reads
the peak RSS of the process.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROWS = ("ort_inputs", "ort_multi_lora", "session_ort", "session_mlir", "merged",
        "session_ort_4_sets")
LABELS = {
    "ort_inputs": "onnxruntime, adapters as inputs",
    "ort_multi_lora": "onnxruntime multi-LoRA (LoraAdapter + add_active_adapter)",
    "session_ort": "onnxfold.Session, ort backend (adapters fed each call)",
    "session_mlir": "onnxfold.Session, mlir backend (adapters fed each call)",
    "merged": "merged model (peft merge_and_unload, exported)",
    "entry": "the Session's entry session alone (InferenceSession.run)",
    "session_ort_4_sets": "onnxfold.Session, ort backend, 4 adapters' sets kept",
}


class _Rows:
    """The sessions of the rows asked for, and the feeds of one decode step and a prefill."""

    def __init__(self, name: str, work: Path, past: int, prefill: int, threads: int,
                 tmp: str) -> None:
        import onnxruntime as ort

        from bench import adapter_models as am

        self.models = am.paths(name, work)
        spec = am.DECODERS[name]
        self.adapter = am.read_adapter(self.models.adapters[0])
        self.names = sorted(self.adapter)
        self.decode = am.example_inputs(spec, past=past, seq=1)
        self.prefill = am.example_inputs(spec, past=0, seq=prefill, seed=1)
        self.options = ort.SessionOptions()
        self.options.intra_op_num_threads = threads
        self.options.log_severity_level = 3
        self.tmp = tmp
        self.made: dict[str, float] = {}

    def _ort(self, path: str) -> Any:
        import onnxruntime as ort

        return ort.InferenceSession(path, self.options, providers=["CPUExecutionProvider"])

    def calls(self, row: str) -> tuple[Callable[[dict], Any], Any]:
        """(run this row on a step's feeds, the row's session object)."""
        started = time.perf_counter()
        call, made = self._make(row)
        self.made[row] = time.perf_counter() - started
        return call, made

    def _make(self, row: str) -> tuple[Callable[[dict], Any], Any]:
        import onnxruntime as ort

        from onnxfold.app.runtime_compare import with_initializers
        from onnxfold.runtime.session import Session

        adapter = self.adapter
        if row == "ort_inputs":
            plain = self._ort(str(self.models.model))
            return (lambda feeds: plain.run(None, {**feeds, **adapter})), plain
        if row == "ort_multi_lora":
            path = with_initializers(str(self.models.model), adapter, self.tmp,
                                     "defaults.onnx", True)
            lora = self._ort(path)
            active = ort.LoraAdapter()
            active.Load(str(self.models.adapters[0]))
            options = ort.RunOptions()
            options.add_active_adapter(active)
            return (lambda feeds: lora.run(None, feeds, options)), (lora, active)
        if row == "merged":
            merged = self._ort(str(self.models.merged))
            return (lambda feeds: merged.run(None, feeds)), merged
        backend = "mlir" if row == "session_mlir" else "ort"
        session = Session(str(self.models.model), self.names, backend=backend,
                          sess_options=self.options)
        if row == "session_ort_4_sets":
            for path in self.models.adapters[1:]:
                session.set_adapter(path)
        return (lambda feeds: session.run(None, {**feeds, **adapter})), session


def latency(name: str, work: Path, past: int, prefill: int, rounds: int, threads: int) -> dict:
    """Every row timed interleaved on a decode step and on a prefill, and the Sessions' costs."""
    from onnxfold.app.runtime_compare import interleaved, switching

    with tempfile.TemporaryDirectory(prefix="bench-adapters-") as tmp:
        rows = _Rows(name, work, past, prefill, threads, tmp)
        calls, objects = {}, {}
        for row in ("ort_inputs", "ort_multi_lora", "session_ort", "session_mlir", "merged"):
            calls[row], objects[row] = rows.calls(row)
        costs = {}
        for row in ("session_ort", "session_mlir"):
            session = objects[row]
            started = time.perf_counter()
            first = calls[row](rows.decode)
            costs[row] = {"init_s": rows.made[row], "first_call_s": time.perf_counter() - started,
                          "fold_s": session.fold_seconds, "bind_s": session.bind_seconds,
                          "merges": session.parts.low_rank.summary()}
        entry = objects["session_ort"].entry_session
        inputs = objects["session_ort"].entry_inputs
        calls["entry"] = lambda feeds: entry.run(None, {n: feeds[n] for n in inputs})
        result: dict[str, Any] = {"costs": costs, "made_s": rows.made}
        for phase, feeds in (("decode", rows.decode), ("prefill", rows.prefill)):
            timed = {row: (lambda c=call, f=feeds: c(f)) for row, call in calls.items()}
            result[phase] = {row: {"wall": t.wall * 1e3, "cpu": t.cpu * 1e3}
                             for row, t in interleaved(timed, rounds).items()}
        result["accuracy"] = _accuracy(calls, rows)
        del first
        session = objects["session_ort"]
        result["switch_ms"] = switching(session, rows.models.adapters, rounds)
        result["switch_folds"] = session.folds
        result["sets_bytes"] = session.cached_bytes
    return result


def _accuracy(calls: dict[str, Callable[[dict], Any]], rows: _Rows) -> dict[str, float]:
    """The largest difference of the logits from the unmerged model's in onnxruntime,
    relative to their largest magnitude, for the Session's rows and peft's merged model."""
    found = {}
    for phase, feeds in (("decode", rows.decode), ("prefill", rows.prefill)):
        want = np.asarray(calls["ort_inputs"](feeds)[0], np.float64)
        scale = float(np.abs(want).max())
        for row in ("session_ort", "session_mlir", "ort_multi_lora", "merged"):
            got = np.asarray(calls[row](feeds)[0], np.float64)
            found[f"{row}_{phase}"] = float(np.abs(got - want).max() / scale)
    return found


def rss(row: str, name: str, work: Path, past: int, prefill: int, threads: int) -> None:
    """One row's sessions, three decode steps and a prefill (the parent reads the peak)."""
    with tempfile.TemporaryDirectory(prefix="bench-adapters-") as tmp:
        rows = _Rows(name, work, past, prefill, threads, tmp)
        call, kept = rows.calls(row)  # kept: a LoraAdapter freed under its RunOptions crashes
        for _ in range(3):
            call(rows.decode)
        call(rows.prefill)
        del kept


def main(argv: list[str]) -> int:
    kind, args = argv[0], argv[1:]
    if kind == "latency":
        name, work, past, prefill, rounds, threads = args
        print(json.dumps(latency(name, Path(work), int(past), int(prefill), int(rounds),
                                 int(threads))))
    else:
        row, name, work, past, prefill, threads = args
        rss(row, name, Path(work), int(past), int(prefill), int(threads))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("ORT_LOGGING_LEVEL", "3")
    sys.exit(main(sys.argv[1:]))
