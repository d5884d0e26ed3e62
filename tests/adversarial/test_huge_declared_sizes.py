"""A file of a few hundred bytes that declares huge tensors (a long 1-D input, sparse
initializers of 256 MiB dense each) is folded, inspected and split in bounded memory, or refused
with one line: the child's peak RSS is measured with ``os.wait4`` and its address space capped,
so that a regression fails instead of taking the machine down."""

from __future__ import annotations

import os

import onnx
import pytest
from onnx import TensorProto, helper

from tests.support.cli import REFUSAL_TIMEOUT, assert_no_traceback, assert_one_error_line
from tests.support.measured_child import run_limited
from tests.support.models import vinfo


@pytest.mark.parametrize("command", ["optimize", "inspect", "split"])
def test_declared_long_1d_input_does_not_blow_memory(tmp_path, command):
    """A 69-byte model declaring x: float[2^24] and Add(x, x): onnx's shape inference with
    data_prop=True allocates ~150 B per declared element (2.5 GB here, ~40 GB for 2^28)."""
    n = 1 << 24
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "g",
                              [vinfo("x", shape=[n])], [vinfo("y", shape=[n])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save_model(proto, str(path))
    args = {"optimize": ["optimize", path, "-o", tmp_path / "o.onnx"],
            "inspect": ["inspect", path],
            "split": ["split", path, "--runtime-const", "x", "-o", tmp_path / "split"]}[command]
    done, peak = run_limited(args, address_space=6 << 30, timeout=REFUSAL_TIMEOUT)
    assert_no_traceback(done)
    assert done.returncode in (0, 2), done.stderr
    assert peak < 1 << 30, f"peak RSS {peak >> 20} MiB for a {os.path.getsize(path)}-byte model"


def test_sparse_initializers_are_bounded_in_total(tmp_path):
    """Five sparse initializers of 256 MiB dense each (a 429-byte file): each is under the
    per-tensor limit, together they need ~6.5 GB of RSS. The dense total must be bounded."""
    dims = [1 << 13, 1 << 13]
    sparse = []
    for k in range(5):
        values = helper.make_tensor(f"S{k}", TensorProto.FLOAT, [1], [1.0])
        indices = helper.make_tensor(f"S{k}_i", TensorProto.INT64, [1], [k])
        sparse.append(helper.make_sparse_tensor(values, indices, dims))
    nodes = [helper.make_node("Identity", [f"S{k}"], [f"y{k}"]) for k in range(5)]
    graph = helper.make_graph(nodes, "g", [], [vinfo(f"y{k}", shape=dims) for k in range(5)],
                              sparse_initializer=sparse)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save_model(proto, str(path))
    done, _ = run_limited(["optimize", path, "-o", tmp_path / "o.onnx"],
                          address_space=4 << 30, timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done, "sparse")  # refused by the limit, not by running out of memory
    assert not (tmp_path / "o.onnx").exists()
