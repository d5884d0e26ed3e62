"""The tools: how each one is invoked, and which peers import in ``--peers-python``.

onnxfold runs as ``python -m onnxfold optimize`` with the benchmark's own interpreter; every other
tool (a peer) runs a small script (``PEER_CODE``) with ``--peers-python``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from foldbench import MiB

TOOLS = ("onnxfold", "ort", "onnxsim", "onnxslim", "polygraphy", "graphsurgeon", "onnxscript")
PEERS = TOOLS[1:]

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


def peer_availability(probe: dict[str, Any], tools: list[str],
                      peers_python: str) -> dict[str, str | None]:
    """Per tool: None if it can run, else why not; says so on stderr for the chosen ``tools``."""
    installed: dict[str, str | None] = {"onnxfold": None}  # None: runnable, else why not
    for tool in PEERS:
        bad = [f"{mod}: {probe.get(mod, {}).get('error', 'not probed')}"
               for mod in PEER_MODULES[tool] if not probe.get(mod, {}).get("ok")]
        installed[tool] = "; ".join(bad) if bad else None
        if bad and tool in tools:
            print(f"{tool}: not installed in {peers_python} ({bad[0]})", file=sys.stderr)
    return installed


def tool_cmd(tool: str, src: Path, dst: Path, report: Path, input_bytes: int,
             peers_python: str) -> list[str]:
    """The command line of one run of ``tool``: ``src`` -> ``dst`` (onnxfold's report too)."""
    if tool == "onnxfold":
        return [sys.executable, "-m", "onnxfold", "optimize", str(src), "-o", str(dst),
                "--json", str(report), "-q"]
    big = "1" if input_bytes > EXTERNAL_ABOVE else "0"
    return [peers_python, "-c", PEER_CODE[tool], str(src), str(dst), big, str(EXTERNAL_ABOVE)]
