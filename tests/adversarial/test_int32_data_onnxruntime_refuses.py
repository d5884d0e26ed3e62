"""Tensors stored in ``int32_data`` are refused exactly where onnxruntime refuses them.

onnxruntime refuses to load a model whose float16/bfloat16 tensor holds an ``int32_data`` value
outside 16 bits, or whose float8/float4 tensor holds one outside 8 bits ("data overflow"): such
a model is bad input (exit 2, one line naming the tensor), never folded into a model that
loads. Narrower integer types it accepts, truncating; a bool is any value but 0. Those fold,
and the folded model computes what onnxruntime computes on the original. Each case is checked
against onnxruntime itself first.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxfold.app.cli import main

REFUSED = [("FLOAT16", [0x3C00, 0x10000]), ("FLOAT16", [-1, 0]), ("BFLOAT16", [0x3F80, -2]),
           ("BFLOAT16", [1 << 20, 0]), ("FLOAT8E4M3FN", [0x38, 0x100]),
           ("FLOAT8E5M2", [-1, 0]), ("FLOAT8E4M3FNUZ", [0x1FF, 0]),
           ("FLOAT8E5M2FNUZ", [0x100, 0]), ("FLOAT8E8M0", [0x7F, 0x100]),
           ("FLOAT4E2M1", [0x100])]
ACCEPTED = [("BOOL", [256, -129]), ("BOOL", [2, 0]), ("INT8", [256, -129]),
            ("UINT8", [-1, 0x1FF]), ("INT16", [65537, -70000]), ("UINT16", [-1, 0x10001]),
            ("INT4", [0x1FF, -8]), ("UINT4", [0x121, -1]), ("FLOAT16", [0xFFFF, 0x3C00]),
            ("BFLOAT16", [0xFFFF, 0x3F80]), ("FLOAT8E4M3FN", [0xFF, 0x38]),
            ("FLOAT8E5M2", [0xFF, 0x3C])]


def _model(path, type_name: str, values: list[int]) -> tuple[str, onnx.ModelProto]:
    """Y = X + Cast<float>(c), c of ``type_name`` with ``values`` as its int32_data (packed
    4-bit types hold two elements per value)."""
    dtype = getattr(TensorProto, type_name)
    n = 2 * len(values) if type_name in ("INT4", "UINT4", "FLOAT4E2M1") else len(values)
    c = helper.make_tensor("c", dtype, [n], [0] * n)
    del c.int32_data[:]
    c.int32_data.extend(values)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["c"], ["f"], to=TensorProto.FLOAT, name="cast"),
         helper.make_node("Add", ["X", "f"], ["Y"], name="add")], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n])], [c])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    model.ir_version = 11
    onnx.save(model, path)
    return str(path), model


def _ort_error(model: onnx.ModelProto) -> str | None:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), options)
    except Exception as e:
        return str(e)
    return None


@pytest.mark.parametrize("type_name, values", REFUSED)
def test_refused_as_onnxruntime_refuses(type_name, values, tmp_path, capsys) -> None:
    path, model = _model(tmp_path / "m.onnx", type_name, values)
    assert "data overflow" in (_ort_error(model) or ""), "onnxruntime loads it"
    code = main(["optimize", path, "-o", str(tmp_path / "o.onnx")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("onnxfold: error: "), err
    assert "initializer c" in err and "int32_data" in err, err
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("type_name, values", ACCEPTED)
def test_accepted_as_onnxruntime_reads_it(type_name, values, tmp_path, capsys) -> None:
    path, model = _model(tmp_path / "m.onnx", type_name, values)
    assert _ort_error(model) is None
    out = str(tmp_path / "o.onnx")
    code = main(["optimize", path, "-o", out, "-q"])
    assert code == 0, capsys.readouterr().err
    x = np.zeros(model.graph.input[0].type.tensor_type.shape.dim[0].dim_value, np.float32)
    want = ort.InferenceSession(path).run(None, {"X": x})[0]
    got = ort.InferenceSession(out).run(None, {"X": x})[0]
    np.testing.assert_array_equal(got, want)
    assert [n.op_type for n in onnx.load(out).graph.node] == ["Add"]  # the Cast was folded
