"""Where ``onnxfold optimize`` spends its time on one model (issue #16): stage timers, cProfile.

Usage::

    python bench/profile_fold.py MODEL.onnx [--cprofile [N]] [--sort tottime]

Runs ``onnxfold.app.cli.main(["optimize", MODEL, "-o", TMP, "-q"])`` in this process (the same
path as the command line: load, optimize, save with its onnxruntime check) with timers wrapped
around the stages (monkeypatched, nothing in onnxfold is changed):

* ``imports``: onnx, onnx_ir, numpy and onnxfold's modules the run needs (``onnxruntime``
  separately: only the save's check needs it); ``start-up``: the interpreter before this
  script's first line (``time.process_time()`` there);
* ``load`` (``onnxfold.io.load_model``) and in it: reading the graph bytes, onnx's checker,
  ``ir.serde.deserialize_model``, the structure and tensor checks; the rest is protobuf parsing;
* ``optimize`` and in it every pass's ``call`` (``onnxfold/pipeline/passes.py``; ``RefineShapes``
  includes its own inference), and inside shape inference: ``_serialize_light`` (the model to
  a proto for onnx's inferencer), onnx's ``infer_shapes`` and the bound check on data
  propagation; the before/after counts and the dynamic-shape report;
* ``save`` (``onnxfold.io.save_model``) and in it the onnxruntime check of the output
  (``verify``, a session with optimizations off);
* ``ir.serde.serialize_model`` over all its callers (how often the model becomes a proto).

Each row: CPU seconds (``time.process_time``, all threads), wall seconds, calls. Nested rows are
indented; they are part of their parent. With ``--cprofile`` the run is profiled instead (no
timers) and the top ``N`` functions (default 25) by self time are printed.
"""

from __future__ import annotations

import time

_START_CPU = time.process_time()  # the interpreter's start-up, before this module's imports

import argparse  # noqa: E402
import functools  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections import defaultdict  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402


class Timers:
    """Inclusive CPU / wall time and call count per label."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.order: list[str] = []

    def add(self, label: str, cpu: float, wall: float) -> None:
        if label not in self.order:
            self.order.append(label)
        self.cpu[label] += cpu
        self.wall[label] += wall
        self.calls[label] += 1

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        """Replace ``owner.attr`` by a timed version (skipped if it does not exist)."""
        orig = getattr(owner, attr, None)
        if orig is None:
            print(f"(no {owner.__name__}.{attr}: not timed)", file=sys.stderr)
            return
        self.cpu.setdefault(label, 0.0)  # rows in the order they were wrapped
        self.order.append(label)
        timers = self

        @functools.wraps(orig)
        def timed(*args: Any, **kwargs: Any) -> Any:
            c0, w0 = time.process_time(), time.perf_counter()
            try:
                return orig(*args, **kwargs)
            finally:
                timers.cpu[label] += time.process_time() - c0
                timers.wall[label] += time.perf_counter() - w0
                timers.calls[label] += 1

        setattr(owner, attr, timed)


def install(t: Timers) -> None:
    """Wrap the stages (see the module docstring); labels are indented by nesting."""
    import onnx
    import onnx_ir as ir
    from onnx_ir.passes import InPlacePass

    import onnxfold.analysis.shapes as shapes
    import onnxfold.app.verify as verify
    import onnxfold.io
    import onnxfold.io.reader as reader
    import onnxfold.io.writer as writer
    import onnxfold.pipeline.optimizer as pipeline
    import onnxfold.pipeline.passes as passes

    t.wrap(onnxfold.io, "load_model", "load")
    # optimize reads a path with load_with_light_proto, by its own name
    t.wrap(pipeline, "load_with_light_proto", "load (optimize's read)")
    t.wrap(reader, "_parse_graph_only", "  read and parse the graph (weights left on disk)")
    t.wrap(reader, "densify", "  densify sparse")
    t.wrap(reader, "_run_checker", "  onnx checker")
    t.wrap(ir.serde, "deserialize_model", "  ir.serde.deserialize_model")
    t.wrap(reader, "check_structure", "  check_structure")
    t.wrap(reader, "check_tensor_data", "  check_tensor_data")
    t.wrap(pipeline, "optimize", "optimize")
    t.wrap(pipeline, "model_counts", "  model_counts (report before/after)")
    classes = {getattr(c, "name", n): c for n, c in vars(passes).items()
               if isinstance(c, type) and issubclass(c, InPlacePass) and c is not InPlacePass
               and "call" in vars(c)}
    order = ["inline_functions", "input_shapes", "infer_shapes", "rewrite", "fold", "prune",
             "refine_shapes", "cleanups", "sorted"]
    for name in sorted(classes, key=lambda n: order.index(n) if n in order else len(order)):
        t.wrap(classes[name], "call", f"  pass {name}")
    # the passes module's own name for it (imported by name), so every caller is timed
    t.wrap(passes, "infer_shapes", "    infer_shapes (in infer_shapes and refine_shapes)")
    t.wrap(shapes, "mark_declared", "      mark_declared")
    light = "serialize_light" if hasattr(shapes, "serialize_light") else "_serialize_light"
    t.wrap(shapes, light, f"      {light} (model -> proto for onnx)")
    t.wrap(shapes, "_data_prop_is_bounded", "      _data_prop_is_bounded")
    t.wrap(onnx.shape_inference, "infer_shapes", "      onnx infer_shapes (C++)")
    t.wrap(pipeline, "blocked_scaffolding", "  blocked_scaffolding (dynamic-shape report)")
    t.wrap(onnxfold.io, "save_model", "save")
    t.wrap(writer, "inline_references", "  inline_references")
    t.wrap(writer, "prune_value_info", "  prune_value_info")
    verify_label = "  verify (onnxruntime loads the output)"
    t.order.append(verify_label)

    orig_verifier = verify.verifier

    def verifier(*args: Any, **kwargs: Any) -> Callable[[str], None]:
        inner = orig_verifier(*args, **kwargs)

        def timed(path: str) -> None:
            c0, w0 = time.process_time(), time.perf_counter()
            try:
                inner(path)
            finally:
                t.add(verify_label, time.process_time() - c0, time.perf_counter() - w0)

        return timed

    verify.verifier = verifier  # type: ignore[assignment]
    t.wrap(ir.serde, "serialize_model", "ir.serde.serialize_model (all callers)")


def run_cli(model: str, out: str) -> int:
    from onnxfold.app.cli import main

    return main(["optimize", model, "-o", out, "-q"])


def timed_run(model: str, out: str) -> None:
    t = Timers()
    c0, w0 = time.process_time(), time.perf_counter()
    # onnxfold first, as in the executable: importing it defers onnx-ir's import of sympy
    import onnxfold.app.cli
    # isort: split
    import numpy  # noqa: F401
    import onnx  # noqa: F401
    import onnx_ir  # noqa: F401

    import onnxfold.io.writer
    import onnxfold.pipeline.optimizer
    t.add("imports (onnx, onnx_ir, numpy, onnxfold)", time.process_time() - c0,
          time.perf_counter() - w0)
    c0, w0 = time.process_time(), time.perf_counter()
    import onnxruntime  # noqa: F401
    t.add("import onnxruntime (for verify)", time.process_time() - c0, time.perf_counter() - w0)
    install(t)
    c0, w0 = time.process_time(), time.perf_counter()
    rc = run_cli(model, out)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    import onnxfold

    print(f"model: {model} ({os.path.getsize(model) / 2**20:.1f} MiB); exit {rc}; "
          f"onnxfold from {os.path.dirname(onnxfold.__file__)}")
    print(f"start-up (interpreter, before this script): {_START_CPU:.2f} s CPU")
    print(f"onnxfold.app.cli.main: {cpu:.2f} s CPU, {wall:.2f} s wall\n")
    print("| stage | CPU s | wall s | calls |\n|---|--:|--:|--:|")
    for label in t.order:
        if t.calls[label]:
            name = label.replace("  ", "&nbsp;&nbsp;") if label.startswith(" ") else label
            print(f"| {name} | {t.cpu[label]:.3f} | {t.wall[label]:.3f} | {t.calls[label]} |")


def profiled_run(model: str, out: str, top: int, sort: str) -> None:
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    rc = run_cli(model, out)
    prof.disable()
    print(f"model: {model}; exit {rc}; top {top} by {sort}\n")
    stats = pstats.Stats(prof)
    stats.sort_stats(sort)
    rows = []
    for func, (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((tt if sort == "tottime" else ct, func, nc, tt, ct))
    rows.sort(key=lambda r: r[0], reverse=True)
    total = sum(r[3] for r in rows)
    print(f"total self time {total:.2f} s (with profiling overhead)\n")
    print("| self s | cum s | calls | function |\n|--:|--:|--:|---|")
    for _, (file, line, fn), nc, tt, ct in rows[:top]:
        short = file
        for marker in ("site-packages/", "/onnxfold/"):
            if marker in file:
                short = ("onnxfold/" if marker == "/onnxfold/" else "") + \
                    file.split(marker, 1)[1]
        print(f"| {tt:.3f} | {ct:.3f} | {nc} | `{short}:{line} {fn}` |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--cprofile", nargs="?", type=int, const=25, default=None, metavar="N")
    ap.add_argument("--sort", default="tottime", choices=["tottime", "cumulative"])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="profile_fold_") as tmp:
        out = os.path.join(tmp, "out.onnx")
        if a.cprofile:
            profiled_run(a.model, out, a.cprofile, a.sort)
        else:
            timed_run(a.model, out)


if __name__ == "__main__":
    main()
