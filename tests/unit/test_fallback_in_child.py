"""Expensive fallback batches run in a child process (``onnxfold.fold.fallback_child``) and give
the same bits as in the folding process; cheap ones stay in the process; the cost estimate
(``onnxfold.fold.fold_cost``) counts convolutions, matrix products and recurrent layers."""

from __future__ import annotations

import os
import tempfile

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnxfold.analysis.declines import DeclineKind
from onnxfold.fold import fallback, fallback_child
from onnxfold.fold.fallback_session import FallbackError, Wanted
from onnxfold.fold.fold_cost import batch_flops, node_flops
from tests.support.cli import assert_ok, run_python


def _conv(channels: int, side: int, kernel: int, seed: int = 0):
    """A Conv node on constant X and W (W stored, as an initializer of the model is)."""
    rng = np.random.default_rng(seed)
    x, w = ir.Value(name="X"), ir.Value(name="W")
    node = ir.Node("", "Conv", [x, w], attributes=[ir.AttrInt64s("pads", [kernel // 2] * 4)],
                   name="conv")
    out = node.outputs[0]
    out.name, out.dtype = "c", ir.DataType.FLOAT
    out.shape = ir.Shape([1, channels, side, side])
    feeds = {x: rng.standard_normal((1, channels, side, side)).astype(np.float32),
             w: (rng.standard_normal((channels, channels, kernel, kernel)) * 0.01
                 ).astype(np.float32)}
    return node, feeds, w


def _run(node, feeds, stored, timeout):
    return fallback.run_nodes([node], feeds, [node.outputs[0]], {"": 17}, 10, timeout,
                              stored={stored})[0]


class _Spy:
    """Counts the calls of the real ``run_in_child`` (which still runs)."""

    def __init__(self) -> None:
        self.calls = 0
        self.real = fallback.run_in_child

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.real(*args, **kwargs)


def test_an_expensive_batch_runs_in_a_child_with_the_same_bits(monkeypatch):
    node, feeds, w = _conv(48, 64, 15)  # 4.2e9 operations
    assert batch_flops([node], feeds) == 2 * 48 * 64 * 64 * 48 * 15 * 15
    spy = _Spy()
    monkeypatch.setattr(fallback, "run_in_child", spy)
    here = _run(node, feeds, w, timeout=None)
    assert spy.calls == 0
    in_child = _run(node, feeds, w, timeout=4.0)  # could take half of 4 s at 1 GFLOP/s
    assert spy.calls == 1
    assert in_child.dtype == here.dtype and in_child.shape == here.shape
    assert in_child.tobytes() == here.tobytes()


def test_a_cheap_batch_stays_in_the_process(monkeypatch):
    node, feeds, w = _conv(4, 16, 3)
    spy = _Spy()
    monkeypatch.setattr(fallback, "run_in_child", spy)
    _run(node, feeds, w, timeout=0.5)
    assert spy.calls == 0
    assert not fallback_child.worth_a_child(5e8, 0.0)
    assert fallback_child.worth_a_child(2e9, 1.0)
    assert not fallback_child.worth_a_child(1e10, 30.0)  # 10 s at worst: the timeout is 30 s


def _identity_model(dtype: int, shape: tuple[int, ...] = (3,)) -> bytes:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["a"], ["b"])], "g",
        [onnx.helper.make_tensor_value_info("a", dtype, shape)],
        [onnx.helper.make_tensor_value_info("b", dtype, shape)])
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)],
                                  ir_version=10).SerializeToString()


def test_a_child_passes_bfloat16_through_files():
    a = np.array([1.5, -2.0, 3.25], dtype=ml_dtypes.bfloat16)
    out = Wanted("b", int(ir.DataType.BFLOAT16), (3,), raw_only=True, scalar=False)
    (b,) = fallback_child.run_in_child(_identity_model(onnx.TensorProto.BFLOAT16), {},
                                       {"a": a}, [out], None, False, 30.0)
    assert b.dtype == a.dtype and b.tobytes() == a.tobytes()


@pytest.mark.parametrize(("onnx_type", "np_type"), [
    (onnx.TensorProto.BFLOAT16, ml_dtypes.bfloat16),
    (onnx.TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn)])
def test_a_child_keeps_a_scalar_of_a_raw_type_a_scalar(onnx_type, np_type):
    """A 0-d input of a type saved as raw bits reaches the child 0-d (numpy's
    ``ascontiguousarray`` would make it 1-d, and its Shape ``[1]`` instead of ``[]``)."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Shape", ["a"], ["b"])], "g",
        [onnx.helper.make_tensor_value_info("a", onnx_type, [])],
        [onnx.helper.make_tensor_value_info("b", onnx.TensorProto.INT64, [0])])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)],
                                   ir_version=10).SerializeToString()
    out = Wanted("b", int(ir.DataType.INT64), (0,), raw_only=False, scalar=False)
    (b,) = fallback_child.run_in_child(model, {}, {"a": np.array(1.5, dtype=np_type)}, [out],
                                       None, False, 30.0)
    assert b.shape == (0,) and b.dtype == np.int64


def test_an_error_in_the_child_is_a_decline():
    a = np.zeros(4, np.float32)  # the model declares 3 elements
    out = Wanted("b", int(ir.DataType.FLOAT), (3,), raw_only=False, scalar=False)
    with pytest.raises(FallbackError) as caught:
        fallback_child.run_in_child(_identity_model(onnx.TensorProto.FLOAT), {}, {"a": a},
                                    [out], None, False, 30.0)
    assert caught.value.reason.kind is DeclineKind.RUNTIME_ERROR
    assert "dimension" in str(caught.value).lower()


def test_the_cost_of_matrix_products_and_recurrent_layers():
    def shape_of(shapes):
        return lambda v: None if v is None else shapes.get(v.name)

    a, b = ir.Value(name="a"), ir.Value(name="b")
    matmul = ir.Node("", "MatMul", [a, b])
    matmul.outputs[0].name = "y"
    assert node_flops(matmul, shape_of({"a": (4, 100, 30), "b": (30, 50), "y": (4, 100, 50)})
                      ) == 2 * 4 * 100 * 50 * 30
    x, w, r = ir.Value(name="x"), ir.Value(name="w"), ir.Value(name="r")
    lstm = ir.Node("", "LSTM", [x, w, r], attributes=[ir.AttrInt64("hidden_size", 64)])
    assert node_flops(lstm, shape_of({"x": (1000, 8, 16), "w": (1, 256, 16),
                                      "r": (1, 256, 64)})) == 2 * 1000 * 8 * 256 * (16 + 64)
    add = ir.Node("", "Add", [a, b])
    add.outputs[0].name = "s"
    assert node_flops(add, shape_of({"a": (10,), "b": (10,), "s": (10,)})) == 30


def test_without_a_temporary_directory_the_batch_runs_in_the_process(monkeypatch, tmp_path):
    """No place for the child's files: the batch still folds, here (stopped between kernels
    only), rather than being declined."""
    node, feeds, w = _conv(48, 64, 15)
    here = _run(node, feeds, w, timeout=None)
    spy = _Spy()
    monkeypatch.setattr(fallback, "run_in_child", spy)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    result = _run(node, feeds, w, timeout=4.0)
    assert spy.calls == 1
    assert result.tobytes() == here.tobytes()


def test_the_child_imports_the_onnxfold_of_its_parent(tmp_path):
    """The child's PYTHONPATH starts with the directory this onnxfold came from, so a script
    that put a checkout on ``sys.path`` gets its children running the same code."""
    import site

    import onnxfold

    env = fallback_child._child_environment()
    root = os.path.dirname(os.path.dirname(os.path.abspath(onnxfold.__file__)))
    if root not in map(os.path.abspath, site.getsitepackages()):  # a checkout (editable)
        assert env["PYTHONPATH"].split(os.pathsep)[0] == root
    child = run_python("-c", "import onnxfold; print(onnxfold.__file__)", env=env, cwd=tmp_path,
                       timeout=60)
    assert_ok(child)
    assert os.path.samefile(child.stdout.strip(), onnxfold.__file__)


def test_a_weight_that_cannot_be_copied_for_the_fallback_is_a_decline_not_a_crash(monkeypatch):
    """The fallback's aligned copy of a handed weight is made where running it is guarded: a
    2 GiB weight under a 6 GiB address-space limit raised numpy's MemoryError out of
    ``optimize`` (tests/adversarial/test_proto_memory.py, --breadth); now the node stays,
    declined for size, the machine's shortage said."""
    from onnx import TensorProto, helper, numpy_helper

    from onnxfold import optimize as fold

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((64, 8, 8)).astype(np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("Det", ["W"], ["d"]), helper.make_node("Add", ["x", "d"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    copied = fallback.to_ort

    def short(array):
        if array.nbytes > 4096:
            raise MemoryError("Unable to allocate 16.0 KiB")
        return copied(array)

    monkeypatch.setattr(fallback, "to_ort", short)
    result = fold(model)
    assert [n.op_type for n in result.model.graph] == ["Det", "Add"]
    (declined,) = result.report.declined_nodes
    assert declined["kind"] == "size" and "out of memory" in declined["reason"]
