"""Total-fold check: every input of a real model made a constant, the whole model folded, its
outputs compared bit for bit with onnxruntime running the original on the same data.

For each model of the wild corpus (``python -m tools.wild_corpus list --paths``; models needing a
custom-op library are skipped) and each flag set (default, and ``--fold-qdq --allow-growth
--fold-fp16-casts``): seeded inputs at the model's first size (``wild_corpus.SIZES``) become
initializers that stay graph inputs, folded with ``--inputs-are-constant``; the reference is
onnxruntime on the original model fed those inputs, with its graph optimizations off (the
nodes as written, on onnxruntime's kernels; prepacking as by default) and the folded model runs
the same way. An output counts as different when a single bit differs (NaNs of any payload are
equal). Folding exercises every rule at once and, since every value is a constant, every
discontinuous op the model has (docs/exactness.md).

    python -m tools.total_fold                 # the whole corpus, both flag sets
    python -m tools.total_fold --model silero_vad --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

import onnxfold
from onnxfold.check.inputs.feeds import synthetic_feeds
from onnxfold.pipeline.options import FoldOptions

FLAG_SETS = {
    "default": {},
    "--fold-qdq --allow-growth --fold-fp16-casts": {
        "fold_qdq": True, "growth_factor": None, "fold_fp16_casts": True},
}


def _wild():
    """tools/wild_corpus.py, the corpus' single source."""
    from tools import wild_corpus

    return wild_corpus


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _feeds(wild, model: onnx.ModelProto, name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded data for every input at the model's first size, in the input's type."""
    size = wild.SIZES.get(name, (wild.Size("default"),))[0]
    kwargs = wild.compare_kwargs(size, seed)
    if kwargs["inputs"] is None:
        feeds, _ = synthetic_feeds(model, seed, kwargs["dims"], kwargs["int_ranges"])
        return feeds
    types = {i.name: i.type for i in _session(model).get_inputs()}
    return {k: v.astype(_ORT_NUMPY[types[k]]) for k, v in kwargs["inputs"].items()}


_ORT_NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16,
              "tensor(double)": np.float64, "tensor(int64)": np.int64,
              "tensor(int32)": np.int32, "tensor(bool)": np.bool_}


def constant_inputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """``model`` with each fed input's data as an initializer of its name (still an input)."""
    made = onnx.ModelProto()
    made.CopyFrom(model)
    made.ir_version = max(made.ir_version, 4)  # an initializer that is an input is a default
    for name, arr in feeds.items():
        made.graph.initializer.append(numpy_helper.from_array(np.asarray(arr), name))
    return made


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shapes, dtypes and bits (any NaN equals any NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        return bool((nan == np.isnan(b)).all() and
                    (a[~nan].view(np.uint8) == b[~nan].view(np.uint8)).all())
    return bool(np.array_equal(a, b))


def check(wild, path: Path, flags: dict) -> dict:
    """Fold ``path`` with every input constant; compare its outputs with the original's."""
    name = path.stem
    model = onnx.load(str(path))
    feeds = _feeds(wild, model, name)
    reference = _session(model).run(None, feeds)
    started = time.perf_counter()
    result = onnxfold.optimize(constant_inputs(model, feeds),
                               FoldOptions(inputs_are_constant=True, strict=True, **flags))
    seconds = time.perf_counter() - started
    folded = result.to_proto()
    session = _session(folded)
    present = {i.name for i in session.get_inputs()}
    outputs = session.run(None, {k: v for k, v in feeds.items() if k in present})
    names = [o.name for o in model.graph.output]
    differ = []
    for out_name, want, got in zip(names, reference, outputs):
        if not same_bits(np.asarray(want), np.asarray(got)):
            w, g = np.asarray(want), np.asarray(got)
            count = int((w != g).sum()) if w.shape == g.shape else -1
            differ.append({"output": out_name, "values_differ": count, "of": int(w.size)})
    return {"model": name, "outputs": len(names), "differ": differ,
            "nodes_left": len(folded.graph.node), "nodes_before": len(model.graph.node),
            "via_onnxruntime": result.stats.via_fallback, "native": result.stats.native,
            "seconds": round(seconds, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=[],
                        help="only this corpus model (repeatable)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    wild = _wild()
    cache = wild.default_cache() / "models"
    entries = [e for e in wild.ENTRIES if not args.model or e.name in args.model]
    rows, failed = [], 0
    for flag_text, flags in FLAG_SETS.items():
        for entry in entries:
            path = cache / f"{entry.name}.onnx"
            if entry.custom_ops or not path.exists():
                why = "needs a custom-op library" if entry.custom_ops else "not fetched"
                print(f"skip  {entry.name}: {why}")
                continue
            try:
                row = check(wild, path, flags)
            except Exception as e:  # a model this check cannot run is reported, not hidden
                row = {"model": entry.name, "error": f"{type(e).__name__}: {e}"[:300]}
            row["flags"] = flag_text
            rows.append(row)
            if "error" in row or row["differ"]:
                failed += 1
            detail = row.get("error") or (
                f"{row['outputs']} outputs, {len(row['differ'])} differ {row['differ']}; "
                f"{row['nodes_before']} -> {row['nodes_left']} nodes, "
                f"{row['via_onnxruntime']} via onnxruntime, {row['seconds']} s")
            print(f"{'FAIL' if 'error' in row or row['differ'] else 'ok  '}  {entry.name} "
                  f"[{flag_text}]: {detail}", flush=True)
    checked = [r for r in rows if "error" not in r]
    print(f"{len({r['model'] for r in checked})} models, "
          f"{sum(r['outputs'] for r in checked)} outputs over {len(FLAG_SETS)} flag sets; "
          f"{sum(len(r['differ']) for r in checked)} outputs differ; "
          f"{len(rows) - len(checked)} errors")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
