"""What one more layer costs: the same dynamo Llama (hidden 64) at 32, 64 and 128 layers, onnxfold
against onnx-ir's bare load + save, onnxruntime basic and onnxsim (issues 50 and 56's per-layer
cost), library call against library call and command line against command line.

Each model is ``builders``' ``llama_L{N}_dynamo`` (the export floor's ``llama_L32_dynamo`` is,
at other depths), built once into ``--cache``. ``--repeat`` interleaved rounds: each round runs
every tool on every depth, one child process at a time (the previous output deleted and
flushed with ``sync`` first), so that a slow spell of a shared machine falls on every cell of
the round instead of on one depth:

===============  ===========================================================================
``ir``           onnx-ir alone: ``ir.save(ir.load(IN), OUT)`` (``bench/tools.py``)
``onnxfold-lib`` onnxfold's library call, ``onnxfold.optimize(IN).save(OUT)`` (onnx's checker
                 on the input, the fold, the write; its report to REPORT)
``onnxfold``     ``python -m onnxfold optimize IN -o OUT --json REPORT -q --no-verify`` (the
                 summary's signature block too: ``--json`` holds it)
``ort``          onnxruntime's offline optimizer: ``ORT_ENABLE_BASIC`` +
                 ``SessionOptions.optimized_model_filepath``
``onnxsim``      onnxsim's library call, ``onnxsim.simplify(IN, output_path=OUT)``, run by
                 ``--peers-python`` (an interpreter with onnxsim; without it the column says
                 so and its ratio is ``-``)
``onnxsim-cli``  onnxsim's command line, ``python -m onnxsim IN OUT``, as a user runs it
===============  ===========================================================================

onnxfold runs without its output check (``--no-verify``): the check loads the output in
onnxruntime up to 5,000 nodes only, so it ran at 32 layers and not at 128, and its cost fell
out of the slope; at neither depth, the slope is the fold's.

**Per layer**: the slope between the shallowest and the deepest model,
``(X_deepest - X_shallowest) / (layers_deepest - layers_shallowest)``, of each tool's median
CPU seconds (user + system: steadier than wall on a shared machine), median wall seconds and
peak RSS (the largest ``ru_maxrss`` of its runs). Interpreter start-up, imports and whatever
else does not grow with the depth cancel out of a slope; what is left is the cost of a layer.
The ratios, like against like (``PAIRS``): onnxfold's library call / onnxsim's library call
(issue 56's target: at most 1.5x), / onnxruntime basic, and onnxfold's command line / onnxsim's
command line; bold: of the CPU slopes.

**onnxfold's passes**: its library call's report's ``phases`` but ``load``, ``save`` and
``report``, as
``floor`` counts them (median over the rounds, wall seconds); per layer their slope, set
against onnx-ir's bare load + save per layer (issue 36's target, at most 1.0x) and against
the library call's wall per layer (their share of what a layer costs it).

After the runs, each tool's last output is run in onnxruntime beside the original on the
export's example inputs (``floor.check``): an output whose largest error exceeds 1e-3 of the
output's magnitude is reported as differing instead of timed; the nodes left (``Constant`` not
counted) come from there too.

The tables are written into ``bench/README.md`` (between its ``layers`` markers);
``--json PATH`` also writes every measured number.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import floor
from bench.builders import EXPORTS
from bench.machine import dated
from bench.process import ChildRun, median, run_child, run_status
from bench.readme import replace_section
from bench.tools import tool_cmd

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("ir", "onnxfold-lib", "onnxfold", "ort", "onnxsim", "onnxsim-cli")
TOOL_LABELS = {"ir": "ir.load + ir.save", "onnxfold-lib": "onnxfold (library)",
               "onnxfold": "onnxfold (CLI)", "ort": "onnxruntime basic",
               "onnxsim": "onnxsim (library)", "onnxsim-cli": "onnxsim (CLI)"}
# like against like: each onnxfold form's per-layer cost set against a peer's
PAIRS = (("onnxfold-lib", "onnxsim"), ("onnxfold-lib", "ort"), ("onnxfold", "onnxsim-cli"))
PASSES_OF = "onnxfold-lib"  # whose report's phases give onnxfold's passes
# the depths builders export: llama_L{N}_dynamo
DEPTHS = sorted(int(m.group(1)) for m in map(re.compile(r"llama_L(\d+)_dynamo$").match, EXPORTS)
                if m)
DEFAULT_DEPTHS = [32, 64, 128]


def model_name(layers: int) -> str:
    """The export of the Llama with ``layers`` layers (of ``builders.EXPORTS``)."""
    return f"llama_L{layers}_dynamo"


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _runs(depths: list[int], sources: dict[int, Path], work: Path, repeat: int, timeout: float,
          peers_python: str) -> tuple[dict[int, dict[str, list[ChildRun]]], dict[int, list[float]]]:
    """Every tool on every depth, ``repeat`` interleaved rounds: the runs, and onnxfold's
    passes' seconds of each successful run."""
    runs: dict[int, dict[str, list[ChildRun]]] = {n: {t: [] for t in TOOLS} for n in depths}
    passes: dict[int, list[float]] = {n: [] for n in depths}
    for r in range(repeat):
        for n in depths:
            src = sources[n]
            for tool in TOOLS:
                for old in work.glob(f"L{n}.{tool}.onnx*"):
                    old.unlink()
                os.sync()  # the previous output must not be written back during this run
                report = work / "report.json"
                report.unlink(missing_ok=True)
                cmd = tool_cmd(tool, src, work / f"L{n}.{tool}.onnx", report,
                               src.stat().st_size, peers_python=peers_python if
                               tool.startswith("onnxsim") else sys.executable)
                if tool == "onnxfold":
                    cmd.append("--no-verify")  # the check at neither depth (module doc)
                run = run_child(cmd, work / f"L{n}.{tool}_{r}", timeout, cwd=ROOT)
                runs[n][tool].append(run)
                if tool == PASSES_OF and run.rc == 0:
                    passes[n].append(floor.passes_seconds(report))
                _log(f"[L{n}] {tool} run {r + 1}/{repeat}: {run.wall_s:.2f} s, "
                     f"CPU {run.user_s + run.sys_s:.2f} s, {run.maxrss_mib:.0f} MiB"
                     + (f" ({run.error_line})" if run.rc else ""))
    return runs, passes


def measure(depths: list[int], sources: dict[int, Path], work: Path, repeat: int,
            timeout: float, peers_python: str = sys.executable) -> dict[str, Any]:
    """Medians and peak RSS per depth and tool, the outputs checked; then the slopes."""
    work.mkdir(parents=True, exist_ok=True)
    runs, passes = _runs(depths, sources, work, repeat, timeout, peers_python)
    models: dict[str, Any] = {}
    for n in depths:
        src = sources[n]
        model: dict[str, Any] = {"layers": n, "mib": src.stat().st_size / (1 << 20),
                                 "nodes": None, "tools": {},
                                 "passes_s": median(passes[n]) if passes[n] else None}
        for tool in TOOLS:
            output = work / f"L{n}.{tool}.onnx"
            status, _ = run_status(runs[n][tool], output, timeout)
            cell: dict[str, Any] = {
                "status": status, "wall_s": median([x.wall_s for x in runs[n][tool]]),
                "cpu_s": median([x.user_s + x.sys_s for x in runs[n][tool]]),
                "peak_rss_mib": max(x.maxrss_mib for x in runs[n][tool]), "nodes": None}
            if status == "ok" and tool != "ir":
                checked = floor.check(src, output, work / f"L{n}.{tool}_check", timeout)
                if "error" in checked or checked["max_rel_err"] > floor.TOLERANCE:
                    cell["status"] = \
                        f"output differs: {checked.get('error') or checked['max_rel_err']}"
                else:
                    model["nodes"] = checked["nodes_in"]
                    cell["nodes"] = checked["nodes_out"]
            model["tools"][tool] = cell
        models[str(n)] = model
    for old in work.glob("L*.onnx*"):
        old.unlink()
    return {"repeat": repeat, "models": models, "per_layer": per_layer(models)}


def slope(models: dict[str, Any], value: Any) -> float | None:
    """``value(model)``'s growth per layer from the shallowest model to the deepest, or None
    where either has no value (a tool that failed there)."""
    ordered = sorted(models.values(), key=lambda m: m["layers"])
    first, last = ordered[0], ordered[-1]
    a, b = value(first), value(last)
    if a is None or b is None or last["layers"] == first["layers"]:
        return None
    return float((b - a) / (last["layers"] - first["layers"]))


def _tool_value(tool: str, key: str) -> Any:
    """A reader of ``key`` of ``tool``'s cell, None where the tool failed."""
    def read(model: dict[str, Any]) -> float | None:
        cell = model["tools"][tool]
        return cell[key] if cell["status"] == "ok" else None
    return read


def _over(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator`` of two per-layer costs; None unless both grow (a slope at or
    below zero is noise of a run too short to measure a layer, and no ratio of it means
    anything)."""
    if numerator is None or denominator is None or numerator <= 0 or denominator <= 0:
        return None
    return numerator / denominator


def per_layer(models: dict[str, Any]) -> dict[str, Any]:
    """Each tool's CPU, wall and peak RSS per layer; onnxfold's CPU against each peer's; the
    passes per layer against onnx-ir's load + save and onnxfold's own wall per layer."""
    out: dict[str, Any] = {
        tool: {key: slope(models, _tool_value(tool, key))
               for key in ("cpu_s", "wall_s", "peak_rss_mib")} for tool in TOOLS}
    out["passes_s"] = slope(models, lambda m: m["passes_s"])
    out["over"] = {f"{mine}/{peer}": {key: _over(out[mine][key], out[peer][key])
                                      for key in ("cpu_s", "wall_s", "peak_rss_mib")}
                   for mine, peer in PAIRS}
    out["passes_over_ir"] = _over(out["passes_s"], out["ir"]["wall_s"])
    out["passes_share"] = _over(out["passes_s"], out[PASSES_OF]["wall_s"])
    return out


def _num(value: float | None, fmt: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, fmt)


def _times(value: float | None, bold: bool) -> str:
    if value is None:
        return "-"
    return f"**{value:.2f}x**" if bold else f"{value:.2f}x"


def _cell(cell: dict[str, Any]) -> str:
    if cell["status"] != "ok":
        return cell["status"]
    left = f" · {cell['nodes']:,} left" if cell["nodes"] is not None else ""
    return (f"{cell['wall_s']:.2f} s · CPU {cell['cpu_s']:.2f} s · "
            f"{cell['peak_rss_mib']:.0f} MiB{left}")


def table(result: dict[str, Any]) -> str:
    """Two markdown tables: each depth's medians, then the cost of one layer."""
    models, slopes = result["models"], result["per_layer"]
    labels = " | ".join(TOOL_LABELS[t] for t in TOOLS)
    lines = [f"| model (nodes without Constant, file) | {labels} | onnxfold's passes |",
             "|---|" + "--:|" * (len(TOOLS) + 1)]
    for model in sorted(models.values(), key=lambda m: m["layers"]):
        nodes = f"{model['nodes']:,}" if model["nodes"] is not None else "?"
        cells = " | ".join(_cell(model["tools"][t]) for t in TOOLS)
        lines.append(f"| {model['layers']} layers ({nodes}, {model['mib']:.0f} MiB) | {cells} | "
                     f"{_num(model['passes_s'], '.2f')} s |")
    depths = sorted(m["layers"] for m in models.values())
    lines += ["", f"Per layer ({depths[0]} -> {depths[-1]} layers):", "",
              f"| per layer | {labels} | "
              + " | ".join(f"{TOOL_LABELS[m]} / {TOOL_LABELS[p]}" for m, p in PAIRS) + " |",
              "|---|" + "--:|" * (len(TOOLS) + len(PAIRS))]
    over = slopes["over"]
    for key, unit, scale, fmt in (("cpu_s", "CPU ms", 1000.0, ".1f"),
                                  ("wall_s", "wall ms", 1000.0, ".1f"),
                                  ("peak_rss_mib", "peak RSS MiB", 1.0, ".2f")):
        cells = " | ".join(_num(slopes[t][key], fmt, scale) for t in TOOLS)
        ratios = " | ".join(_times(over[f"{m}/{p}"][key], bold=key == "cpu_s")
                            for m, p in PAIRS)
        lines.append(f"| {unit} | {cells} | {ratios} |")
    lines += ["", f"onnxfold's passes: {_num(slopes['passes_s'], '.1f', 1000.0)} ms a layer, "
              f"{_times(slopes['passes_over_ir'], bold=True)} of `ir.load` + `ir.save`'s wall "
              f"per layer, {_num(slopes['passes_share'], '.0%')} of its library call's wall "
              "per layer.",
              "",
              f"Each model's cell: median wall and CPU (user + system) of {result['repeat']} "
              "interleaved runs of the whole child process, largest peak RSS, nodes left. Per "
              "layer: (deepest - shallowest) / (difference of their layers) of those medians "
              "(of peak RSS: of the largest); onnxfold / peer: the ratio of the per-layer "
              "slopes (bold: CPU), library call against library call, command line against "
              "command line. onnxfold's passes: the median of its library call's report's "
              "phases but load, save, report and signature."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench run layers", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", nargs="+", type=int, default=DEFAULT_DEPTHS, choices=DEPTHS,
                    metavar="N", help=f"depths, of {DEPTHS}; default: %(default)s")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds (medians)")
    ap.add_argument("--cache", type=Path, default=floor.DEFAULT_CACHE,
                    help="where the models are built (outside git); default: %(default)s")
    ap.add_argument("--work", type=Path, default=Path("/tmp/onnxfold-bench-layers"),
                    help="where the outputs and logs go; default: %(default)s")
    ap.add_argument("--peers-python", default=sys.executable,
                    help="the interpreter that has onnxsim; default: this one")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per child")
    ap.add_argument("--json", type=Path, help="also write every measured number here")
    ap.add_argument("--no-readme", action="store_true",
                    help="print the tables only; do not write them into bench/README.md")
    a = ap.parse_args(argv)
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")
    depths = sorted(set(a.layers))
    if len(depths) < 2:
        ap.error("--layers needs at least two depths (a slope)")
    sources = {n: floor.build(model_name(n), a.cache, a.timeout) for n in depths}
    result = measure(depths, sources, a.work, a.repeat, a.timeout, a.peers_python)
    try:
        asked = [a.peers_python, "-c", "import onnxsim; print(onnxsim.__version__)"]
        onnxsim = subprocess.run(asked, text=True, capture_output=True).stdout.strip()
    except OSError:  # no such interpreter: its runs said so already
        onnxsim = ""
    command = "python -m bench run layers" + \
        (f" --repeat {a.repeat}" if a.repeat != 3 else "") + \
        (f" --layers {' '.join(map(str, depths))}" if depths != DEFAULT_DEPTHS else "")
    text = dated(command, ("onnxfold", "onnx", "onnx-ir", "onnxruntime", "torch"),
                 f", onnxsim {onnxsim or 'not installed'}") + "\n\n" + table(result)
    print(text)
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    if not a.no_readme:
        replace_section(ROOT / "bench" / "README.md", "layers", text)
        _log("wrote the tables into bench/README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
