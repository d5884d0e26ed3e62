"""How each tool a benchmark measures is invoked: one child process, ``IN`` -> ``OUT``.

``onnxfold`` runs its command line (``python -m onnxfold optimize``: load, optimize, save, as a
user runs it), ``onnxfold-lib`` its library call (``onnxfold.optimize`` + ``save``); ``ir`` is
onnx-ir's bare ``ir.load`` + ``ir.save`` (what reading and writing a model costs, the floor of
a fold built on onnx-ir); the peers run a small script each
(``PEER_CODE``) with the interpreter given, so that a separate venv can hold them.
"""

from __future__ import annotations

import sys
from pathlib import Path

MiB = 1 << 20
# protobuf cannot hold more than 2 GB: above this the peers are asked for external data.
EXTERNAL_ABOVE = 1536 * MiB

# Peer children: argv = [IN, OUT, big ("1" / "0"), EXTERNAL_ABOVE in bytes, REPORT] (REPORT:
# where a child that reports writes it; the others leave it).
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
    "onnxsim-cli": """\
import runpy, sys
src, dst = sys.argv[1], sys.argv[2]
sys.argv = ["onnxsim", src, dst]  # onnxsim's command line, as `onnxsim IN OUT` runs it
runpy.run_module("onnxsim", run_name="__main__")
""",
    "onnxslim": """\
import sys
import onnxslim
src, dst, big = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
onnxslim.slim(src, dst, save_as_external_data=big)  # external data by itself above 2 GB
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
# onnx-ir alone: the model read into onnx-ir objects and written back, nothing else.
# onnxfold is imported first, as its executable does: it defers onnx-ir's sympy import, which
# would otherwise add ~0.3 s to the floor. Both leave without tearing the interpreter down
# (``os._exit``), as onnxfold's executable does.
PEER_CODE["ir"] = """\
import os, sys
import onnxfold
import onnx_ir as ir
src, dst, big = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
ir.save(ir.load(src), dst, external_data=os.path.basename(dst) + ".data" if big else None)
os._exit(0)
"""
# onnxfold's library call, as onnxsim's is run: ``onnxfold.optimize(IN)`` then ``save(OUT)``
# (onnx's checker on the input, the fold, the streamed atomic write; no summary, no signature);
# its report, phases included, to REPORT.
PEER_CODE["onnxfold-lib"] = """\
import os, sys
import onnxfold
src, dst, report = sys.argv[1], sys.argv[2], sys.argv[5]
result = onnxfold.optimize(src)
result.save(dst)
with open(report, "w") as f:
    f.write(result.report.to_json())
os._exit(0)
"""
# A plain copy of the model's files (the file and, if there, its ``.data`` beside it): what
# any tool that writes a model of this size costs at least, on this disk.
PEER_CODE["copy"] = """\
import os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
shutil.copyfile(src, dst)
if os.path.exists(src + ".data"):
    shutil.copyfile(src + ".data", dst + ".data")
os._exit(0)
"""

def tool_cmd(tool: str, src: Path, dst: Path, report: Path, input_bytes: int,
             peers_python: str = sys.executable) -> list[str]:
    """The command line of one run of ``tool``: ``src`` -> ``dst`` (onnxfold's report too)."""
    if tool == "onnxfold":
        return [sys.executable, "-m", "onnxfold", "optimize", str(src), "-o", str(dst),
                "--json", str(report), "-q"]
    big = "1" if input_bytes > EXTERNAL_ABOVE else "0"
    return [peers_python, "-c", PEER_CODE[tool], str(src), str(dst), big, str(EXTERNAL_ABOVE),
            str(report)]
