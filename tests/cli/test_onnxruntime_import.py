"""onnxruntime (~0.2 s of CPU to import, a third of a small model's run) is imported only
where a run needs it: a fold that falls back to it, the output's load check (on by default;
``--no-verify`` turns it off), ``--check``/``--latency``, or a Session. Each run here is a child
process whose ``sys.modules`` is read after the command returns; the runs that need
onnxruntime show that the probe sees it when it is there."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.support.cli import run_python
from tests.support.models import make_model, tensor, vinfo

_PROBE = """
import sys
from onnxfold.app.cli import main
code = main(sys.argv[1:])
print(code, 'onnxruntime' in sys.modules)
"""


def _imports_onnxruntime(*argv: str) -> bool:
    """Whether ``onnxfold ARGV``, run to its end in a child, left onnxruntime imported (the
    command must succeed)."""
    done = run_python("-c", _PROBE, *argv, timeout=300)
    assert done.returncode == 0, done.stderr
    code, imported = done.stdout.split()[-2:]
    assert code == "0", done.stderr
    return imported == "True"


def _native(path: str) -> None:
    """A dynamic input through what native rules fold and rewrite (a MatMul of Transposed
    weights, a neutral Add, a Reshape to its own shape): one Gemm is left, nothing for
    onnxruntime to fold."""
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["h"]),
             helper.make_node("Add", ["h", "zero"], ["z"]),
             helper.make_node("Shape", ["z"], ["s"], start=-1),
             helper.make_node("Concat", ["minus1", "s"], ["target"], axis=0),
             helper.make_node("Reshape", ["z", "target"], ["y"])]
    onnx.save(make_model(nodes, [vinfo("x", shape=["N", 4])], [vinfo("y", shape=["M", 3])],
                         [tensor("w", np.ones((3, 4), np.float32)),
                          tensor("zero", np.full(3, -0.0, np.float32)),
                          tensor("minus1", np.array([-1], np.int64))]), path)


def _falls_back(path: str) -> None:
    """A constant Det: no native rule, so its fold runs in onnxruntime."""
    nodes = [helper.make_node("Det", ["m"], ["d"]),
             helper.make_node("Add", ["x", "d"], ["y"])]
    onnx.save(make_model(nodes, [vinfo("x", shape=["N"])], [vinfo("y", shape=["N"])],
                         [tensor("m", np.eye(3, dtype=np.float32) * 2)]), path)


def test_a_run_that_needs_no_onnxruntime_does_not_import_it(tmp_path):
    src, out, report = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    _native(str(src))
    assert not _imports_onnxruntime("optimize", str(src), "-o", str(out), "--no-verify",
                                    "--json", str(report))
    result = json.loads(report.read_text())
    assert result["folded_fallback"] == 0 and result["nodes_after"] < result["nodes_before"]
    assert [n.op_type for n in onnx.load(out).graph.node] == ["Gemm"]


@pytest.mark.parametrize("options", [[], ["--check", "1"]], ids=["load check", "check"])
def test_the_load_check_and_the_check_import_it(tmp_path, options):
    src = tmp_path / "m.onnx"
    _native(str(src))
    assert _imports_onnxruntime("optimize", str(src), "-o", str(tmp_path / "o.onnx"),
                                *options)


def test_a_fold_that_falls_back_imports_it(tmp_path):
    src, report = tmp_path / "m.onnx", tmp_path / "r.json"
    _falls_back(str(src))
    assert _imports_onnxruntime("optimize", str(src), "-o", str(tmp_path / "o.onnx"),
                                "--no-verify", "--json", str(report))
    assert json.loads(report.read_text())["folded_fallback"] == 1


def test_inspect_and_the_rules_listing_do_not_import_it(tmp_path):
    src = tmp_path / "m.onnx"
    _native(str(src))
    assert not _imports_onnxruntime("inspect", str(src))
    assert not _imports_onnxruntime("rules")

