"""``--target-opset`` keeps every validation the run without it has (issue 65, item 5): the
conversion put in a new main graph before any rewrite, and each rewrite was then said to be
"a rewrite in a subgraph" (0 of 21 validated on a KV-cache Llama); the windows recorded in the
converted graph run at the converted opsets."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.support.cli import run_cli
from tests.support.models import make_model, tensor, vinfo


def _model(path) -> None:
    """A Conv and an inference BatchNormalization (fused by a rewrite), then a ReduceMean
    whose axes are an input (opset 18's form: opset 17's takes an attribute)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
             helper.make_node("ReduceMean", ["n", "axes"], ["y"], keepdims=1)]
    inits = [tensor("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
             *(tensor(k, (np.abs(rng.standard_normal(4)) + 0.5).astype(np.float32))
               for k in "sbmv"),
             tensor("axes", np.array([2, 3], np.int64))]
    onnx.save(make_model(nodes, [vinfo("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
                         [vinfo("y", TensorProto.FLOAT, ["n", 4, 1, 1])], inits, opset=18),
              str(path))


def test_a_converted_run_validates_what_the_run_without_it_validates(tmp_path):
    source = tmp_path / "m.onnx"
    _model(source)
    lines = {}
    for args in ((), ("--target-opset", "17")):
        done = run_cli("optimize", source, "-o", tmp_path / f"o{len(args)}.onnx", "--check", "2",
                       *args)
        assert done.returncode == 0, done.stdout + done.stderr
        lines[args] = next(line for line in done.stdout.splitlines()
                           if line.startswith("rewrite validation"))
        assert "subgraph" not in done.stdout, done.stdout
    plain, converted = lines.values()
    assert converted == plain and " 0 validated" not in plain, lines
    assert onnx.load(str(tmp_path / "o2.onnx")).opset_import[0].version == 17
