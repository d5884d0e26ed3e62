"""`--target-opset N` (FoldOptions.target_opset, simplify's target_opset): the model converted
by onnx's version converter before folding, its outputs what the original computes in
onnxruntime at two bindings of its dynamic dims, its weights the reader's own (memory-mapped)
tensors; where the converter cannot, one line and exit 2, nothing written."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.errors import InputError
from onnxfold.io import load_model
from onnxfold.pipeline.opset_conversion import convert_opset
from tests.support.cli import run_cli
from tests.support.running import run_ort


def opset11_model(path) -> None:
    """Ops whose form changed after opset 11: ReduceSum's and Squeeze's axes became inputs
    (13), Split's sizes an input (13), Clip's bounds inputs (11 already); a weight Transposed
    (folds) and a dynamic batch."""
    w = numpy_helper.from_array(np.arange(24, dtype=np.float32).reshape(6, 4) / 10, "w")
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "wt"], ["h"]),               # [n, 6]
        helper.make_node("Split", ["h"], ["a", "b"], axis=1, split=[2, 4]),
        helper.make_node("ReduceSum", ["b"], ["s"], axes=[1], keepdims=1),
        helper.make_node("Unsqueeze", ["s"], ["u"], axes=[0]),
        helper.make_node("Squeeze", ["u"], ["q"], axes=[0]),
        helper.make_node("Add", ["a", "q"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)],
                                ir_version=7), str(path))


@pytest.mark.parametrize("target", [13, 17, 21])
def test_converted_and_folded_it_computes_what_the_original_computes(tmp_path, target):
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    opset11_model(src)
    proc = run_cli("optimize", str(src), "-o", str(out), "--target-opset", str(target))
    assert proc.returncode == 0, proc.stderr
    converted = onnx.load(str(out))
    assert {o.domain: o.version for o in converted.opset_import}[""] == target
    assert [n.op_type for n in converted.graph.node if n.op_type == "Transpose"] == []  # folded
    for batch in (1, 5):  # two bindings of the dynamic dim
        x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
        np.testing.assert_array_equal(run_ort(str(src), {"x": x})[0],
                                      run_ort(str(out), {"x": x})[0])


def test_the_weights_stay_the_readers_tensors(tmp_path):
    """The conversion sees references, not bytes: each weight's tensor object comes back."""
    src = tmp_path / "m.onnx"
    opset11_model(src)
    model = load_model(str(src))
    before = model.graph.initializers["w"].const_value
    converted = convert_opset(model, 17)
    assert converted.graph.initializers["w"].const_value is before
    assert convert_opset(converted, 17) is converted  # already there: unchanged


@pytest.mark.parametrize(("target", "says"), [
    ("9", "cannot convert"),  # Split's sizes: no adapter down to 9 for this form
    ("99", "knows opsets 1 to"),
    ("0", "--target-opset"),
])
def test_what_the_converter_cannot_do_is_one_line(tmp_path, target, says):
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    opset11_model(src)
    proc = run_cli("optimize", str(src), "-o", str(out), "--target-opset", target)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("onnxfold: error: ") and says in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]


def test_the_python_api_takes_it_as_an_option_and_a_keyword(tmp_path):
    src = tmp_path / "m.onnx"
    opset11_model(src)
    for result in (onnxfold.optimize(str(src), target_opset=17),
                   onnxfold.optimize(str(src), onnxfold.FoldOptions(target_opset=17))):
        assert result.model.opset_imports[""] == 17
    proto, ok = onnxfold.simplify(str(src), check_n=2, target_opset=18)
    assert ok and {o.domain: o.version for o in proto.opset_import}[""] == 18
    with pytest.raises(InputError, match=r"^target_opset=99: onnx .* knows opsets"):
        onnxfold.simplify(str(src), target_opset=99)
