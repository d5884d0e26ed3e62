"""onnxfold's whole run against the floor of its design: onnx-ir's bare load + save, and
onnxruntime's basic offline optimization, in the same run (issue 24's per-node cost).

For each model, ``--repeat`` interleaved rounds of three child processes, one at a time (the
previous outputs deleted and flushed with ``sync`` before each run):

==============  ============================================================================
``ir``          onnx-ir alone: ``ir.save(ir.load(IN), OUT)``: what reading and writing a model
                costs in onnx-ir, the IR onnxfold is built on (``import onnxfold`` first, which
                defers onnx-ir's sympy import as onnxfold's executable does)
``onnxfold``    ``python -m onnxfold optimize IN -o OUT --json REPORT -q`` (load, optimize,
                save, its checks included)
``ort``         onnxruntime's offline optimizer: ``ORT_ENABLE_BASIC`` +
                ``SessionOptions.optimized_model_filepath``
``copy``        a plain copy of the model's files (``shutil.copyfile``): on a weight-heavy
                export the disk is the limit, and this is what writing the output costs at least
==============  ============================================================================

**The passes' share** (issue 36): onnxfold's report times each phase of a run
(``phases`` in its ``--json``); the passes are every phase but ``load``, ``save`` (onnxfold's
checked load, its save and the output's verification) and ``report``. Their median is set
against ``ir``'s whole run (target: at most 1.0x on the deep graph and the Llama export); on
the weight-heavy export onnxfold's whole run is set against ``copy``.

Wall and CPU (user + system) seconds are medians over the rounds, peak RSS the largest
``ru_maxrss``; whole child processes (interpreter start-up and imports included). Ratios are
of the medians, against ``ir``.

After the runs, onnxfold's and onnxruntime's last outputs are run in onnxruntime
(``ORT_DISABLE_ALL``) on the export's example inputs (a seeded ``x`` for the deep graph) beside
the original: an output whose largest error exceeds 1e-3 of the output's magnitude is reported
as differing instead of timed. Their nodes (``Constant`` not counted) are counted there too.

The models (built into ``--cache``, outside git; kept, so a rerun skips them):

* ``deep_12k``: ``builders.deep_graph(2000)``: 12,000 small nodes, 16x16 weights;
* ``llama_L32_dynamo``: a 32-layer Llama with hidden size 64, dynamo export (5.5k nodes);
* ``bert_base_ts``: BERT-base, TorchScript export: 420 MB of weights, the weight-heavy one.

The table is written into ``bench/README.md`` (between its ``floor`` markers) with the command
and the date.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from bench.machine import dated
from bench.process import ChildRun, median, ratio, run_child, run_status
from bench.readme import replace_section
from bench.tools import tool_cmd

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = Path.home() / ".cache" / "onnxfold-bench"
MODELS = {"deep_12k": "12k-node deep graph (2,000 x Transpose, Mul, Shape, Reshape, MatMul, "
                      "Tanh; 16x16 weights)",
          "llama_L32_dynamo": "Llama, 32 layers, hidden 64, dynamo export, dynamic batch/seq",
          "bert_base_ts": "BERT-base, TorchScript export (weight-heavy)"}
TOOLS = ("ir", "onnxfold", "ort", "copy")
TOOL_LABELS = {"ir": "ir.load + ir.save", "onnxfold": "onnxfold", "ort": "onnxruntime basic",
               "copy": "file copy"}
# onnxfold's own load, save (and verify), report (the signature block is the report's)
NOT_PASSES = ("load", "save", "report", "signature")


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def build(name: str, cache: Path, timeout: float) -> Path:
    """The model ``name`` in ``cache``, built in a child unless it is there."""
    path = cache / f"{name}.onnx"
    if path.exists() and (name == "deep_12k" or path.with_suffix(".inputs.npz").exists()):
        return path
    cache.mkdir(parents=True, exist_ok=True)
    _log(f"[{name}] building")
    run = run_child([sys.executable, "-m", "bench.builders", name, str(cache)],
                    cache / f"{name}.build", timeout, cwd=ROOT)
    if run.rc != 0 or not path.exists():
        raise RuntimeError(f"building {name} failed: {run.error_line}")
    return path


# Run in a child (the parent stays small: Linux starts each child's peak RSS at its parent's):
# argv = [original, output, inputs .npz or "-"]; prints the nodes of both (Constant not
# counted) and the largest relative error of the output against the original in onnxruntime.
CHECK_CODE = """\
import json, sys
import numpy as np, onnx, onnxruntime as ort
src, out, npz = sys.argv[1:4]
def nodes(path):
    return sum(n.op_type != "Constant" for n in onnx.load(path).graph.node)
def run(path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feeds)
if npz == "-":
    feeds = {"x": np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)}
else:
    feeds = dict(np.load(npz))
want, got = run(src), run(out)
err = max(float(np.abs(w - g).max() / max(float(np.abs(w).max()), 1e-30))
          for w, g in zip(want, got))
print(json.dumps({"nodes_in": nodes(src), "nodes_out": nodes(out), "max_rel_err": err}))
"""
TOLERANCE = 1e-3  # largest error relative to the output's largest magnitude (float32)


def check(src: Path, output: Path, log_stem: Path, timeout: float) -> dict[str, Any]:
    """Nodes of ``src`` and ``output`` and the output's error in onnxruntime, from a child."""
    inputs = src.with_suffix(".inputs.npz")
    cmd = [sys.executable, "-c", CHECK_CODE, str(src), str(output),
           str(inputs) if inputs.exists() else "-"]
    run = run_child(cmd, log_stem, timeout, cwd=ROOT)
    if run.rc != 0:
        return {"error": run.error_line}
    result: dict[str, Any] = json.loads(log_stem.with_suffix(".out").read_text())
    return result


def passes_seconds(report: Path) -> float:
    """The seconds onnxfold's passes took in one run: its report's phases but load, save,
    report and the report's signature."""
    phases: dict[str, float] = json.loads(report.read_text()).get("phases", {})
    return sum(seconds for phase, seconds in phases.items() if phase not in NOT_PASSES)


def measure(name: str, src: Path, work: Path, repeat: int, timeout: float) -> dict[str, Any]:
    """Every tool ``repeat`` times, interleaved; medians, peak RSS, nodes left, ratios."""
    work.mkdir(parents=True, exist_ok=True)
    outputs = {tool: work / f"{name}.{tool}.onnx" for tool in TOOLS}
    runs: dict[str, list[ChildRun]] = {tool: [] for tool in TOOLS}
    passes: list[float] = []
    for r in range(repeat):
        for tool in TOOLS:
            for old in work.glob(f"{name}.{tool}.onnx*"):
                old.unlink()
            os.sync()  # the previous output must not be written back during this run
            cmd = tool_cmd(tool, src, outputs[tool], work / "report.json", src.stat().st_size)
            runs[tool].append(run_child(cmd, work / f"{tool}_{r}", timeout, cwd=ROOT))
            if tool == "onnxfold" and runs[tool][-1].rc == 0:
                passes.append(passes_seconds(work / "report.json"))
            _log(f"[{name}] {tool} run {r + 1}/{repeat}: {runs[tool][-1].wall_s:.2f} s")
    result: dict[str, Any] = {"what": MODELS[name], "nodes": None,
                              "mib": src.stat().st_size / (1 << 20), "tools": {},
                              "passes_s": median(passes) if passes else None}
    for tool in TOOLS:
        status, _ = run_status(runs[tool], outputs[tool], timeout)
        result["tools"][tool] = {
            "status": status, "wall_s": median([x.wall_s for x in runs[tool]]),
            "cpu_s": median([x.user_s + x.sys_s for x in runs[tool]]),
            "walls": [round(x.wall_s, 3) for x in runs[tool]],
            "peak_rss_mib": max(x.maxrss_mib for x in runs[tool]),
            "nodes": None}
        if status == "ok" and tool not in ("ir", "copy"):
            checked = check(src, outputs[tool], work / f"{tool}_check", timeout)
            if "error" in checked or checked["max_rel_err"] > TOLERANCE:
                result["tools"][tool]["status"] = \
                    f"output differs: {checked.get('error') or checked['max_rel_err']}"
            else:
                result["nodes"] = checked["nodes_in"]
                result["tools"][tool]["nodes"] = checked["nodes_out"]
    for old in work.glob(f"{name}.*.onnx*"):
        old.unlink()
    return result


def _cell(tool: dict[str, Any], floor: dict[str, Any]) -> str:
    if tool["status"] != "ok":
        return tool["status"]
    wall, cpu = ratio(tool["wall_s"], floor["wall_s"]), ratio(tool["cpu_s"], floor["cpu_s"])
    return (f"{tool['wall_s']:.2f} s (**{wall:.2f}x**) · CPU {tool['cpu_s']:.2f} s ({cpu:.2f}x) · "
            f"{tool['peak_rss_mib']:.0f} MiB")


def table(results: dict[str, dict[str, Any]], repeat: int) -> str:
    """The markdown table: per model, each tool's median wall (ratio to ir), peak RSS, nodes."""
    lines = [f"| model (nodes without Constant, file) | {' | '.join(TOOL_LABELS[t] for t in TOOLS)}"
             " | onnxfold's passes | onnxfold / file copy | nodes left: onnxfold / ort |",
             "|---|" + "--:|" * (len(TOOLS) + 3)]
    for name, res in results.items():
        tools = res["tools"]
        left = " / ".join(f"{tools[t]['nodes']:,}" if tools[t]["nodes"] is not None else "-"
                          for t in ("onnxfold", "ort"))
        cells = " | ".join(_cell(tools[t], tools["ir"]) for t in TOOLS)
        nodes = f"{res['nodes']:,}" if res["nodes"] is not None else "?"
        passes = res.get("passes_s")
        share = ratio(passes, tools["ir"]["wall_s"]) if tools["ir"]["status"] == "ok" else None
        passes_cell = f"{passes:.2f} s (**{share:.2f}x**)" if passes is not None and \
            share is not None else "-"
        copied = ratio(tools["onnxfold"]["wall_s"], tools["copy"]["wall_s"]) \
            if tools["onnxfold"]["status"] == tools["copy"]["status"] == "ok" else None
        copy_cell = f"**{copied:.2f}x**" if copied is not None else "-"
        lines.append(f"| `{name}` ({nodes}, {res['mib']:.0f} MiB) | {cells} | {passes_cell} | "
                     f"{copy_cell} | {left} |")
    lines.append("")
    lines.append(f"Each cell: median wall of {repeat} interleaved runs of the whole child process"
                 " (ratio to `ir.load` + `ir.save` of the same run), median CPU (user + system;"
                 " steadier than wall on a shared machine) and its ratio, largest peak RSS."
                 " onnxfold's passes: the median of its report's phases but load, save,"
                 " signature and report (ratio to `ir.load` + `ir.save`'s whole run);"
                 " onnxfold / file copy: the ratio of the whole runs' medians.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench run floor", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS),
                    metavar="NAME", help="default: %(default)s")
    ap.add_argument("--repeat", type=int, default=5, help="interleaved rounds (median wall)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                    help="where the models are built (outside git); default: %(default)s")
    ap.add_argument("--work", type=Path, default=Path("/tmp/onnxfold-bench-floor"),
                    help="where the outputs and logs go; default: %(default)s")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per child")
    ap.add_argument("--no-readme", action="store_true",
                    help="print the table only; do not write it into bench/README.md")
    a = ap.parse_args(argv)
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")
    sources = {name: build(name, a.cache, a.timeout) for name in a.models}
    results = {name: measure(name, src, a.work, a.repeat, a.timeout)
               for name, src in sources.items()}
    command = "python -m bench run floor" + (f" --repeat {a.repeat}" if a.repeat != 5 else "") \
        + (f" --models {' '.join(a.models)}" if a.models != list(MODELS) else "")
    text = dated(command, ("onnxfold", "onnx", "onnx-ir", "onnxruntime", "numpy", "torch")) \
        + "\n\n" + table(results, a.repeat)
    print(text)
    if not a.no_readme:
        replace_section(ROOT / "bench" / "README.md", "floor", text)
        _log("wrote the table into bench/README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
