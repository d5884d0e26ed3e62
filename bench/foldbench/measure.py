"""One model: every tool ``--repeat`` times (interleaved), then its output checked, and ratios.

Before each run the previous outputs are deleted and ``sync`` flushes them, so no tool pays for
another's writeback; each output is deleted once measured, to free the disk for the next.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from foldbench import MiB
from foldbench.peers import tool_cmd
from foldbench.runner import ChildRun, run_child, run_helper, run_status


def warm_cache(path: Path) -> None:
    """Read a model and its external data files once (in small chunks): a warm page cache."""
    for p in sorted(path.parent.glob(glob_escape(path.name) + "*")):
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(4 * MiB):
                    pass


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def _log(name: str, what: str) -> None:
    print(f"[{name}] {what}", file=sys.stderr, flush=True)


def _delete_output(tmp: Path, name: str, tool: str) -> None:
    for p in tmp.glob(f"{glob_escape(name)}.{tool}.onnx*"):
        p.unlink()


def _run_tools(name: str, src: Path, tmp: Path, repeat: int, runnable: list[str],
               outputs: dict[str, Path], input_bytes: int, tool_timeouts: dict[str, float],
               peers_python: str) -> tuple[dict[str, list[ChildRun]], dict[str, Any]]:
    """``repeat`` rounds of every runnable tool; the runs, and onnxfold's last JSON report."""
    runs: dict[str, list[ChildRun]] = {t: [] for t in runnable}
    report_path = tmp / "onnxfold_report.json"
    fold_report: dict[str, Any] = {}
    for r in range(repeat):
        for tool in runnable:
            _delete_output(tmp, name, tool)
            report_path.unlink(missing_ok=True)
            _log(name, f"{tool} run {r + 1}/{repeat}")
            cmd = tool_cmd(tool, src, outputs[tool], report_path, input_bytes, peers_python)
            os.sync()  # the previous tool's output must not be written back during this run
            run = run_child(cmd, tmp / f"{tool}_{r}", tool_timeouts[tool], cwd=tmp)
            runs[tool].append(run)
            if tool == "onnxfold" and run.rc == 0 and report_path.exists():
                fold_report = json.loads(report_path.read_text())
    return runs, fold_report


def _check_output(entry: dict[str, Any], tool: str, output: Path, tools_dir: Path,
                  ref: dict[str, Any], tmp: Path, timeout: float) -> None:
    """Stats of an ok tool's output, whether it loads in ORT and its max abs diff, into entry."""
    st = run_helper("_child_stats", [str(tools_dir), str(output)], tmp / f"{tool}_stats",
                    timeout)
    entry["cf_shape"] = st.get("cf_shape")
    entry["output_bytes"] = st.get("file_bytes")
    entry["output_external_data"] = st.get("external_data")
    entry["nodes"] = st.get("nodes")
    if "error" in st:
        entry["stats_error"] = st["error"]
    if "error" in ref:
        entry["loads_in_ort"] = None
        entry["max_abs_diff"] = None
        entry["accuracy_error"] = "reference failed: " + ref["error"]
        return
    cmp_ = run_helper("_child_compare", [str(output), str(tmp / "reference.npz"),
                                         str(tmp / "reference.json")],
                      tmp / f"{tool}_compare", timeout)
    entry["loads_in_ort"] = cmp_.get("loads_in_ort")
    entry["max_abs_diff"] = cmp_.get("max_abs_diff")
    if cmp_.get("error"):
        entry["accuracy_error"] = cmp_["error"]


def _summarize(rs: list[ChildRun], status: str, input_bytes: int) -> dict[str, Any]:
    """Medians of wall and CPU time, max of peak RSS, over a tool's runs."""
    rss = max(x.maxrss_mib for x in rs)
    return {
        "status": status,
        "ok": status == "ok",
        "wall_s": statistics.median(x.wall_s for x in rs),
        "user_s": statistics.median(x.user_s for x in rs),
        "sys_s": statistics.median(x.sys_s for x in rs),
        "peak_rss_mib": rss,
        "rss_over_input": rss * MiB / input_bytes if input_bytes else None,
        "runs": [asdict(x) for x in rs],
    }


def _ratios(entries: dict[str, Any], tools: list[str]) -> dict[str, Any]:
    """onnxfold / peer for wall time and peak RSS, where both finished ok."""
    ratios: dict[str, Any] = {}
    f = entries.get("onnxfold")
    for tool in tools:
        o = entries[tool]
        if tool == "onnxfold" or not f or not (f["ok"] and o["ok"]):
            continue
        ratios[tool] = {
            "wall": f["wall_s"] / o["wall_s"] if o["wall_s"] else None,
            "rss": f["peak_rss_mib"] / o["peak_rss_mib"] if o["peak_rss_mib"] else None,
        }
    return ratios


def bench_model(name: str, src: Path, tools_dir: Path, tmp_root: Path, repeat: int,
                timeout: float, tools: list[str], tool_timeouts: dict[str, float],
                peers_python: str, installed: dict[str, str | None]) -> dict[str, Any]:
    """Everything measured on one model (its optimized models live in a temporary directory)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"{name}_", dir=tmp_root))
    try:
        _log(name, "input stats")
        warm_cache(src)
        in_stats = run_helper("_child_stats", [str(tools_dir), str(src)], tmp / "in_stats",
                              timeout)
        input_bytes = int(in_stats.get("file_bytes") or src.stat().st_size)
        _log(name, "reference outputs")
        ref = run_helper("_child_reference", [str(src), str(tmp / "reference.npz")],
                         tmp / "reference", timeout)

        runnable = [t for t in tools if installed.get(t) is None]
        outputs = {t: tmp / f"{name}.{t}.onnx" for t in tools}
        runs, fold_report = _run_tools(name, src, tmp, repeat, runnable, outputs, input_bytes,
                                       tool_timeouts, peers_python)

        entries: dict[str, Any] = {}
        for tool in tools:
            if tool not in runs:
                entries[tool] = {"status": "not installed", "ok": False, "wall_s": None,
                                 "peak_rss_mib": None, "rss_over_input": None,
                                 "error": installed.get(tool)}
                continue
            status, error = run_status(runs[tool], outputs[tool], tool_timeouts[tool])
            entry = _summarize(runs[tool], status, input_bytes)
            if tool == "onnxfold":
                rep = fold_report if entry["ok"] else {}
                entry["pool_peak_bytes"] = rep.get("pool_peak_bytes")
                entry["report"] = {k: v for k, v in rep.items() if k != "declined_nodes"}
            if not entry["ok"]:
                entry["error"] = error
                _log(name, f"{tool} FAILED: {status}")
            else:
                _log(name, f"{tool} output stats + accuracy")
                _check_output(entry, tool, outputs[tool], tools_dir, ref, tmp, timeout)
            _delete_output(tmp, name, tool)  # free the disk before the next tool's output
            entries[tool] = entry

        return {
            "input": {"path": str(src), **in_stats},
            "reference": ref,
            "tools": entries,
            "ratio_onnxfold_over": _ratios(entries, tools),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
