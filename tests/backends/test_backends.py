"""Every runtime-fold backend gives the numpy backend's tensors; missing ones say what to do."""

import shutil

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from onnxfold.runtime.backends import BackendUnavailable, get_backend
from onnxfold.runtime.backends.onnx_mlir_backend import availability as onnx_mlir_availability
from onnxfold.runtime.split import split_model
from tests.support.cli import assert_ok, run_python
from tests.support.weight_models import RUNTIME, weight_feeds, weights_as_inputs_model


def _iree_missing() -> str | None:
    try:
        import iree.compiler
        import iree.runtime  # noqa: F401
    except ImportError:
        return "IREE is not installed (pip install 'onnxfold[mlir]')"
    return None


def _fold_model():
    parts = split_model(ir.serde.deserialize_model(weights_as_inputs_model()), RUNTIME)
    return parts.runtime_fold


def _f64_model():
    graph = helper.make_graph(
        [helper.make_node("Mul", ["a", "third"], ["b"]),
         helper.make_node("Sqrt", ["b"], ["c"])], "f64",
        [helper.make_tensor_value_info("a", TensorProto.DOUBLE, [5])],
        [helper.make_tensor_value_info("c", TensorProto.DOUBLE, [5])],
        [helper.make_tensor("third", TensorProto.DOUBLE, [], [1 / 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return ir.from_proto(model)


def _run(name, model, feeds, **options):
    backend = get_backend(name, **options)
    backend.prepare(model)
    return backend.run(feeds)


BACKENDS = [
    pytest.param("ort"),
    pytest.param("mlir", marks=pytest.mark.skipif(bool(_iree_missing()),
                                                  reason=_iree_missing() or "")),
    pytest.param("onnx-mlir", marks=pytest.mark.skipif(
        bool(onnx_mlir_availability()), reason=onnx_mlir_availability() or "")),
]


@pytest.mark.parametrize("name", BACKENDS)
def test_backend_matches_numpy_backend(name, tmp_path):
    model = _fold_model()
    feeds = {k: v for k, v in weight_feeds().items() if k in RUNTIME}
    want = _run("numpy", model, feeds)
    options = {"cache_dir": str(tmp_path)} if name == "mlir" else {}
    got = _run(name, model, feeds, **options)
    assert set(got) == set(want)
    for key in want:
        assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape
        np.testing.assert_array_equal(got[key], want[key])  # dequantize, transpose, cast: exact


@pytest.mark.parametrize("name", BACKENDS)
def test_float64_is_not_demoted(name, tmp_path):
    a = np.array([1e-300, 2.0, 3.0, 1e300, 7.0])
    options = {"cache_dir": str(tmp_path)} if name == "mlir" else {}
    got = _run(name, _f64_model(), {"a": a}, **options)["c"]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, np.sqrt(a * (1 / 3)), rtol=1e-15)


@pytest.mark.skipif(bool(_iree_missing()), reason=_iree_missing() or "")
def test_mlir_caches_compiled_module_and_routes_what_it_cannot_compile(tmp_path):
    model = _fold_model()
    first = get_backend("mlir", cache_dir=str(tmp_path))
    first.prepare(model)
    assert not first.cache_hit and len(list(tmp_path.glob("*.vmfb"))) == 1
    second = get_backend("mlir", cache_dir=str(tmp_path))
    second.prepare(model)
    assert second.cache_hit
    # an op IREE's ONNX importer does not lower is handed to onnxruntime, not failed
    graph = helper.make_graph(
        [helper.make_node("StringConcat", ["s", "s"], ["t"])], "str",
        [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, [2])])
    strings = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    strings.ir_version = 8
    backend = get_backend("mlir", cache_dir=str(tmp_path))
    backend.prepare(ir.from_proto(strings))
    assert backend.routed_to == "ort" and backend.route_reason
    out = backend.run({"s": np.array(["ab", "cd"], dtype=object)})["t"]
    assert list(out) == ["abab", "cdcd"]


def test_onnx_mlir_says_what_is_missing():
    reason = onnx_mlir_availability()
    if reason is None:
        pytest.skip("onnx-mlir is available here")
    with pytest.raises(BackendUnavailable, match="onnx-mlir binary on PATH or a running docker"):
        get_backend("onnx-mlir")
    assert shutil.which("onnx-mlir") is None


def test_mlir_missing_dependency_message():
    # a fresh interpreter in which the iree packages cannot be imported
    code = ("import sys; sys.modules['iree'] = None\n"
            "from onnxfold.runtime.backends import get_backend, BackendUnavailable\n"
            "try:\n    get_backend('mlir')\nexcept BackendUnavailable as e:\n    print(e)\n")
    done = run_python("-c", code, timeout=60)
    assert "pip install iree-base-compiler iree-base-runtime" in done.stdout, done
    assert_ok(done)


def test_unknown_backend():
    with pytest.raises(BackendUnavailable, match="unknown backend"):
        get_backend("tvm")


def test_numpy_backend_returns_outputs_made_by_constant_nodes():
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
            "v", TensorProto.FLOAT, [2], [1.5, -2.0])),
         helper.make_node("Neg", ["a"], ["n"])], "consts",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("n", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    got = _run("numpy", ir.from_proto(model), {"a": np.array([1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(got["c"], np.array([1.5, -2.0], np.float32))
    np.testing.assert_array_equal(got["n"], np.array([-1.0, -2.0], np.float32))


def test_numpy_backend_folds_a_copy_every_run():
    model = _fold_model()
    before = ir.to_proto(model).SerializeToString()
    backend = get_backend("numpy")
    backend.prepare(model)
    for seed in (0, 1):
        feeds = {k: v for k, v in weight_feeds(seed).items() if k in RUNTIME}
        got = backend.run(feeds)
        want = _run("ort", model, feeds)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])
    assert ir.to_proto(model).SerializeToString() == before
