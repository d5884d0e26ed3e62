"""An external-data file truncated by another process while onnxfold runs.

Each time a weight is handed out, the size check refuses it (mapped or not); the writer reads
with ``pread``, which comes back short. A read past the new end of a view already handed out
would be SIGBUS, which the CLI turns into the same kind of one-line error
(``onnxfold.io.faults``).
The truncation is made deterministic by a wrapper around ``load_with_light_proto`` (how
``optimize`` reads a file) in the child process.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.cli import REFUSAL_TIMEOUT, assert_one_error_line, run_python

CHILD = """
import os, sys, numpy as np
import onnxfold.io.reader as reader
load, (mode, data, model, out) = reader.load_with_light_proto, sys.argv[1:]
def truncating_load(*args, **kwargs):  # what optimize reads its input with
    loaded, light = load(*args, **kwargs)
    if mode == "mapped":
        for value in loaded.graph.initializers.values():
            np.asarray(value.const_value)  # map the weight's pages
    if mode != "writing":
        os.truncate(data, 4096)
    return loaded, light
reader.load_with_light_proto = truncating_load
import onnxfold.io.segments as segments
write = segments.write
def truncating_write(fd, parts, *rest, **options):
    if mode == "writing":  # the output's temporary file exists now
        os.truncate(data, 4096)
    write(fd, parts, *rest, **options)
segments.write = truncating_write
from onnxfold.app.cli import main
sys.exit(main(["optimize", model, "-o", out]))
"""


def _model(directory) -> None:
    """y = x + -W + transpose(V): Neg reads W's pages while folding, the folded Transpose is a
    strided view of V's pages that the writer copies out in rows."""
    weights = [numpy_helper.from_array(np.full((512, 512), 1, np.float32), "W"),
               numpy_helper.from_array(np.arange(1 << 18, dtype=np.float32).reshape(512, -1), "V")]
    graph = helper.make_graph(
        [helper.make_node("Neg", ["W"], ["n"]), helper.make_node("Add", ["x", "n"], ["a"]),
         helper.make_node("Transpose", ["V"], ["r"]),
         helper.make_node("Add", ["a", "r"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [512, 512])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(directory / "m.onnx"), save_as_external_data=True, location="m.data",
              size_threshold=0)


@pytest.mark.parametrize("mode", ["unmapped", "mapped", "writing"])
def test_a_weight_file_truncated_mid_run_is_a_one_line_error(tmp_path, mode):
    _model(tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = run_python("-c", CHILD, mode, tmp_path / "m.data", tmp_path / "m.onnx",
                      out_dir / "folded.onnx", timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(proc)
    assert ("past the end" if mode != "writing" else "truncated while it was being read") \
        in proc.stderr
    assert list(out_dir.iterdir()) == [], "no output and no temporary file"
