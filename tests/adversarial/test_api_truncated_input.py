"""The Python API with an input truncated (or removed) under it: an InputError, never a signal.

A child process optimizes a model whose weights are in an external-data file, reads every
weight once (their pages are mapped and resident), then truncates or removes the file and
calls ``save()``, ``to_proto()`` or ``Session.run()``; ``optimize()`` and ``simplify()`` see
the file truncated right after it is loaded, or ``optimize()`` is given a model whose weights
were already read (the error must stop the run, not be taken for a failing fold step).
Through a memory mapping any of these would be a bus error (SIGBUS: exit -7, a core, the
temporary output left behind); the child must catch an ``InputError`` and exit 0, with
nothing left in the output or temporary directories.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.cli import REFUSAL_TIMEOUT, run_python

CHILD = """
import os, sys
import numpy as np
import onnxfold, onnxfold.pipeline.optimizer

call, damage, model, out = sys.argv[1:]
data = model[:-len(".onnx")] + ".data"
x = np.ones((256, 256), np.float32)


def damaged(*_):
    if damage == "truncated":
        os.truncate(data, 4096)
    else:
        os.unlink(data)


def touched(result):
    for value in result.model.graph.initializers.values():
        float(np.asarray(value.const_value).sum())  # every weight's pages mapped and read
    return result


try:
    if call == "optimize":
        onnxfold.optimize(model, loaded=damaged)
    elif call == "simplify":
        load = onnxfold.pipeline.optimizer.load_with_light_proto  # optimize's read of a file
        def loaded_then_damaged(*args, **kwargs):
            loaded = load(*args, **kwargs)
            damaged()
            return loaded
        onnxfold.pipeline.optimizer.load_with_light_proto = loaded_then_damaged
        onnxfold.simplify(model)
    elif call == "optimize-read-model":  # its weights mapped and read before the damage
        loaded = onnxfold.load_model(model)
        for value in loaded.graph.initializers.values():
            float(np.asarray(value.const_value).sum())
        damaged()
        onnxfold.optimize(loaded)
    elif call == "session":
        session = onnxfold.Session(model, runtime_constants=["rc"])
        damaged()
        session.run(None, {"x": x, "rc": x})
    else:
        result = touched(onnxfold.optimize(model))
        damaged()
        if call == "save":
            result.save(out)
        elif call == "save-external":
            result.save(out, external_data=True)
        else:
            result.to_proto()
except onnxfold.InputError as e:
    print(e)
    sys.exit(0)
print("no error")
sys.exit(1)
"""


def _model(path) -> None:
    """y = (x + rc @ W + transpose(V)) @ U, every weight in m.data: the fold leaves transpose(V)
    as a strided view of V's mapped pages, W and U as references into the file."""
    weights = [numpy_helper.from_array(np.full((256, 256), 0.5, np.float32), "W"),
               numpy_helper.from_array(np.arange(1 << 16, dtype=np.float32).reshape(256, -1),
                                       "V"),
               numpy_helper.from_array(np.eye(256, dtype=np.float32), "U")]
    nodes = [helper.make_node("MatMul", ["rc", "W"], ["m"]),
             helper.make_node("Add", ["x", "m"], ["a"]),
             helper.make_node("Transpose", ["V"], ["t"]),
             helper.make_node("Add", ["a", "t"], ["b"]),
             helper.make_node("MatMul", ["b", "U"], ["y"])]
    square = [256, 256]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, square),
                     helper.make_tensor_value_info("rc", TensorProto.FLOAT, square)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, square)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path), save_as_external_data=True, location="m.data",
              size_threshold=0)


ORT_SESSION_FILE = ".ses"  # onnxruntime's own telemetry id, written to TMPDIR by any session
CALLS = ["save", "save-external", "to_proto", "session", "optimize", "optimize-read-model",
         "simplify"]


@pytest.mark.parametrize("damage", ["truncated", "removed"])
@pytest.mark.parametrize("call", CALLS)
def test_a_damaged_input_is_an_input_error_through_the_api(tmp_path, call, damage):
    if (call, damage) == ("optimize-read-model", "removed"):
        pytest.skip("its mapping keeps the removed file's data: the fold reads what was checked")
    _model(tmp_path / "m.onnx")
    out_dir, temp_dir = tmp_path / "out", tmp_path / "tmp"
    out_dir.mkdir()
    temp_dir.mkdir()
    proc = run_python("-c", CHILD, call, damage, tmp_path / "m.onnx", out_dir / "folded.onnx",
                      timeout=REFUSAL_TIMEOUT, env={**os.environ, "TMPDIR": str(temp_dir)})
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert "m.data" in proc.stdout, proc.stdout  # the InputError names the damaged file
    assert list(out_dir.iterdir()) == [], "no output and no temporary file"
    ours = [p.name for p in temp_dir.iterdir() if p.name != ORT_SESSION_FILE]
    assert ours == [], "no temporary file left"
