"""A check that fails on outputs the original itself does not hold under onnxruntime's own
optimization levels says so, and names no rule (issue 82 item 6).

A D-FINE-style detector picks anchors by top-k over near-tied scores: any change of rounding
moves them, onnxruntime's fusions at one level against another as much as a rewrite of
onnxfold's that multiplies constants in another order. The check fails honestly, but its
hint named ``--disable-rule`` rules that do not make the original any steadier. Here scores
are made near-tied on purpose (inputs rounded to eighths, then offset by about an ulp per
column); ``unstable`` normalizes them with a LayerNormalization written op by op, which
onnxruntime fuses from ``basic`` on (rounding otherwise), ``stable`` does not: there the
rewrite alone moved the top-k, and the rule is named.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.support.cli import run_cli
from tests.support.models import make_model, vinfo


def _near_tied_top_k(path, normalized: bool) -> None:
    nodes = [helper.make_node("Mul", ["x", "eight"], ["x8"]),
             helper.make_node("Round", ["x8"], ["xr"]),
             helper.make_node("Div", ["xr", "eight"], ["xq"]),
             helper.make_node("Add", ["xq", "offsets"], ["scores"])]
    source = "scores"
    if normalized:  # LayerNormalization op by op: onnxruntime fuses it from level basic on
        nodes += [helper.make_node("ReduceMean", ["scores"], ["m"], axes=[-1]),
                  helper.make_node("Sub", ["scores", "m"], ["d"]),
                  helper.make_node("Pow", ["d", "two"], ["p"]),
                  helper.make_node("ReduceMean", ["p"], ["v"], axes=[-1]),
                  helper.make_node("Add", ["v", "eps"], ["ve"]),
                  helper.make_node("Sqrt", ["ve"], ["s"]),
                  helper.make_node("Div", ["d", "s"], ["n"]),
                  helper.make_node("Mul", ["n", "gamma"], ["g"]),
                  helper.make_node("Add", ["g", "beta"], ["normalized"])]
        source = "normalized"
    nodes += [helper.make_node("Mul", [source, "c1"], ["a"]),
              helper.make_node("Mul", ["a", "c2"], ["b"]),  # onnxfold: b = source * (c1*c2)
              helper.make_node("TopK", ["b", "k"], ["values", "idx"], axis=-1)]
    constants = {"eight": np.float32(8), "two": np.float32(2), "eps": np.float32(1e-5),
                 "offsets": (np.arange(64) % 3 * 1.2e-7).astype(np.float32),
                 "gamma": np.ones(64, np.float32), "beta": np.zeros(64, np.float32),
                 "c1": np.float32(1.1), "c2": np.float32(0.7), "k": np.array([3], np.int64)}
    used = {i for node in nodes for i in node.input}
    model = make_model(nodes, [vinfo("x", shape=["n", 64])],
                       [vinfo("idx", onnx.TensorProto.INT64, ["n", 3])],
                       [numpy_helper.from_array(v, k) for k, v in constants.items() if k in used],
                       opset=13)
    onnx.save(model, path)


@pytest.mark.parametrize("normalized", [False, True], ids=["stable", "unstable"])
def test_a_failure_on_outputs_the_original_does_not_hold_names_no_rule(tmp_path, normalized):
    src = tmp_path / "m.onnx"
    _near_tied_top_k(src, normalized)
    proc = run_cli("optimize", src, "-o", tmp_path / "o.onnx", "--check", "3",
                   "--dim", "n=4000")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = proc.stderr.splitlines()[-1]
    assert line.startswith("onnxfold: check failed: idx outside tolerance"), line
    if normalized:
        assert "the original itself differs as much between onnxruntime's optimization " \
            "levels (idx " in line and "--disable-rule merge" not in line, line
        assert "the original itself differs" in proc.stdout  # the summary's note
    else:
        assert "--disable-rule merge_constant_factors" in line and "itself" not in line, line
