"""onnxfold against its peers on fresh transformer exports: nodes left, wall time, peak RSS.

Usage::

    python -m bench run peers [--work /tmp/peers] [--models NAME ...] [--repeat 3]
                              [--out bench/results/peers.md] [--tool-timeout 600]

Each model is exported fresh from a ``transformers`` config with random weights (seed 0; nothing
is downloaded) into ``--work`` (outside git; kept, so a rerun skips the exports), in its own
child process, with the example inputs of the export saved beside it (``NAME.inputs.npz``).
Then, one child process at a time, ``--repeat`` interleaved rounds of:

==============  ============================================================================
``onnxfold``    ``python -m onnxfold optimize IN -o OUT --json REPORT -q``
``ort``         onnxruntime's offline optimizer: ``ORT_ENABLE_BASIC`` + ``optimized_model_filepath``
``onnxsim``     ``onnxsim.simplify(IN, output_path=OUT)``
``onnxslim``    ``onnxslim.slim(IN, OUT)``
``onnxscript``  ``onnxscript.optimizer.optimize(onnx_ir.load(IN))``, then ``onnx_ir.save``
==============  ============================================================================

(the commands are in ``bench/tools.py``; the exports in ``bench/builders.py``). Measured per tool:

* nodes left: nodes of every graph (subgraphs included) except ``Constant`` nodes, so a tool
  that keeps its constants as nodes and one that makes them initializers count alike;
* wall seconds: median of the runs, of the whole child (interpreter start and imports
  included);
* peak RSS: the largest ``ru_maxrss`` of the child over the runs (``os.wait4`` on its pid);
* whether the output still runs: onnxruntime loads it and runs it on the export's own example
  inputs, with its default options and with ``ORT_DISABLE_ALL``; the latter's outputs are
  compared with the original's (run the same way, so the error is the tool's rewrite, not
  onnxruntime's fusions). ``fails`` if it does not load or run, or if an output's name, shape or
  dtype changed; ``differs`` if the largest error exceeds the dtype's tolerance (relative to
  the output's largest magnitude: 1e-3 for float32, 2e-2 for float16).

The example inputs respect what the export assumed (a KV-cache decoder gets a mask as long as
past + sequence and position ids that continue the past), so every tool is judged on inputs its
output must accept. Writes ``--out`` (markdown, dated, with the machine and the versions) and the
same data as JSON beside it; prints the short table that the README carries.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.builders import EXPORTS
from bench.machine import describe
from bench.process import ChildRun, run_child, run_status
from bench.readme import replace_section
from bench.tools import tool_cmd

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
# The exports measured (``builders.EXPORTS``), in the tables' order: with the exporters' own
# optimizations off (TorchScript's do_constant_folding=False, dynamo's optimize=False: every
# constant subgraph the model has, for the tools to fold), then the same models as torch's
# defaults export them (TorchScript's constant folding, dynamo's optimize=True: what users
# have, much of it folded already).
PLAIN = ("bert_base_ts", "gpt2_small_dynamo", "qwen2_kv_dynamo", "t5_small_ts",
         "bert_base_fp16_dynamo")
DEFAULTS = ("bert_base_ts_folded", "gpt2_small_dynamo_optimized", "qwen2_kv_dynamo_optimized",
            "t5_small_ts_folded", "bert_base_fp16_dynamo_optimized")
MODELS = PLAIN + DEFAULTS
TABLES = (("exporters' optimizations off (TorchScript `do_constant_folding=False`, dynamo "
           "`optimize=False`)", PLAIN),
          ("torch's default exports (TorchScript's constant folding, dynamo's `optimize=True`: "
           "what users have)", DEFAULTS))
TOOLS = ("onnxfold", "ort", "onnxsim", "onnxslim", "onnxscript")
TOOL_LABELS = {"onnxfold": "onnxfold", "ort": "onnxruntime basic", "onnxsim": "onnxsim",
               "onnxslim": "onnxslim", "onnxscript": "onnxscript optimizer"}
VERSIONED = ("onnxfold", "onnx", "onnx-ir", "onnxruntime", "onnxsim", "onnxslim", "onnxscript",
             "numpy", "torch", "transformers")
# Largest error allowed, relative to the largest magnitude of the original's output.
TOLERANCE = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 5e-2, "float64": 1e-9}


# What the README's table calls them.
SHORT_NAMES = {"bert_base_ts": "BERT-base, TorchScript",
               "gpt2_small_dynamo": "GPT-2 small, dynamo",
               "qwen2_kv_dynamo": "Qwen2-style + KV cache, dynamo",
               "t5_small_ts": "T5-small, TorchScript",
               "bert_base_fp16_dynamo": "BERT-base fp16, dynamo",
               "bert_base_ts_folded": "BERT-base, TorchScript",
               "gpt2_small_dynamo_optimized": "GPT-2 small, dynamo",
               "qwen2_kv_dynamo_optimized": "Qwen2-style + KV cache, dynamo",
               "t5_small_ts_folded": "T5-small, TorchScript",
               "bert_base_fp16_dynamo_optimized": "BERT-base fp16, dynamo"}


# --------------------------------------------------------------------------------------------
# The checks (each in a child: ``peers.py _child FUNC ARGS... JSON_OUT``)


def _count_nodes(graph: Any) -> dict[str, int]:
    """Nodes of ``graph`` and its subgraphs: all of them, and those that are not Constant."""
    total = constants = 0
    for node in graph.node:
        total += 1
        constants += node.op_type == "Constant" and node.domain in ("", "ai.onnx")
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                inner = _count_nodes(sub)
                total += inner["all"]
                constants += inner["all"] - inner["nodes"]
    return {"all": total, "nodes": total - constants}


def _child_reference(model: str, inputs: str, npz_out: str, json_out: str) -> None:
    """(child) The original's outputs on its example inputs (``ORT_DISABLE_ALL``), and counts."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    proto = onnx.load(model, load_external_data=False)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    data = np.load(inputs)
    feeds = {i.name: data[i.name] for i in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs()]
    outs = sess.run(names, feeds)
    np.savez(npz_out, **{f"out{i}": v for i, v in enumerate(outs)})
    Path(json_out).write_text(json.dumps({
        "output_names": names, **_count_nodes(proto.graph),
        "opset": next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0),
        "bytes": os.path.getsize(model)}))


def _child_check(model: str, inputs: str, ref_npz: str, ref_json: str, json_out: str) -> None:
    """(child) Nodes left in ``model``; does it load and run in onnxruntime, and match?

    It must load and run with onnxruntime's default options (what a user does); its error is
    measured with ``ORT_DISABLE_ALL``, as the original's outputs were, so that it is the tool's
    rewrite that is compared and not onnxruntime's own fusions.
    """
    import numpy as np
    import onnx
    import onnxruntime as ort

    ref = json.loads(Path(ref_json).read_text())
    result: dict[str, Any] = {**_count_nodes(onnx.load(model, load_external_data=False).graph),
                              "bytes": os.path.getsize(model), "runs": "fails",
                              "max_rel_err": None, "error": None}
    data, want = np.load(inputs), np.load(ref_npz)
    expected = [want[f"out{i}"] for i in range(len(ref["output_names"]))]
    try:
        got: list[Any] = []
        for level in (ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                      ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
            so = ort.SessionOptions()
            so.graph_optimization_level = level
            sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
            names = [o.name for o in sess.get_outputs()]
            if names != ref["output_names"]:
                raise RuntimeError(f"outputs {names} != {ref['output_names']}")
            got = sess.run(names, {i.name: data[i.name] for i in sess.get_inputs()})
            for name, out, expect in zip(names, got, expected):
                if out.shape != expect.shape or out.dtype != expect.dtype:
                    raise RuntimeError(f"output {name}: {out.dtype}{list(out.shape)} != "
                                       f"{expect.dtype}{list(expect.shape)}")
        worst, runs = 0.0, "ok"
        for out, expect in zip(got, expected):  # the ORT_DISABLE_ALL run
            if out.size == 0:
                continue
            a, b = expect.astype(np.float64), out.astype(np.float64)
            err = float(np.abs(a - b).max()) / max(float(np.abs(a).max()), 1e-30)
            worst = max(worst, err)
            if err > TOLERANCE.get(str(expect.dtype), 0.0):
                runs = "differs"
        result.update(runs=runs, max_rel_err=worst)
    except Exception as exc:  # any failure of the output is the finding, not a crash
        result["error"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    Path(json_out).write_text(json.dumps(result))


CHILDREN: dict[str, Callable[..., None]] = {
    "reference": _child_reference, "check": _child_check}


# --------------------------------------------------------------------------------------------
# The parent (stays small: Linux carries its RSS high-water mark into every child at exec)


@dataclass
class ToolResult:
    """One tool on one model."""

    status: str
    wall_s: float | None
    peak_rss_mib: float | None
    nodes: int | None = None
    runs: str | None = None
    max_rel_err: float | None = None
    error: str | None = None
    walls: list[float] | None = None
    bytes: int | None = None


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _helper(func: str, args: list[str], log_stem: Path, timeout: float) -> dict[str, Any]:
    """Run one of CHILDREN in a fresh interpreter; the JSON it wrote, or {"error": ...}."""
    json_out = log_stem.with_suffix(".json")
    json_out.unlink(missing_ok=True)
    run = run_child([sys.executable, "-m", "bench.peers", "_child", func, *args,
                     str(json_out)], log_stem, timeout, cwd=ROOT)
    if run.rc != 0 or not json_out.exists():
        return {"error": f"{func}: {'timed out' if run.timed_out else run.error_line}"}
    result: dict[str, Any] = json.loads(json_out.read_text())
    return result


def build(name: str, work: Path, timeout: float) -> Path | None:
    """The export of ``name`` in ``work`` (made now unless it is there); None if it failed."""
    path = work / f"{name}.onnx"
    if path.exists() and path.with_suffix(".inputs.npz").exists():
        return path
    _log(f"[{name}] exporting")
    run = run_child([sys.executable, "-m", "bench.builders", name, str(work)],
                    work / f"{name}.build", timeout, cwd=ROOT)
    if run.rc != 0 or not path.exists():
        _log(f"[{name}] export failed: {run.error_line}")
        return None
    return path


def measure(name: str, src: Path, work: Path, repeat: int, timeout: float) -> dict[str, Any]:
    """Every tool ``repeat`` times (interleaved), then each output counted and run."""
    inputs = src.with_suffix(".inputs.npz")
    tmp = work / f"{name}.runs"
    tmp.mkdir(exist_ok=True)
    ref = _helper("reference", [str(src), str(inputs), str(tmp / "reference.npz")],
                  tmp / "reference", timeout)
    outputs = {t: tmp / f"{name}.{t}.onnx" for t in TOOLS}
    runs: dict[str, list[ChildRun]] = {t: [] for t in TOOLS}
    for r in range(repeat):
        for tool in TOOLS:
            for p in tmp.glob(f"{name}.{tool}.onnx*"):
                p.unlink()
            _log(f"[{name}] {tool} run {r + 1}/{repeat}")
            cmd = tool_cmd(tool, src, outputs[tool], tmp / "onnxfold.json",
                           src.stat().st_size, sys.executable)
            os.sync()  # the previous output must not be written back during this run
            runs[tool].append(run_child(cmd, tmp / f"{tool}_{r}", timeout, cwd=tmp))
    tools: dict[str, Any] = {}
    for tool in TOOLS:
        status, _ = run_status(runs[tool], outputs[tool], timeout)
        walls = [x.wall_s for x in runs[tool]]
        res = ToolResult(status=status, wall_s=statistics.median(walls),
                         peak_rss_mib=max(x.maxrss_mib for x in runs[tool]), walls=walls)
        if status == "ok" and "error" not in ref:
            chk = _helper("check", [str(outputs[tool]), str(inputs), str(tmp / "reference.npz"),
                                    str(tmp / "reference.json")], tmp / f"{tool}_check",
                          timeout)
            res.nodes, res.runs = chk.get("nodes"), chk.get("runs", "fails")
            res.max_rel_err, res.error = chk.get("max_rel_err"), chk.get("error")
            res.bytes = chk.get("bytes")
        for p in tmp.glob(f"{name}.{tool}.onnx*"):
            p.unlink()
        _log(f"[{name}] {tool}: {status}, {res.nodes} nodes, {res.wall_s:.2f} s, "
             f"{res.peak_rss_mib:.0f} MiB, {res.runs} {res.error or ''}")
        tools[tool] = asdict(res)
    return {"what": EXPORTS[name][0], "input": ref, "tools": tools}


def machine() -> dict[str, Any]:
    """CPU, cores, memory and the versions the run used."""
    return describe(VERSIONED)


# --------------------------------------------------------------------------------------------
# The tables


def _cell_nodes(t: dict[str, Any], best: int | None) -> str:
    if t["status"] != "ok":
        return t["status"].split(":")[0]
    text = f"{t['nodes']:,}" if t["nodes"] is not None else "?"
    if t["runs"] != "ok":
        return f"{text} ({t['runs']})"
    return f"**{text}**" if t["nodes"] == best else text


def _best(model: dict[str, Any]) -> int | None:
    ok = [t["nodes"] for t in model["tools"].values()
          if t["status"] == "ok" and t["runs"] == "ok" and t["nodes"] is not None]
    return min(ok) if ok else None


def readme_table(result: dict[str, Any]) -> str:
    """Per model and tool: nodes left / wall s / peak RSS MiB (fewest nodes in bold), a table
    per kind of export measured (:data:`TABLES`), each under what it is."""
    parts = []
    for title, names in TABLES:
        measured = {n: result["models"][n] for n in names if n in result["models"]}
        if measured:
            parts.append(f"On {title}:\n\n" + _table(measured))
    others = {n: m for n, m in result["models"].items() if n not in MODELS}
    if others:
        parts.append(_table(others))
    return "\n\n".join(parts)


def _cut(model: dict[str, Any]) -> str:
    """How much of its export onnxfold's output removed: ``-64%``."""
    before, after = model["input"].get("nodes"), model["tools"]["onnxfold"].get("nodes")
    if not before or after is None:
        return ""
    return f" · {100 * (after - before) / before:+.0f}%"


def _table(models: dict[str, Any]) -> str:
    head = "| model (nodes) | " + " | ".join(TOOL_LABELS[t] for t in TOOLS) + " |"
    lines = [head, "|---" + "|--:" * len(TOOLS) + "|"]
    for name, m in models.items():
        if "tools" not in m:
            continue
        best = _best(m)
        cells = []
        for tool in TOOLS:
            t = m["tools"][tool]
            cell = _cell_nodes(t, best)
            if tool == "onnxfold" and t["status"] == "ok":
                cell += _cut(m)
            if t["status"] == "ok":
                cell += f" · {t['wall_s']:.1f} s · {t['peak_rss_mib']:,.0f} MiB"
            cells.append(cell)
        label = SHORT_NAMES.get(name, name)
        lines.append(f"| {label} ({m['input'].get('nodes', '?'):,}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(result: dict[str, Any]) -> str:
    """The markdown of bench/results/peers.md."""
    mach, v = result["machine"], result["machine"]["versions"]
    out = [
        "# onnxfold and its peers on fresh transformer exports",
        "",
        f"Run {result['date']} with `{result['command']}` (`bench/peers.py`; its docstring says "
        "how each number is measured).",
        f"Machine: {mach['cpu']}, {mach['cores']} cores (shared with other work), "
        f"{mach['mem_gib']} GiB, {mach['platform']}, Python {mach['python']}.",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
        "",
        "Exports built from `transformers` configs with random weights (seed 0); every tool ran "
        f"{result['repeat']} times, each run its own child process, one at a time. Nodes left "
        "exclude `Constant` nodes; wall is the median, peak RSS the largest `ru_maxrss` over "
        "the runs; the fewest nodes among outputs that run correctly is in bold. Every output "
        "was run in onnxruntime on the export's example inputs (default options, and "
        "`ORT_DISABLE_ALL` to compare it with the original run the same way): `fails` = does "
        "not load or run, `differs` = an output is off by more than the dtype's tolerance; "
        "max rel. error = largest error / largest magnitude of the original's output.",
        "",
        "## Nodes left · wall · peak RSS",
        "",
        readme_table(result),
        "",
        "## Per model",
    ]
    for name, m in result["models"].items():
        out += ["", f"### {name}", "", m["what"] + "."]
        if "tools" not in m:
            out += ["", f"Not measured: {m.get('error')}"]
            continue
        inp = m["input"]
        if "error" in inp:
            out += ["", f"The original did not run in onnxruntime: {inp['error']}"]
        else:
            out += ["", f"Export: {inp['nodes']:,} nodes besides {inp['all'] - inp['nodes']:,} "
                        f"Constant nodes, opset {inp['opset']}, {inp['bytes'] / (1 << 20):,.1f} "
                        "MiB."]
        out += ["", "| tool | status | nodes left | wall s (median) | wall s (runs) | "
                    "peak RSS MiB | output MiB | runs in onnxruntime | max rel. error |",
                "|---|---|--:|--:|--:|--:|--:|---|--:|"]
        for tool in TOOLS:
            t = m["tools"][tool]
            walls = ", ".join(f"{w:.2f}" for w in t["walls"] or [])
            err = f"{t['max_rel_err']:.1e}" if t["max_rel_err"] is not None else ""
            runs = (t["runs"] or "") + (f": {t['error']}" if t["error"] else "")
            size = f"{t['bytes'] / (1 << 20):,.1f}" if t["bytes"] else ""
            nodes = f"{t['nodes']:,}" if t["nodes"] is not None else ""
            out.append(f"| {TOOL_LABELS[tool]} | {t['status']} | {nodes} | {t['wall_s']:.2f} | "
                       f"{walls} | {t['peak_rss_mib']:,.0f} | {size} | {runs} | {err} |")
    return "\n".join(out) + "\n"


def _write_readme_table(result: dict[str, Any], into_readme: bool) -> None:
    """Print the short table; put it into bench/README.md too (the README's peer table)."""
    table = readme_table(result)
    print(table)
    if into_readme:
        replace_section(BENCH_DIR / "README.md", "peers",
                        f"`{result['command']}`, {result['date']}:\n\n{table}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench run peers", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/peers"),
                    help="where the exports and outputs go (outside git); default: %(default)s")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS),
                    metavar="NAME", help="default: %(default)s")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool (median wall)")
    ap.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "peers.md")
    ap.add_argument("--tool-timeout", type=float, default=600.0, help="seconds per child")
    ap.add_argument("--no-readme", action="store_true",
                    help="do not write the short table into bench/README.md")
    ap.add_argument("--render", action="store_true",
                    help="measure nothing: write --out again from the JSON beside it")
    a = ap.parse_args(argv)
    if a.render:
        saved = json.loads(a.out.with_suffix(".json").read_text())
        a.out.write_text(render(saved))
        _write_readme_table(saved, not a.no_readme)
        return 0
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")
    a.work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m bench run peers" + (f" --models {' '.join(a.models)}"
                                              if a.models != list(MODELS) else "")
                   + (f" --repeat {a.repeat}" if a.repeat != 3 else ""),
        "repeat": a.repeat, "machine": machine(), "models": {},
    }
    paths = {name: build(name, a.work, a.tool_timeout) for name in a.models}
    for name, src in paths.items():
        if src is None:
            result["models"][name] = {"what": EXPORTS[name][0], "error": "the export failed"}
            continue
        result["models"][name] = measure(name, src, a.work, a.repeat, a.tool_timeout)
        a.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    a.out.write_text(render(result))
    a.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    _write_readme_table(result, not a.no_readme)
    _log(f"wrote {a.out} and {a.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "_child":
        CHILDREN[sys.argv[2]](*sys.argv[3:])
        sys.exit(0)
    sys.exit(main())
