"""The summary's ``weights`` and the signature's ``parameters`` count a model's constant data
wherever it is held: initializers and Constant nodes' values. A fold makes initializers of
Constant nodes; counting initializers alone, a TorchScript export whose position table sat in
a Constant node "grew" from 0.3 to 0.8 MiB while its file shrank (xglm, gpt-neo, m2m-100,
ctrl: a fresh-family round)."""

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxfold.pipeline.report_schema import validate
from tests.support.cli import run_cli

ROWS, COLS = 512, 64  # the Constant's table: 128 KiB of float32


def _table_in_a_constant(path) -> None:
    """y = Gather(Transpose(table), ids): the table is a Constant node, as TorchScript leaves
    a sinusoidal position table; a value_ints Constant and a string Constant beside it."""
    table = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((COLS, ROWS)).astype(np.float32), "t")
    nodes = [helper.make_node("Constant", [], ["table"], value=table),
             helper.make_node("Transpose", ["table"], ["rows"], perm=[1, 0]),
             helper.make_node("Constant", [], ["axes"], value_ints=[0]),
             helper.make_node("Constant", [], ["word"], value=helper.make_tensor(
                 "w", TensorProto.STRING, [1], [b"unused"])),
             helper.make_node("Gather", ["rows", "ids"], ["g"]),
             helper.make_node("Unsqueeze", ["g", "axes"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "n", COLS])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))


def test_weights_held_in_constant_nodes_are_weights_before_and_after(tmp_path):
    src, out, report = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    _table_in_a_constant(src)
    proc = run_cli("optimize", src, "-o", out, "--json", report)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert validate(data) == []
    table = ROWS * COLS * 4
    # before: the table's Constant and the axes' (one int64); the string is not counted
    assert (data["initializer_bytes_before"], data["constant_bytes_before"]) == (0, table + 8)
    # after: the transposed table an initializer, the axes too
    assert data["constant_bytes_after"] == 0
    assert data["initializer_bytes_after"] == table + 8
    assert "weights      0.1 MiB -> 0.1 MiB" in proc.stdout
    parameters = data["signature"]["parameters"]
    assert parameters == [{"count": ROWS * COLS + 1, "bytes": table + 8}] * 2
