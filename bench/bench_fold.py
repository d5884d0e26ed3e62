"""Benchmark onnxfold against onnxruntime's offline graph optimizer on real models.

For every model, two tools are run, each as its own child process:

* ``onnxfold``: ``python -m onnxfold optimize IN -o OUT --json REPORT -q``
* ``ort``: a ``python -c`` child that creates an ``onnxruntime.InferenceSession`` with
  ``graph_optimization_level = ORT_ENABLE_BASIC`` (ONNX-level rewrites incl. constant folding)
  and ``optimized_model_filepath = OUT``, i.e. onnxruntime's offline optimization.

Measured per tool (``--repeat N`` runs, interleaved between the tools):

* wall time of the child (median over the runs), including interpreter start-up and imports;
* peak RSS of the child alone (max over the runs): ``ru_maxrss`` from ``os.wait4`` on its pid.
  Linux carries the parent's RSS high-water mark into a child at ``exec``, so the parent stays
  small (no numpy/onnx imports, all analysis in further children); the RSS of a trivial child,
  the floor below which no number can go, is shown in the header. Memory-mapped weights that a
  tool touches count towards RSS;
* ``RSS / input``: peak RSS over the input's size on disk (.onnx plus external data).

Measured per output (of the last run), each check in its own child, one process at a time:

* ``cf_shape left``: constant-foldable nodes remaining, ``stats()`` of the corpus tools'
  ``onnxstats.py`` (the input row shows the count before folding);
* output size on disk (.onnx plus external data);
* ``loads in ORT``: an ``InferenceSession`` with default options can be created;
* ``max abs diff``: largest absolute difference of any output versus the original model, both run
  with ``ORT_DISABLE_ALL`` (so only the rewrite is compared, not onnxruntime's own fusions), on the
  same seeded random inputs: symbolic dims -> 1, floats standard normal, integer inputs uniform in
  [0, 1000) except names containing ``mask`` (ones), ``token_type``/``segment`` (zeros) and
  ``position`` (0, 1, 2, ...), which would otherwise index out of range or overflow;
* for onnxfold also ``pool_peak_bytes`` from its JSON report (peak of its buffer pool).

Ratio rows give onnxfold / ORT for wall time and peak RSS. Results go to ``<out>/results.md``
(also printed) and ``<out>/results.json``; optimized models live in a temporary directory that is
deleted (per model, as soon as it has been measured).

Usage::

    python bench/bench_fold.py --corpus /work/corpus [--models bert_base_ts ...] [--repeat N]
                               [--out bench/results] [--build]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_MODELS = ["bert_base_ts", "gpt2_small_ts", "syn_chain_big"]
TOOLS = ("onnxfold", "ort")
MiB = 1 << 20
SEED = 0
# ORT cannot write a >2 GB protobuf: above this input size its optimized model gets external data.
ORT_EXTERNAL_ABOVE = 1536 * MiB

ORT_OFFLINE_CODE = """\
import sys
import onnxruntime as ort
src, dst, ext = sys.argv[1:4]
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
so.optimized_model_filepath = dst
if ext:
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", ext)
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "1024")
ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
"""

# Runs one of the _child_* functions below in a fresh interpreter: argv = [dir, func, args...].
HELPER_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1]); import bench_fold; "
    "getattr(bench_fold, sys.argv[2])(*sys.argv[3:])"
)


# --------------------------------------------------------------------------- child processes


@dataclass
class ChildRun:
    """One measured child process."""

    rc: int
    wall_s: float
    maxrss_mib: float
    timed_out: bool
    stderr_tail: str


def run_child(cmd: list[str], log_stem: Path, timeout: float) -> ChildRun:
    """Run ``cmd``; time it and read its peak RSS with ``os.wait4`` (stdout/err go to files)."""
    out_path = log_stem.with_suffix(".out")
    err_path = log_stem.with_suffix(".err")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        done = threading.Event()
        timed_out = threading.Event()

        def kill() -> None:
            if not done.is_set():
                timed_out.set()
                os.kill(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            done.set()
            timer.cancel()
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4, tell Popen
    tail = err_path.read_text(errors="replace").strip().splitlines()[-8:]
    return ChildRun(rc=proc.returncode, wall_s=wall, maxrss_mib=usage.ru_maxrss / 1024,
                    timed_out=timed_out.is_set(), stderr_tail="\n".join(tail))


def run_helper(func: str, args: list[str], log_stem: Path, timeout: float) -> dict[str, Any]:
    """Run ``bench_fold.<func>(*args, json_out)`` in a child; return the JSON it wrote."""
    json_out = log_stem.with_suffix(".json")
    json_out.unlink(missing_ok=True)
    cmd = [sys.executable, "-c", HELPER_CODE, str(BENCH_DIR), func, *args, str(json_out)]
    run = run_child(cmd, log_stem, timeout)
    if run.rc != 0 or not json_out.exists():
        why = "timed out" if run.timed_out else f"exit {run.rc}"
        return {"error": f"{func} {why}: {run.stderr_tail[-600:]}"}
    return json.loads(json_out.read_text())


def _write_json(path: str, data: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(data, indent=1))


def _child_stats(tools_dir: str, model: str, json_out: str) -> None:
    """(child) onnxstats.stats() of a model."""
    sys.path.insert(0, tools_dir)
    from onnxstats import stats

    _write_json(json_out, stats(model))


_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int16)": "int16",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(uint16)": "uint16",
    "tensor(uint32)": "uint32", "tensor(uint64)": "uint64", "tensor(bool)": "bool",
}


def _child_reference(model: str, npz_out: str, json_out: str) -> None:
    """(child) Seeded random inputs and the original model's outputs, saved to ``npz_out``."""
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(SEED)
    feeds: dict[str, Any] = {}
    described = []
    for inp in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in inp.shape]
        dtype = np.dtype(_ORT_TYPES[inp.type])
        name = inp.name.lower()
        if dtype.kind in "iu":
            if "mask" in name:
                arr = np.ones(shape, dtype)
            elif "token_type" in name or "segment" in name:
                arr = np.zeros(shape, dtype)
            elif "position" in name:
                arr = np.broadcast_to(np.arange(shape[-1] if shape else 1) % 1000,
                                      shape).astype(dtype)
            else:
                hi = min(1000, int(np.iinfo(dtype).max) + 1)
                arr = rng.integers(0, hi, size=shape).astype(dtype)
        elif dtype.kind == "b":
            arr = rng.random(shape) < 0.5
        else:
            arr = rng.standard_normal(shape).astype(dtype)
        feeds[inp.name] = arr
        described.append({"name": inp.name, "type": inp.type, "shape": shape})
    names = [o.name for o in sess.get_outputs()]
    outs = sess.run(names, feeds)
    arrays = {f"in{i}": v for i, v in enumerate(feeds.values())}
    arrays.update({f"out{i}": v for i, v in enumerate(outs)})
    np.savez(npz_out, **arrays)
    _write_json(json_out, {"inputs": described, "input_names": list(feeds),
                           "output_names": names})


def _child_compare(model: str, npz: str, ref_json: str, json_out: str) -> None:
    """(child) Does ``model`` load in ORT, and how far are its outputs from the reference?"""
    import numpy as np
    import onnxruntime as ort

    ref = json.loads(Path(ref_json).read_text())
    result: dict[str, Any] = {"loads_in_ort": False, "max_abs_diff": None, "error": None}
    try:
        ort.InferenceSession(model, providers=["CPUExecutionProvider"])  # default options
        result["loads_in_ort"] = True
    except Exception as exc:
        result["error"] = f"default-options load: {exc}"[:600]
    try:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        data = np.load(npz)
        feeds = {n: data[f"in{i}"] for i, n in enumerate(ref["input_names"])}
        names = [o.name for o in sess.get_outputs()]
        if sorted(names) != sorted(ref["output_names"]):
            raise RuntimeError(f"output names differ: {names} vs {ref['output_names']}")
        outs = dict(zip(names, sess.run(names, feeds)))
        worst = 0.0
        for i, n in enumerate(ref["output_names"]):
            want, got = data[f"out{i}"], np.asarray(outs[n])
            if want.shape != got.shape:
                raise RuntimeError(f"output {n}: shape {got.shape} != {want.shape}")
            a, b = want.astype(np.float64), got.astype(np.float64)
            same_nan = np.isnan(a) & np.isnan(b)
            d = np.where(same_nan, 0.0, np.abs(a - b))
            d = np.where(np.isnan(d), np.inf, d)
            worst = max(worst, float(d.max()) if d.size else 0.0)
        result["max_abs_diff"] = worst
    except Exception as exc:
        result["error"] = ((result["error"] + "; ") if result["error"] else "") + \
            f"run: {exc}"[:600]
    _write_json(json_out, result)


# --------------------------------------------------------------------------- machine, corpus


def machine_info(tmp: Path, timeout: float) -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass

    def version(pkg: str) -> str:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return "not installed"

    floor = run_child([sys.executable, "-c", "pass"], tmp / "floor", timeout)
    return {
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "mem_total_gib": round(mem_kib / (1 << 20), 1),
        "cpu": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "onnxruntime": version("onnxruntime"),
        "onnx": version("onnx"),
        "numpy": version("numpy"),
        "onnxfold": version("onnxfold"),
        "rss_floor_mib": round(floor.maxrss_mib, 1),
    }


def resolve_models(corpus: Path, names: list[str]) -> tuple[dict[str, Path], list[str]]:
    found: dict[str, Path] = {}
    missing: list[str] = []
    for name in names:
        path = Path(name) if name.endswith(".onnx") else corpus / f"{name}.onnx"
        if path.exists():
            found[path.stem] = path
        else:
            missing.append(path.stem)
    return found, missing


def warm_cache(path: Path) -> None:
    """Read a file once (in small chunks) so both tools start from a warm page cache."""
    with open(path, "rb") as f:
        while f.read(4 * MiB):
            pass


# --------------------------------------------------------------------------- benchmark


def tool_cmd(tool: str, src: Path, dst: Path, report: Path, input_bytes: int) -> list[str]:
    if tool == "onnxfold":
        return [sys.executable, "-m", "onnxfold", "optimize", str(src), "-o", str(dst),
                "--json", str(report), "-q"]
    ext = dst.name + ".data" if input_bytes > ORT_EXTERNAL_ABOVE else ""
    return [sys.executable, "-c", ORT_OFFLINE_CODE, str(src), str(dst), ext]


def bench_model(name: str, src: Path, tools_dir: Path, tmp_root: Path, repeat: int,
                timeout: float) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"{name}_", dir=tmp_root))
    try:
        print(f"[{name}] input stats", file=sys.stderr, flush=True)
        warm_cache(src)
        in_stats = run_helper("_child_stats", [str(tools_dir), str(src)], tmp / "in_stats",
                              timeout)
        input_bytes = int(in_stats.get("file_bytes") or src.stat().st_size)
        print(f"[{name}] reference outputs", file=sys.stderr, flush=True)
        npz = tmp / "reference.npz"
        ref = run_helper("_child_reference", [str(src), str(npz)], tmp / "reference", timeout)

        runs: dict[str, list[ChildRun]] = {t: [] for t in TOOLS}
        outputs = {t: tmp / f"{name}.{t}.onnx" for t in TOOLS}
        report_path = tmp / "onnxfold_report.json"
        fold_report: dict[str, Any] = {}
        for r in range(repeat):
            for tool in TOOLS:
                for p in tmp.glob(f"{name}.{tool}.onnx*"):
                    p.unlink()
                report_path.unlink(missing_ok=True)
                print(f"[{name}] {tool} run {r + 1}/{repeat}", file=sys.stderr, flush=True)
                cmd = tool_cmd(tool, src, outputs[tool], report_path, input_bytes)
                run = run_child(cmd, tmp / f"{tool}_{r}", timeout)
                runs[tool].append(run)
                if tool == "onnxfold" and run.rc == 0 and report_path.exists():
                    fold_report = json.loads(report_path.read_text())

        tools: dict[str, Any] = {}
        for tool in TOOLS:
            rs = runs[tool]
            bad = next((x for x in rs if x.rc != 0 or x.timed_out), None)
            ok = bad is None and outputs[tool].exists()
            rss = max(x.maxrss_mib for x in rs)
            entry: dict[str, Any] = {
                "ok": ok,
                "wall_s": statistics.median(x.wall_s for x in rs),
                "peak_rss_mib": rss,
                "rss_over_input": rss * MiB / input_bytes if input_bytes else None,
                "runs": [asdict(x) for x in rs],
            }
            if tool == "onnxfold":
                rep = fold_report if ok else {}
                entry["pool_peak_bytes"] = rep.get("pool_peak_bytes")
                entry["report"] = {k: v for k, v in rep.items() if k != "declined_nodes"}
            if not ok:
                entry["error"] = (("timed out" if bad.timed_out else f"exit {bad.rc}")
                                  + f": {bad.stderr_tail}") if bad else "no output written"
                print(f"[{name}] {tool} FAILED: {entry['error']}", file=sys.stderr, flush=True)
            else:
                print(f"[{name}] {tool} output stats + accuracy", file=sys.stderr, flush=True)
                st = run_helper("_child_stats", [str(tools_dir), str(outputs[tool])],
                                tmp / f"{tool}_stats", timeout)
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
                else:
                    cmp_ = run_helper("_child_compare", [str(outputs[tool]), str(npz),
                                                         str(tmp / "reference.json")],
                                      tmp / f"{tool}_compare", timeout)
                    entry["loads_in_ort"] = cmp_.get("loads_in_ort")
                    entry["max_abs_diff"] = cmp_.get("max_abs_diff")
                    if cmp_.get("error"):
                        entry["accuracy_error"] = cmp_["error"]
            tools[tool] = entry

        f, o = tools["onnxfold"], tools["ort"]
        return {
            "input": {"path": str(src), **in_stats},
            "reference": ref,
            "tools": tools,
            "ratio_onnxfold_over_ort": {
                "wall": f["wall_s"] / o["wall_s"] if o["wall_s"] else None,
                "rss": f["peak_rss_mib"] / o["peak_rss_mib"] if o["peak_rss_mib"] else None,
            },
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- output


def _fmt(v: Any, spec: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    return format(v, spec)


def render_markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        "# onnxfold vs onnxruntime offline optimizer (ORT_ENABLE_BASIC)",
        "",
        f"- date: {result['date']}; repeat: {result['repeat']} (median wall, max RSS)",
        f"- machine: {m['cpu']}, nproc {m['nproc']}, {m['mem_total_gib']} GiB RAM, "
        f"{m['platform']}",
        f"- python {m['python']}, onnxruntime {m['onnxruntime']}, onnx {m['onnx']}, "
        f"numpy {m['numpy']}, onnxfold {m['onnxfold']}",
        f"- RSS floor (trivial `python -c pass` child): {m['rss_floor_mib']} MiB",
        "- wall and RSS are whole child processes (interpreter start-up and imports included);"
        " max abs diff vs the original, both run with ORT_DISABLE_ALL",
        "",
        "| model | tool | wall s | peak RSS MiB | RSS / input | cf_shape left | output MiB "
        "| loads in ORT | max abs diff | pool peak MiB |",
        "|---|---|--:|--:|--:|--:|--:|:-:|--:|--:|",
    ]
    notes: list[str] = []
    for name, res in result["models"].items():
        inp = res["input"]
        in_mib = inp["file_bytes"] / MiB if inp.get("file_bytes") else None
        lines.append(f"| {name} | (input) | | | | {_fmt(inp.get('cf_shape'))} | "
                     f"{_fmt(in_mib, '.1f')} | | | |")
        for tool in TOOLS:
            t = res["tools"][tool]
            out_mib = t["output_bytes"] / MiB if t.get("output_bytes") else None
            pool = t.get("pool_peak_bytes")
            pool_s = _fmt(pool / MiB, ".1f") if pool is not None else "-"
            diff = t.get("max_abs_diff")
            diff_s = _fmt(diff, ".3g") if diff is not None else "-"
            if not t["ok"]:
                diff_s = "**FAILED**"
            lines.append(
                f"| {name} | {tool} | {t['wall_s']:.2f} | {t['peak_rss_mib']:.0f} | "
                f"{_fmt(t['rss_over_input'], '.2f')} | {_fmt(t.get('cf_shape'))} | "
                f"{_fmt(out_mib, '.1f')} | {_fmt(t.get('loads_in_ort'))} | {diff_s} | "
                f"{pool_s if tool == 'onnxfold' else ''} |")
            for key in ("error", "stats_error", "accuracy_error"):
                if t.get(key):
                    one_line = " ".join(str(t[key]).split())
                    notes.append(f"- {name} / {tool} {key}: {one_line[:400]}")
        r = res["ratio_onnxfold_over_ort"]
        lines.append(f"| {name} | onnxfold/ORT | {_fmt(r['wall'], '.2f')}x | "
                     f"{_fmt(r['rss'], '.2f')}x | | | | | | |")
    if result["missing"]:
        notes.append(f"- missing models (not run): {', '.join(result['missing'])}")
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True, help="directory with <model>.onnx")
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS,
                    help="corpus model names (or .onnx paths); default: %(default)s")
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool (median wall, max RSS)")
    ap.add_argument("--out", type=Path, default=BENCH_DIR / "results",
                    help="where results.md / results.json go")
    ap.add_argument("--corpus-tools", type=Path, default=REPO.parent / "shared" / "corpus",
                    help="directory with onnxstats.py and build.py; default: %(default)s")
    ap.add_argument("--build", action="store_true",
                    help="build missing corpus models with <corpus-tools>/build.py --only ...")
    ap.add_argument("--tmpdir", type=Path, default=None, help="where optimized models go")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per child process")
    a = ap.parse_args(argv)
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")
    if not (a.corpus_tools / "onnxstats.py").exists():
        ap.error(f"{a.corpus_tools}/onnxstats.py not found (see --corpus-tools)")

    found, missing = resolve_models(a.corpus, a.models)
    if missing and a.build:
        build = [sys.executable, str(a.corpus_tools / "build.py"), str(a.corpus),
                 "--only", *missing]
        print("+", " ".join(build), file=sys.stderr, flush=True)
        subprocess.run(build, check=False)
        found, missing = resolve_models(a.corpus, a.models)
    if missing:
        print(f"missing in {a.corpus}: {', '.join(missing)}\n  build them with: python "
              f"{a.corpus_tools / 'build.py'} {a.corpus} --only {' '.join(missing)}\n"
              "  (or rerun this script with --build)", file=sys.stderr)
        if not found:
            return 2

    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench_fold_", dir=a.tmpdir) as tmp_s:
        tmp = Path(tmp_s)
        result: dict[str, Any] = {
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "repeat": a.repeat,
            "seed": SEED,
            "machine": machine_info(tmp, a.timeout),
            "missing": missing,
            "models": {},
        }
        for name, path in found.items():
            result["models"][name] = bench_model(name, path, a.corpus_tools, tmp, a.repeat,
                                                 a.timeout)
        floor_end = run_child([sys.executable, "-c", "pass"], tmp / "floor_end", a.timeout)
        result["machine"]["rss_floor_mib"] = round(
            max(result["machine"]["rss_floor_mib"], floor_end.maxrss_mib), 1)

    md = render_markdown(result)
    (a.out / "results.md").write_text(md)
    (a.out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    print(md)
    print(f"wrote {a.out / 'results.md'} and {a.out / 'results.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
