"""Issue 24's node table: onnxfold against onnxruntime basic, onnxsim, onnxslim and the
onnxscript optimizer on the exports its "Done when" names, each output checked against the
original in onnxruntime at two bindings of every dynamic dim (one a decode step).

Usage::

    python -m bench run done_when [--work /tmp/onnxfold-done-when] [--models NAME ...]
                                  [--out bench/results/done_when_24.md] [--tool-timeout 600]

Each export (``bench/builders.py`` ``EXPORTS``: transformers configs, random weights, seed 0)
is built into ``--work`` in its own child unless it is there. Every tool then runs once, in its
own child (``bench/tools.py``; onnxfold also with ``--assume-named-dims-equal``); its output's
nodes are counted without ``Constant`` nodes (subgraphs included), and ``python -m onnxfold
compare ORIGINAL OUTPUT --dim ...`` runs both in onnxruntime at each binding of ``BINDINGS``
(``ORT_DISABLE_ALL``, weights not prepacked; float32 within rtol 1e-4 and atol 1e-5, float16
within 2 ulps; ``docs/check.md``). Node counts are of outputs that pass every binding; the
others are marked. Writes ``--out`` (markdown, dated, machine and versions) and JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import onnx

from bench.builders import EXPORTS
from bench.machine import describe
from bench.peers import VERSIONED, _count_nodes, build
from bench.process import run_child
from bench.tools import tool_cmd

ROOT = Path(__file__).resolve().parent.parent
_KV = ({"batch": 2, "seq": 5, "past": 3, "total": 8},
       {"batch": 1, "seq": 1, "past": 7, "total": 8})  # prefill-like, then one decode step
# name -> (what the table calls it, the bindings its outputs are checked at)
BINDINGS: dict[str, tuple[str, tuple[dict[str, int], ...]]] = {
    "qwen2_kv_ts": ("Qwen2-style + KV cache, TorchScript", _KV),
    "qwen2_kv_dynamo": ("Qwen2-style + KV cache, dynamo", _KV),
    "qwen2_kv_dynamo_optimized": ("Qwen2-style + KV cache, dynamo, exporter's optimize", _KV),
    "t5_small_ts": ("T5-small, TorchScript (static)", ({}, {})),
    "bart_dynamo": ("BART (2+2 layers), dynamo", ({"batch": 2, "seq": 9, "dec": 6},
                                                 {"batch": 1, "seq": 5, "dec": 1})),
    "resnet50_dynamo": ("ResNet-50, dynamo, dynamic batch and image size",
                        ({"batch": 2, "height": 96, "width": 128},
                         {"batch": 1, "height": 65, "width": 47})),
    "gpt2_small_dynamo": ("GPT-2 small, dynamo", ({"batch": 2, "seq": 9},
                                                  {"batch": 1, "seq": 1})),
}
TOOLS = ("onnxfold", "onnxfold_named", "ort", "onnxsim", "onnxslim", "onnxscript")
PEERS = ("ort", "onnxsim", "onnxslim", "onnxscript")
LABELS = {"onnxfold": "onnxfold", "onnxfold_named": "onnxfold --assume-named-dims-equal",
          "ort": "onnxruntime basic", "onnxsim": "onnxsim", "onnxslim": "onnxslim",
          "onnxscript": "onnxscript optimizer"}


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _command(tool: str, src: Path, dst: Path, report: Path) -> list[str]:
    if tool == "onnxfold_named":
        return [*tool_cmd("onnxfold", src, dst, report, src.stat().st_size),
                "--assume-named-dims-equal"]
    return tool_cmd(tool, src, dst, report, src.stat().st_size)


def _nodes(path: Path) -> int:
    return int(_count_nodes(onnx.load(str(path), load_external_data=False).graph)["nodes"])


def _checked(src: Path, out: Path, dims: dict[str, int], seed: int, log_stem: Path,
             timeout: float) -> dict[str, Any]:
    """``onnxfold compare`` of the original and ``out`` at ``dims``: ok / differs / the error,
    whether every output is the same bits, and the largest absolute difference."""
    report = log_stem.with_suffix(".json")
    report.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "onnxfold", "compare", str(src), str(out), "-n", "1",
           "--seed", str(seed), "--json", str(report)]
    for name, value in dims.items():
        cmd += ["--dim", f"{name}={value}"]
    run = run_child(cmd, log_stem, timeout, cwd=ROOT)
    if run.rc not in (0, 1) or not report.exists():
        return {"status": f"fails: {run.error_line}", "dims": dims}
    rows = json.loads(report.read_text())["outputs"]
    return {"status": "ok" if run.rc == 0 else "differs", "dims": dims,
            "bitwise": all(r["bitwise_equal"] for r in rows),
            "max_abs": max((r["max_abs"] or 0.0 for r in rows), default=0.0)}


def measure(name: str, src: Path, work: Path, timeout: float) -> dict[str, Any]:
    """Every tool once on ``src``; each output's nodes and its checks at every binding."""
    runs = work / f"{name}.done_when"
    runs.mkdir(exist_ok=True)
    tools: dict[str, Any] = {}
    for tool in TOOLS:
        out = runs / f"{tool}.onnx"
        for stale in runs.glob(f"{tool}.onnx*"):
            stale.unlink()
        _log(f"[{name}] {tool}")
        run = run_child(_command(tool, src, out, runs / "onnxfold.json"), runs / tool, timeout,
                        cwd=runs)
        if run.rc != 0 or not out.exists():
            tools[tool] = {"status": f"crashed: {run.error_line}", "nodes": None, "checks": []}
            continue
        checks = [_checked(src, out, dims, seed, runs / f"{tool}_check{seed}", timeout)
                  for seed, dims in enumerate(BINDINGS[name][1])]
        tools[tool] = {"status": "ok", "nodes": _nodes(out), "checks": checks}
        _log(f"[{name}] {tool}: {tools[tool]['nodes']} nodes, "
             + ", ".join(c["status"] for c in checks))
        for done in runs.glob(f"{tool}.onnx*"):
            done.unlink()
    return {"label": BINDINGS[name][0], "what": EXPORTS[name][0], "nodes": _nodes(src),
            "tools": tools}


def _passes(result: dict[str, Any]) -> bool:
    return result["status"] == "ok" and all(c["status"] == "ok" for c in result["checks"])


def _cell(result: dict[str, Any]) -> str:
    if result["status"] != "ok":
        return result["status"].split(":")[0]
    failed = [c["status"].split(":")[0] for c in result["checks"] if c["status"] != "ok"]
    return f"{result['nodes']:,}" + (f" ({failed[0]})" if failed else "")


def _best_peer(model: dict[str, Any]) -> int | None:
    counts = [model["tools"][t]["nodes"] for t in PEERS if _passes(model["tools"][t])]
    return min(counts) if counts else None


def _met(name: str, model: dict[str, Any]) -> str:
    """Whether onnxfold leaves no more nodes than the best peer (GPT-2: with the option, which
    the issue allows there)."""
    best = _best_peer(model)
    ours = [t for t in (("onnxfold", "onnxfold_named") if name.startswith("gpt2") else
                        ("onnxfold",)) if _passes(model["tools"][t])]
    if best is None or not ours:
        return "?"
    fewest = min(model["tools"][t]["nodes"] for t in ours)
    return "yes" if fewest <= best else f"no (+{fewest - best})"


def render(result: dict[str, Any]) -> str:
    mach, versions = result["machine"], result["machine"]["versions"]
    out = [
        "# Issue 24, \"Done when\": nodes left on the exports it names",
        "",
        f"Run {result['date']} with `{result['command']}` (`bench/done_when.py`; its docstring "
        "says how each number is measured).",
        f"Machine: {mach['cpu']}, {mach['cores']} cores (shared), {mach['mem_gib']} GiB, "
        f"Python {mach['python']}. Versions: "
        + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
        "",
        "Nodes left without `Constant` nodes; an output that fails or differs from the "
        "original's in onnxruntime at a binding is marked and not counted as best. `met`: "
        "onnxfold leaves no more nodes than the best of the four peers (GPT-2: with "
        "`--assume-named-dims-equal`, as the issue allows).",
        "",
        "| model (export nodes) | " + " | ".join(LABELS[t] for t in TOOLS) + " | met |",
        "|---" + "|--:" * len(TOOLS) + "|---|",
    ]
    for name, model in result["models"].items():
        if "tools" not in model:
            out.append(f"| {BINDINGS[name][0]} | not measured: {model['error']} |")
            continue
        best = _best_peer(model)
        cells = []
        for tool in TOOLS:
            cell = _cell(model["tools"][tool])
            if tool in PEERS and model["tools"][tool]["nodes"] == best and best is not None:
                cell = f"**{cell}**"
            cells.append(cell)
        out.append(f"| {model['label']} ({model['nodes']:,}) | " + " | ".join(cells)
                   + f" | {_met(name, model)} |")
    out += ["", "## Checks in onnxruntime", "",
            "Each output against the original at each binding: `=` the same bits, else the "
            "largest absolute difference (within the tolerance unless marked).", ""]
    for name, model in result["models"].items():
        if "tools" not in model:
            continue
        dims = [c["dims"] for c in next(iter(model["tools"].values()))["checks"]] or \
            list(BINDINGS[name][1])
        out += [f"### {name}", "", model["what"] + ".", "",
                "| tool | " + " | ".join(", ".join(f"{k}={v}" for k, v in d.items()) or
                                       f"static, seed {i}" for i, d in enumerate(dims)) + " |",
                "|---" + "|---" * len(dims) + "|"]
        for tool in TOOLS:
            checks = model["tools"][tool]["checks"]
            if not checks:
                out.append(f"| {LABELS[tool]} | {model['tools'][tool]['status']} |")
                continue
            cells = [c["status"] if c["status"] not in ("ok", "differs") else
                     ("=" if c["bitwise"] else f"{c['max_abs']:.1e}")
                     + (" (differs)" if c["status"] == "differs" else "") for c in checks]
            out.append(f"| {LABELS[tool]} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench run done_when", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/onnxfold-done-when"),
                    help="where the exports and outputs go (outside git); default: %(default)s")
    ap.add_argument("--models", nargs="+", default=list(BINDINGS), choices=list(BINDINGS),
                    metavar="NAME", help="default: %(default)s")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "done_when_24.md")
    ap.add_argument("--tool-timeout", type=float, default=600.0, help="seconds per child")
    a = ap.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m bench run done_when" + (f" --models {' '.join(a.models)}"
                                                      if a.models != list(BINDINGS) else ""),
        "machine": describe(VERSIONED), "models": {},
    }
    for name in a.models:  # one export at a time: the heavy ones need the memory
        src = build(name, a.work, a.tool_timeout)
        result["models"][name] = {"error": "the export failed"} if src is None else \
            measure(name, src, a.work, a.tool_timeout)
        a.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    a.out.write_text(render(result))
    _log(f"wrote {a.out} and {a.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
