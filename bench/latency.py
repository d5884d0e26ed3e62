"""Deployed latency, original against onnxfold's output, on a matrix of the formats people
ship: float32 encoders, a decoder with a KV cache and a CNN; a float16 export; static-QDQ
transformers and a static-QDQ CNN (onnxruntime's ``quantize_static``), and a dynamically
quantized transformer (``quantize_dynamic``).

Usage::

    python -m bench run latency [--models NAME ...] [--runs 30] [--threads 1]
                                [--work /tmp/onnxfold-bench-latency] [--no-readme]

Each model (``bench/builders.py``: ``EXPORTS`` and ``QUANTIZED``, transformers configs with
random weights) is built into ``--work`` in a child unless it is there, then folded with the
defaults by ``python -m onnxfold optimize MODEL -o OUT --latency RUNS --latency-threads T
--json REPORT`` in a child: onnxruntime on the CPU, ``T`` intra-op threads, default session
options, session creation (3 each) and inference (median of ``RUNS`` after 2 warm-up) of the
original and the output interleaved, at onnxruntime's default level (``all``, what a user
deploys) and with its optimizations off (``onnxfold.latency.measure``). A ratio is output /
original in the same run; the target is <= 1.02x at the default level on every model.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.builders import EXPORTS, QUANTIZED
from bench.machine import describe
from bench.process import run_child
from bench.readme import replace_section

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("bert_base_ts", "gpt2_small_dynamo", "qwen2_kv_dynamo", "resnet50_dynamo",
          "bert_base_fp16_dynamo", "bert_base_qdq", "distilbert_qdq", "resnet50_qdq",
          "bert_base_qdyn")
TARGET = 1.02  # output / original at onnxruntime's default level


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _what(name: str) -> str:
    return QUANTIZED[name][0] if name in QUANTIZED else EXPORTS[name][0]


def measure(name: str, work: Path, runs: int, threads: int, timeout: float) -> dict[str, Any]:
    """Build ``name`` and fold it with ``--latency``: its report's latency, nodes and status."""
    build = run_child([sys.executable, "-m", "bench.builders", name, str(work)],
                      work / f"{name}.build", timeout, cwd=ROOT)
    if build.rc != 0:
        return {"what": _what(name), "status": f"build failed: {build.error_line}"}
    report = work / f"{name}.report.json"
    report.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "onnxfold", "optimize", str(work / f"{name}.onnx"), "-o",
           str(work / f"{name}.out.onnx"), "--latency", str(runs), "--latency-threads",
           str(threads), "--json", str(report), "-q"]
    run = run_child(cmd, work / f"{name}.fold", timeout, cwd=ROOT)
    if run.rc != 0 or not report.exists():
        return {"what": _what(name), "status": f"exit {run.rc}: {run.error_line}"}
    data = json.loads(report.read_text())
    return {"what": _what(name), "status": "ok", "nodes": (data["nodes_before"],
                                                           data["nodes_after"]),
            "latency": data["latency"]}


def _cell(timing: dict[str, Any], key: str) -> str:
    before, after = timing[f"{key}_ms"]
    ratio = timing[f"{key}_ratio"]
    mark = "**" if key == "run" and timing["level"] == "all" and ratio > TARGET else ""
    return f"{_ms(before)} -> {_ms(after)} ms ({mark}{ratio:.2f}x{mark})"


def _ms(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = ["| model | nodes | inference, default level | session, default level | "
             "inference, optimizations off | on disk |", "|---|--:|--:|--:|--:|--:|"]
    for res in results.values():
        if res["status"] != "ok":
            lines.append(f"| {res['what']} | {res['status']} | | | | |")
            continue
        timings = {t["level"]: t for t in res["latency"]["timings"]}
        a, b = res["latency"]["file_bytes"]
        lines.append(f"| {res['what']} | {res['nodes'][0]:,} -> {res['nodes'][1]:,} | "
                     f"{_cell(timings['all'], 'run')} | {_cell(timings['all'], 'create')} | "
                     f"{_cell(timings['disable'], 'run')} | "
                     f"{a / 2**20:.1f} -> {b / 2**20:.1f} MiB |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench run latency", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(MODELS),
                    choices=[*EXPORTS, *QUANTIZED], metavar="NAME",
                    help="default: %(default)s")
    ap.add_argument("--runs", type=int, default=30, help="timed runs per model and level")
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime's intra-op threads")
    ap.add_argument("--work", type=Path, default=Path("/tmp/onnxfold-bench-latency"),
                    help="where the models, outputs and logs go; default: %(default)s")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per child")
    ap.add_argument("--no-readme", action="store_true",
                    help="print the table only; do not write it into bench/README.md")
    a = ap.parse_args(argv)
    if a.runs < 1 or a.threads < 1:
        ap.error("--runs and --threads must be >= 1")
    a.work.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in a.models:
        results[name] = measure(name, a.work, a.runs, a.threads, a.timeout)
        _log(f"[{name}] {results[name]['status']}")
    over = [r["what"] for r in results.values() if r["status"] == "ok" and
            next(t for t in r["latency"]["timings"] if t["level"] == "all")["run_ratio"] > TARGET]
    command = "python -m bench run latency" + (f" --runs {a.runs}" if a.runs != 30 else "") + (
        f" --threads {a.threads}" if a.threads != 1 else "") + (
        f" --models {' '.join(a.models)}" if a.models != list(MODELS) else "")
    info = describe(("onnxfold", "onnx", "onnxruntime", "torch"))
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
    text = (f"`{command}`, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {info['cpu']}, "
            f"{info['cores']} cores, {info['mem_gib']} GiB; {versions}.\n\n"
            + table(results) + "\n\n"
            f"Each cell: the original's median -> the output's median (output / original in "
            f"the same run; bold above {TARGET}x at the default level), onnxruntime CPU, "
            f"{a.threads} intra-op thread(s), default session options, {a.runs} interleaved "
            "runs after 2 warm-up; session creation the median of 3 each.")
    print(text)
    (a.work / "latency.json").write_text(json.dumps(results, indent=1))
    if not a.no_readme:
        replace_section(ROOT / "bench" / "README.md", "latency", text)
        _log("wrote the table into bench/README.md")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
