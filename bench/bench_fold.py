"""Public cross-tool benchmark: onnxfold against the other ONNX constant folders.

For every model, every tool runs as its own child process, one process at a time:

===============  ==========================================================================
``onnxfold``     ``python -m onnxfold optimize IN -o OUT --json REPORT -q`` (this interpreter)
``ort``          ``onnxruntime.InferenceSession`` with ``ORT_ENABLE_BASIC`` (ONNX-level rewrites
                 incl. constant folding) and ``optimized_model_filepath``: the offline optimizer
``onnxsim``      ``onnxsim.simplify(IN, output_path=OUT)`` (onnxsim saves the model itself)
``onnxslim``     ``onnxslim.slim(IN, OUT)``
``polygraphy``   ``polygraphy surgeon sanitize --fold-constants IN -o OUT``
``graphsurgeon`` ``gs.import_onnx(onnx.load(IN)).fold_constants().cleanup()``, then
                 ``gs.export_onnx`` and ``onnx.save``
``onnxscript``   ``onnxscript.optimizer.optimize(onnx_ir.load(IN))``, then ``onnx_ir.save``
===============  ==========================================================================

The peers (every tool but onnxfold) run with ``--peers-python`` (default: this interpreter),
normally a separate venv so that their pins do not touch onnxfold's; a peer whose modules do not
import there is reported as ``not installed``. Large models: when the input is over 1.5 GiB (or,
for graphsurgeon and onnxscript, whose folded model we hold before saving, when its tensors are),
each peer is asked to save external data (``OUT.data``) where its API allows; onnxsim and onnxslim
also switch to it by themselves above 2 GB, onnxfold does (``--external-data auto``). A peer that
cannot save a large model shows up as crashed.

Measured per tool (``--repeat N`` runs, interleaved between the tools; before each run the
previous outputs are deleted and ``sync`` flushes them, so no tool pays for another's writeback):

* status: ``ok``, ``crashed: <first error line>`` (the exception of the first traceback, the
  first ``[E]`` line, the killing signal, ...), ``timeout (N s)`` (``--tool-timeout``, default
  900 s; the process group is killed) or ``not installed``;
* wall time of the child (median over the runs), including interpreter start-up and imports,
  and its user and system CPU time (``os.wait4``, medians): on a VM whose free memory is handed
  back to the host, touching fresh memory (anonymous or page cache) costs system time that varies
  from run to run, which is where most of the wall-time noise comes from;
* peak RSS of the child alone (max over the runs): ``ru_maxrss`` from ``os.wait4`` on its pid.
  Linux carries the parent's RSS high-water mark into a child at ``exec``, so the parent stays
  small (no numpy/onnx imports, all analysis in further children); the RSS of a trivial child,
  the floor below which no number can go, is shown in the header. Memory-mapped weights that a
  tool touches count towards RSS;
* ``RSS / input``: peak RSS over the input's size on disk (.onnx plus external data).

Measured per output (of the last run; only for status ``ok``), each check in its own child:

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

The ratio table gives onnxfold / peer for wall time and peak RSS per model (where both are ok).
Results go to ``<out>/results.md`` (also printed), ``<out>/results.json`` and ``<out>/results.svg``
(grouped bars of wall time and peak RSS per model and tool, log scale, hand-written SVG).
Optimized models live in a temporary directory that is deleted per model once it is measured.

Usage (see bench/README.md)::

    python bench/bench_fold.py --corpus ../corpus --peers-python ../peers-venv/bin/python
        [--models bert_base_ts ... | path/to/model.onnx] [--tools onnxfold ort ...] [--repeat N]
        [--tool-timeout 900 [onnxsim=1800 ...]] [--out bench/results] [--build]
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_MODELS = ["bert_base_ts", "gpt2_small_ts", "vit_base_ts", "syn_chain_big",
                  "syn_expand_postpone", "syn_fp16_cast", "distilbert_qdq"]
TOOLS = ("onnxfold", "ort", "onnxsim", "onnxslim", "polygraphy", "graphsurgeon", "onnxscript")
PEERS = TOOLS[1:]
MiB = 1 << 20
SEED = 0
DEFAULT_TOOL_TIMEOUT = 900.0
# protobuf cannot hold more than 2 GB: above this the peers are asked for external data.
EXTERNAL_ABOVE = 1536 * MiB

# Modules each peer needs in --peers-python (module -> distribution, for the version).
PEER_MODULES: dict[str, dict[str, str]] = {
    "ort": {"onnxruntime": "onnxruntime"},
    "onnxsim": {"onnxsim": "onnxsim", "onnx": "onnx"},
    "onnxslim": {"onnxslim": "onnxslim", "onnx": "onnx"},
    "polygraphy": {"polygraphy": "polygraphy", "onnx_graphsurgeon": "onnx-graphsurgeon",
                   "onnxruntime": "onnxruntime"},
    "graphsurgeon": {"onnx_graphsurgeon": "onnx-graphsurgeon", "onnx": "onnx",
                     "onnxruntime": "onnxruntime"},
    "onnxscript": {"onnxscript": "onnxscript", "onnx_ir": "onnx-ir"},
}

# Peer children: argv = [IN, OUT, big ("1" / "0"), EXTERNAL_ABOVE in bytes].
PEER_CODE: dict[str, str] = {
    "ort": """\
import os, sys
import onnxruntime as ort
src, dst, big = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
so.optimized_model_filepath = dst
if big:
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name",
        os.path.basename(dst) + ".data")
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "1024")
ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
""",
    "onnxsim": """\
import sys
import onnxsim
src, dst, big = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
# onnxsim saves to output_path itself; its fast path's C++ core externalizes above 2 GB,
# the fallback path above external_data_threshold
_, ok = onnxsim.simplify(src, output_path=dst,
                         external_data_threshold="1MB" if big else "2GB")
if not ok:
    sys.exit("onnxsim: the simplified model failed its check")
""",
    "onnxslim": """\
import sys
import onnxslim
src, dst, big = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
onnxslim.slim(src, dst, save_as_external_data=big)  # external data by itself above 2 GB
""",
    "polygraphy": """\
import os, sys
from polygraphy.tools import main
src, dst, big = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
sys.argv = ["polygraphy", "surgeon", "sanitize", "--fold-constants", src, "-o", dst]
if big:
    sys.argv += ["--save-external-data", os.path.basename(dst) + ".data"]
sys.exit(main())
""",
    "graphsurgeon": """\
import os, sys
import onnx
import onnx_graphsurgeon as gs
src, dst, big, limit = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
graph = gs.import_onnx(onnx.load(src))
graph.fold_constants().cleanup()
model = gs.export_onnx(graph)
del graph
size = sum(t.ByteSize() for t in model.graph.initializer)
size += sum(a.t.ByteSize() for n in model.graph.node for a in n.attribute if a.name == "value")
if big or size > limit:
    onnx.save(model, dst, save_as_external_data=True, all_tensors_to_one_file=True,
              location=os.path.basename(dst) + ".data", size_threshold=1024)
else:
    onnx.save(model, dst)
""",
    "onnxscript": """\
import os, sys
import onnx_ir as ir
import onnxscript.optimizer
src, dst, big, limit = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
model = onnxscript.optimizer.optimize(ir.load(src))
tensors = [v.const_value for v in model.graph.initializers.values()
           if v.const_value is not None]
external = big or sum(t.nbytes for t in tensors) > limit or any(
    isinstance(t, ir.ExternalTensor) for t in tensors)  # must not point at the input's file
ir.save(model, dst, external_data=os.path.basename(dst) + ".data" if external else None)
""",
}

PROBE_CODE = """\
import importlib, json, sys
from importlib import metadata
out = {}
for mod, dist in json.loads(sys.argv[1]).items():
    try:
        importlib.import_module(mod)
        out[mod] = {"ok": True, "version": metadata.version(dist)}
    except Exception as exc:
        out[mod] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
print(json.dumps(out))
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
    user_s: float
    sys_s: float
    maxrss_mib: float
    timed_out: bool
    stderr_tail: str
    error_line: str


_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Fault)\b")


def first_error_line(text: str, rc: int) -> str:
    """The first line of ``text`` (a child's stderr) that says what went wrong."""
    lines = text.splitlines()
    picked = ""
    for i, line in enumerate(lines):
        s = line.strip()
        if not s:
            continue
        if s.startswith("Traceback (most recent call last)"):
            # the exception line is the first unindented line after the frames
            exc = next((x.strip() for x in lines[i + 1:] if x.strip() and not x[:1].isspace()),
                       "")
            if exc:
                picked = exc
                break
        elif s.startswith("[E]") or _EXC_LINE.match(s) or s.startswith("terminate called"):
            picked = s
            break
    if not picked:
        picked = next((x.strip() for x in reversed(lines) if x.strip()), "")
    if rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        picked = f"killed by {sig}" + (" (out of memory?)" if sig == "SIGKILL" else "") + \
            (f"; {picked}" if picked else "")
    elif not picked:
        picked = f"exit {rc}"
    return " ".join(picked.split())[:300]


def run_child(cmd: list[str], log_stem: Path, timeout: float,
              cwd: Path | None = None) -> ChildRun:
    """Run ``cmd``; time it and read its peak RSS with ``os.wait4`` (stdout/err go to files).

    The child gets its own process group, which is killed with SIGKILL after ``timeout`` s.
    """
    out_path = log_stem.with_suffix(".out")
    err_path = log_stem.with_suffix(".err")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                cwd=cwd, start_new_session=True)
        done = threading.Event()
        timed_out = threading.Event()

        def kill() -> None:
            if not done.is_set():
                timed_out.set()
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            done.set()
            timer.cancel()
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4, tell Popen
    try:  # stragglers of the group (none expected)
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    text = err_path.read_text(errors="replace")
    tail = text.strip().splitlines()[-8:]
    err_line = first_error_line(text, proc.returncode) if proc.returncode != 0 else ""
    return ChildRun(rc=proc.returncode, wall_s=wall, user_s=usage.ru_utime,
                    sys_s=usage.ru_stime, maxrss_mib=usage.ru_maxrss / 1024,
                    timed_out=timed_out.is_set(), stderr_tail="\n".join(tail),
                    error_line=err_line)


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


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def probe_peers(peers_python: str, timeout: float) -> dict[str, Any]:
    """Import every peer module in ``peers_python``; versions, or why a module is missing."""
    mods: dict[str, str] = {"onnx": "onnx", "onnxruntime": "onnxruntime", "numpy": "numpy"}
    for need in PEER_MODULES.values():
        mods.update(need)
    try:
        proc = subprocess.run([peers_python, "-c", PROBE_CODE, json.dumps(mods)],
                              capture_output=True, text=True, timeout=timeout, check=False)
        return json.loads(proc.stdout)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError) as exc:
        why = f"{peers_python} unusable: {exc}"
        return {m: {"ok": False, "error": why} for m in mods}


def machine_info(tmp: Path, timeout: float, peers_python: str,
                 probe: dict[str, Any]) -> dict[str, Any]:
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

    floor = run_child([sys.executable, "-c", "pass"], tmp / "floor", timeout)
    peers_floor = run_child([peers_python, "-c", "pass"], tmp / "floor_peers", timeout)
    return {
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "mem_total_gib": round(mem_kib / (1 << 20), 1),
        "cpu": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "onnxruntime": _version("onnxruntime"),
        "onnx": _version("onnx"),
        "numpy": _version("numpy"),
        "onnxfold": _version("onnxfold"),
        "rss_floor_mib": round(floor.maxrss_mib, 1),
        "peers_python": peers_python,
        "peers_rss_floor_mib": round(peers_floor.maxrss_mib, 1),
        "peers_versions": {m: (v["version"] if v.get("ok") else "not installed")
                           for m, v in probe.items()},
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
    """Read a model and its external data files once (in small chunks): a warm page cache."""
    for p in sorted(path.parent.glob(glob_escape(path.name) + "*")):
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(4 * MiB):
                    pass


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


# --------------------------------------------------------------------------- benchmark


def tool_cmd(tool: str, src: Path, dst: Path, report: Path, input_bytes: int,
             peers_python: str) -> list[str]:
    if tool == "onnxfold":
        return [sys.executable, "-m", "onnxfold", "optimize", str(src), "-o", str(dst),
                "--json", str(report), "-q"]
    big = "1" if input_bytes > EXTERNAL_ABOVE else "0"
    return [peers_python, "-c", PEER_CODE[tool], str(src), str(dst), big, str(EXTERNAL_ABOVE)]


def run_status(runs: list[ChildRun], output: Path, timeout: float) -> tuple[str, str | None]:
    """(status, error) of a tool from its runs: ok / crashed: ... / timeout (N s)."""
    for x in runs:
        if x.timed_out:
            return f"timeout ({timeout:g} s)", f"timed out after {timeout:g} s"
        if x.rc != 0:
            return f"crashed: {x.error_line}", f"exit {x.rc}: {x.stderr_tail}"
    if not output.exists():
        return "crashed: exit 0 but no output written", "no output written"
    return "ok", None


def bench_model(name: str, src: Path, tools_dir: Path, tmp_root: Path, repeat: int,
                timeout: float, tools: list[str], tool_timeouts: dict[str, float],
                peers_python: str, installed: dict[str, str | None]) -> dict[str, Any]:
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

        runnable = [t for t in tools if installed.get(t) is None]
        runs: dict[str, list[ChildRun]] = {t: [] for t in runnable}
        outputs = {t: tmp / f"{name}.{t}.onnx" for t in tools}
        report_path = tmp / "onnxfold_report.json"
        fold_report: dict[str, Any] = {}
        for r in range(repeat):
            for tool in runnable:
                for p in tmp.glob(f"{glob_escape(name)}.{tool}.onnx*"):
                    p.unlink()
                report_path.unlink(missing_ok=True)
                print(f"[{name}] {tool} run {r + 1}/{repeat}", file=sys.stderr, flush=True)
                cmd = tool_cmd(tool, src, outputs[tool], report_path, input_bytes, peers_python)
                os.sync()  # the previous tool's output must not be written back during this run
                run = run_child(cmd, tmp / f"{tool}_{r}", tool_timeouts[tool], cwd=tmp)
                runs[tool].append(run)
                if tool == "onnxfold" and run.rc == 0 and report_path.exists():
                    fold_report = json.loads(report_path.read_text())

        entries: dict[str, Any] = {}
        for tool in tools:
            if tool not in runs:
                entries[tool] = {"status": "not installed", "ok": False, "wall_s": None,
                                 "peak_rss_mib": None, "rss_over_input": None,
                                 "error": installed.get(tool)}
                continue
            rs = runs[tool]
            status, error = run_status(rs, outputs[tool], tool_timeouts[tool])
            ok = status == "ok"
            rss = max(x.maxrss_mib for x in rs)
            entry: dict[str, Any] = {
                "status": status,
                "ok": ok,
                "wall_s": statistics.median(x.wall_s for x in rs),
                "user_s": statistics.median(x.user_s for x in rs),
                "sys_s": statistics.median(x.sys_s for x in rs),
                "peak_rss_mib": rss,
                "rss_over_input": rss * MiB / input_bytes if input_bytes else None,
                "runs": [asdict(x) for x in rs],
            }
            if tool == "onnxfold":
                rep = fold_report if ok else {}
                entry["pool_peak_bytes"] = rep.get("pool_peak_bytes")
                entry["report"] = {k: v for k, v in rep.items() if k != "declined_nodes"}
            if not ok:
                entry["error"] = error
                print(f"[{name}] {tool} FAILED: {status}", file=sys.stderr, flush=True)
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
            for p in tmp.glob(f"{glob_escape(name)}.{tool}.onnx*"):
                p.unlink()  # free the disk before the next tool's output is measured
            entries[tool] = entry

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
        return {
            "input": {"path": str(src), **in_stats},
            "reference": ref,
            "tools": entries,
            "ratio_onnxfold_over": ratios,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- markdown


def _mib(nbytes: Any) -> str:
    if nbytes is None:
        return "-"
    v = nbytes / MiB
    return f"{v:.1f}" if v >= 10 else f"{v:.3g}"


def _fmt(v: Any, spec: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    return format(v, spec)


def _cell(text: str, limit: int = 110) -> str:
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return text.replace("|", "\\|")


def render_markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    tools = result["tools"]
    pv = m["peers_versions"]
    peer_versions = ", ".join(f"{k} {pv.get(k, '?')}" for k in (
        "onnxruntime", "onnx", "numpy", "onnxsim", "onnxslim", "polygraphy", "onnx_graphsurgeon",
        "onnxscript", "onnx_ir"))
    timeouts = ", ".join(f"{t} {s:g}" for t, s in result["tool_timeouts"].items())
    lines = [
        "# onnxfold vs other ONNX constant folders",
        "",
        f"- date: {result['date']}; repeat: {result['repeat']} (median wall, max RSS)",
        f"- machine: {m['cpu']}, nproc {m['nproc']}, {m['mem_total_gib']} GiB RAM, "
        f"{m['platform']}",
        f"- onnxfold: python {m['python']}, onnxfold {m['onnxfold']}, onnxruntime "
        f"{m['onnxruntime']}, onnx {m['onnx']}, numpy {m['numpy']}",
        f"- peers (`{m['peers_python']}`): {peer_versions}",
        f"- RSS floor (trivial `python -c pass` child): {m['rss_floor_mib']} MiB "
        f"(peers' interpreter: {m['peers_rss_floor_mib']} MiB)",
        f"- tool timeouts (s): {timeouts}",
        "- wall, CPU (user, sys) and RSS are whole child processes (interpreter start-up and "
        "imports included);"
        " max abs diff vs the original, both run with ORT_DISABLE_ALL; chart: results.svg",
        "",
        "| model | tool | status | wall s | user s | sys s | peak RSS MiB | RSS / input "
        "| cf_shape left | output MiB | loads in ORT | max abs diff |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|:-:|--:|",
    ]
    notes: list[str] = []
    pools: list[str] = []
    for name, res in result["models"].items():
        inp = res["input"]
        lines.append(f"| {name} | (input) | | | | | | | {_fmt(inp.get('cf_shape'))} | "
                     f"{_mib(inp.get('file_bytes'))} | | |")
        for tool in tools:
            t = res["tools"][tool]
            diff = t.get("max_abs_diff")
            lines.append(
                f"| {name} | {tool} | {_cell(t['status'])} | {_fmt(t['wall_s'], '.2f')} | "
                f"{_fmt(t.get('user_s'), '.2f')} | {_fmt(t.get('sys_s'), '.2f')} | "
                f"{_fmt(t['peak_rss_mib'], '.0f')} | {_fmt(t['rss_over_input'], '.2f')} | "
                f"{_fmt(t.get('cf_shape'))} | {_mib(t.get('output_bytes'))} | "
                f"{_fmt(t.get('loads_in_ort'))} | {_fmt(diff, '.3g')} |")
            for key in ("stats_error", "accuracy_error"):
                if t.get(key):
                    notes.append(f"- {name} / {tool} {key}: {_cell(t[key], 400)}")
            if t["status"].startswith("crashed") and len(t["status"]) > 110:
                notes.append(f"- {name} / {tool}: {_cell(t['status'], 400)}")
            if tool == "onnxfold" and t.get("pool_peak_bytes") is not None:
                pools.append(f"{name} {t['pool_peak_bytes'] / MiB:.1f}")
    peers = [t for t in tools if t != "onnxfold"]
    if "onnxfold" in tools and peers:
        lines += ["", "onnxfold / peer (wall x / peak RSS x; `-` where either did not finish ok):",
                  "", "| model | " + " | ".join(peers) + " |",
                  "|---|" + "--:|" * len(peers)]
        for name, res in result["models"].items():
            cells = []
            for tool in peers:
                r = res["ratio_onnxfold_over"].get(tool)
                cells.append(f"{_fmt(r['wall'], '.2f')}x / {_fmt(r['rss'], '.2f')}x" if r
                             else "-")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if pools:
        notes.append("- onnxfold buffer-pool peak (MiB): " + ", ".join(pools))
    not_inst = {t: e for t, e in result["not_installed"].items() if t in tools}
    for tool, why in not_inst.items():
        notes.append(f"- {tool} not installed in the peers' python: {_cell(why, 300)}")
    if result["missing"]:
        notes.append(f"- missing models (not run): {', '.join(result['missing'])}")
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- SVG chart

COLORS = {"onnxfold": "#d62728", "ort": "#1f77b4", "onnxsim": "#ff7f0e", "onnxslim": "#2ca02c",
          "polygraphy": "#9467bd", "graphsurgeon": "#8c564b", "onnxscript": "#17becf"}


def _nice(v: float) -> str:
    return f"{v:g}" if v >= 1 else f"{v:.2g}"


def _svg_panel(out: list[str], result: dict[str, Any], key: str, title: str, top: float,
               left: float, group_w: float, bar_w: float, plot_h: float) -> None:
    models = list(result["models"])
    tools = result["tools"]
    vals = [t[key] for res in result["models"].values() for t in res["tools"].values()
            if t.get(key)]
    if not vals:
        return
    e_lo = math.floor(math.log10(min(vals)))
    e_hi = math.ceil(math.log10(max(vals)))
    e_hi = max(e_hi, e_lo + 1)
    y_base = top + plot_h
    width = group_w * len(models)

    def y(v: float) -> float:
        return y_base - (math.log10(v) - e_lo) / (e_hi - e_lo) * plot_h

    out.append(f'<text x="{left}" y="{top - 10}" class="title">{html.escape(title)}</text>')
    for e in range(e_lo, e_hi + 1):
        for mult in (1, 2, 5):
            v = mult * 10.0 ** e
            if v > 10.0 ** e_hi:
                break
            cls = "grid" if mult == 1 else "grid minor"
            out.append(f'<line x1="{left}" x2="{left + width}" y1="{y(v):.1f}" '
                       f'y2="{y(v):.1f}" class="{cls}"/>')
            out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" class="tick">{_nice(v)}</text>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{y_base}" class="axis"/>')
    out.append(f'<line x1="{left}" x2="{left + width}" y1="{y_base}" y2="{y_base}" '
               'class="axis"/>')
    for gi, name in enumerate(models):
        gx = left + gi * group_w
        x0 = gx + (group_w - bar_w * len(tools)) / 2
        for ti, tool in enumerate(tools):
            t = result["models"][name]["tools"][tool]
            x = x0 + ti * bar_w
            cx = x + bar_w / 2
            v = t.get(key)
            status = t["status"]
            if v is None or status == "not installed":
                out.append(f'<text x="{cx:.1f}" y="{y_base - 4}" class="mark" '
                           f'transform="rotate(-90 {cx:.1f} {y_base - 4})" '
                           'text-anchor="start">n/i</text>')
                continue
            ok = status == "ok"
            unit = "s" if key == "wall_s" else "MiB"
            tip = html.escape(f"{name} / {tool}: {v:.3g} {unit} ({status})")
            style = "" if ok else ' fill-opacity="0.35" stroke-dasharray="3,2"'
            out.append(f'<rect x="{x + 1:.1f}" y="{y(v):.1f}" width="{bar_w - 2:.1f}" '
                       f'height="{y_base - y(v):.1f}" fill="{COLORS.get(tool, "#777")}" '
                       f'stroke="{COLORS.get(tool, "#777")}"{style}><title>{tip}</title></rect>')
            if not ok:
                mark = "T" if status.startswith("timeout") else "\u2717"
                out.append(f'<text x="{cx:.1f}" y="{y(v) - 3:.1f}" class="mark">{mark}</text>')
        out.append(f'<text x="{gx + group_w / 2:.1f}" y="{y_base + 16}" class="label">'
                   f'{html.escape(name)}</text>')


def render_svg(result: dict[str, Any]) -> str:
    """Grouped bars (log scale) of wall time and peak RSS per model and tool."""
    tools = result["tools"]
    models = list(result["models"])
    bar_w = 15.0 if len(tools) > 4 else 22.0
    group_w = max(bar_w * len(tools) + 24, 9 * max((len(n) for n in models), default=8))
    left, plot_h = 70.0, 240.0
    legend_w = sum(16 + 7.5 * len(t) + 18 for t in tools)
    width = max(left + group_w * len(models) + 20, left + legend_w + 20, 860.0)
    legend_h = 46.0
    top1 = legend_h + 40
    top2 = top1 + plot_h + 70
    height = top2 + plot_h + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif">',
        "<style>.title{font-size:14px;font-weight:bold}.tick{font-size:11px;text-anchor:end;"
        "fill:#333}.label{font-size:12px;text-anchor:middle}.mark{font-size:10px;"
        "text-anchor:middle;fill:#222}.legend{font-size:12px}.grid{stroke:#ccc;"
        "stroke-width:1}.minor{stroke:#eee}.axis{stroke:#000;stroke-width:1}</style>",
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>',
        f'<text x="{left}" y="18" class="title">onnxfold vs other constant folders '
        f'({html.escape(result["date"])}, repeat {result["repeat"]})</text>',
    ]
    lx = left
    for tool in tools:
        out.append(f'<rect x="{lx}" y="28" width="12" height="12" '
                   f'fill="{COLORS.get(tool, "#777")}"/>')
        out.append(f'<text x="{lx + 16}" y="39" class="legend">{html.escape(tool)}</text>')
        lx += 16 + 7.5 * len(tool) + 18
    out.append(f'<text x="{left}" y="{legend_h + 12}" class="legend" fill="#555">faded bar: '
               'did not finish (\u2717 crashed, T timeout: bar = time/RSS until it stopped); '
               'n/i: not installed. Log scale; lower is better.</text>')
    _svg_panel(out, result, "wall_s", "Wall time (s, whole process, log scale)", top1, left,
               group_w, bar_w, plot_h)
    _svg_panel(out, result, "peak_rss_mib", "Peak RSS (MiB, log scale)", top2, left, group_w,
               bar_w, plot_h)
    out.append("</svg>")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- main


def parse_timeouts(items: list[str], tools: list[str]) -> dict[str, float]:
    """``["900", "onnxsim=1800"]`` -> seconds per tool."""
    default = DEFAULT_TOOL_TIMEOUT
    per: dict[str, float] = {}
    for item in items:
        if "=" in item:
            tool, secs = item.split("=", 1)
            if tool not in TOOLS:
                raise ValueError(f"unknown tool {tool!r} in --tool-timeout")
            per[tool] = float(secs)
        else:
            default = float(item)
    return {t: per.get(t, default) for t in tools}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True, help="directory with <model>.onnx")
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS,
                    help="corpus model names (or .onnx paths); default: %(default)s")
    ap.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS, metavar="TOOL",
                    help="tools to run, in this order; default: %(default)s")
    ap.add_argument("--peers-python", default=sys.executable,
                    help="interpreter for every tool but onnxfold (e.g. "
                         "../peers-venv/bin/python); default: this one")
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool (median wall, max RSS)")
    ap.add_argument("--out", type=Path, default=BENCH_DIR / "results",
                    help="where results.md / results.json / results.svg go")
    ap.add_argument("--corpus-tools", type=Path, default=REPO.parent / "shared" / "corpus",
                    help="directory with onnxstats.py and build.py; default: %(default)s")
    ap.add_argument("--build", action="store_true",
                    help="build missing corpus models with <corpus-tools>/build.py --only ...")
    ap.add_argument("--tmpdir", type=Path, default=None, help="where optimized models go")
    ap.add_argument("--tool-timeout", nargs="+", default=[], metavar="[TOOL=]SECONDS",
                    help=f"seconds per tool run: a default (else {DEFAULT_TOOL_TIMEOUT:.0f}) "
                         "and/or TOOL=SECONDS overrides")
    ap.add_argument("--timeout", type=float, default=3600.0,
                    help="seconds per analysis child (stats, reference, accuracy)")
    a = ap.parse_args(argv)
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")
    if not (a.corpus_tools / "onnxstats.py").exists():
        ap.error(f"{a.corpus_tools}/onnxstats.py not found (see --corpus-tools)")
    tools = list(dict.fromkeys(a.tools))
    try:
        tool_timeouts = parse_timeouts(a.tool_timeout, tools)
    except ValueError as exc:
        ap.error(str(exc))

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

    probe = probe_peers(a.peers_python, a.timeout)
    installed: dict[str, str | None] = {"onnxfold": None}  # None: runnable, else why not
    for tool in PEERS:
        bad = [f"{mod}: {probe.get(mod, {}).get('error', 'not probed')}"
               for mod in PEER_MODULES[tool] if not probe.get(mod, {}).get("ok")]
        installed[tool] = "; ".join(bad) if bad else None
        if bad and tool in tools:
            print(f"{tool}: not installed in {a.peers_python} ({bad[0]})", file=sys.stderr)

    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench_fold_", dir=a.tmpdir) as tmp_s:
        tmp = Path(tmp_s)
        result: dict[str, Any] = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "repeat": a.repeat,
            "seed": SEED,
            "tools": tools,
            "tool_timeouts": tool_timeouts,
            "not_installed": {t: why for t, why in installed.items() if why},
            "machine": machine_info(tmp, a.timeout, a.peers_python, probe),
            "missing": missing,
            "models": {},
        }
        for name, path in found.items():
            result["models"][name] = bench_model(
                name, path, a.corpus_tools, tmp, a.repeat, a.timeout, tools, tool_timeouts,
                a.peers_python, installed)
            # partial results survive an interrupted run
            (a.out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
        floor_end = run_child([sys.executable, "-c", "pass"], tmp / "floor_end", a.timeout)
        result["machine"]["rss_floor_mib"] = round(
            max(result["machine"]["rss_floor_mib"], floor_end.maxrss_mib), 1)

    md = render_markdown(result)
    (a.out / "results.md").write_text(md)
    (a.out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    (a.out / "results.svg").write_text(render_svg(result))
    print(md)
    print(f"wrote {a.out / 'results.md'}, results.json and results.svg", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
