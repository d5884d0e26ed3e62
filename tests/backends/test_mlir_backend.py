"""The IREE backend's fast path: rewrites, results in caller memory, reuse, zero-copy inputs."""

import threading

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from onnxfold.declare.catalogue import load_catalogue
from onnxfold.runtime.backends import get_backend

iree = pytest.importorskip("iree.compiler", reason="IREE is not installed")

from onnxfold.runtime.backends import iree_backend  # noqa: E402
from onnxfold.runtime.backends.iree_rewrites import (  # noqa: E402
    tile_2d_transposes,
    transpose_before_dequantize,
)


def dq_transpose(shapes, axis=0, perm=None, zero_point=False):
    """int8 weights as inputs -> per-channel DequantizeLinear -> Transpose, one per shape."""
    model, feeds = dq_transpose_proto(shapes, axis, perm, zero_point)
    return ir.from_proto(model), feeds


def dq_transpose_proto(shapes, axis=0, perm=None, zero_point=False):
    nodes, inputs, outputs, inits = [], [], [], []
    rng = np.random.default_rng(0)
    feeds = {}
    for i, shape in enumerate(shapes):
        q, s, z = f"q{i}", f"s{i}", f"z{i}"
        channels = shape[axis]
        inputs.append(helper.make_tensor_value_info(q, TensorProto.INT8, list(shape)))
        feeds[q] = rng.integers(-128, 128, shape, dtype=np.int8)
        inits.append(helper.make_tensor(s, TensorProto.FLOAT, [channels],
                                        rng.random(channels).astype(np.float32) / 50))
        dq_inputs = [q, s]
        if zero_point:
            inits.append(helper.make_tensor(z, TensorProto.INT8, [channels],
                                            rng.integers(-5, 5, channels).tolist()))
            dq_inputs.append(z)
        nodes.append(helper.make_node("DequantizeLinear", dq_inputs, [f"w{i}"], axis=axis))
        p = perm or list(reversed(range(len(shape))))
        nodes.append(helper.make_node("Transpose", [f"w{i}"], [f"t{i}"], perm=p))
        outputs.append(helper.make_tensor_value_info(f"t{i}", TensorProto.FLOAT,
                                                     [shape[j] for j in p]))
    graph = helper.make_graph(nodes, "dq_transpose", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model, feeds


def _ort(model, feeds):
    backend = get_backend("ort")
    backend.prepare(model)
    return backend.run(feeds)


@pytest.mark.parametrize("shapes, axis, perm, zero_point", [
    ([(64, 96)], 0, None, False),
    ([(64, 96)], -1, None, True),
    ([(4, 6, 8)], 1, [2, 0, 1], True),
])
def test_transpose_before_dequantize_is_bitwise_equal(shapes, axis, perm, zero_point):
    model, feeds = dq_transpose(shapes, axis, perm, zero_point)
    rewritten = transpose_before_dequantize(model, load_catalogue())
    assert [n.op_type for n in rewritten.graph] == ["Transpose", "DequantizeLinear"]
    assert [n.op_type for n in model.graph] == ["DequantizeLinear", "Transpose"]  # a copy
    onnx.checker.check_model(ir.to_proto(rewritten))
    before, after = _ort(model, feeds), _ort(rewritten, feeds)
    for name in before:
        assert np.array_equal(before[name], after[name])


def test_transpose_before_dequantize_leaves_shared_dequantization_alone():
    proto, _ = dq_transpose_proto([(8, 16)])
    proto.graph.output.append(helper.make_tensor_value_info("w0", TensorProto.FLOAT, [8, 16]))
    model = ir.from_proto(proto)
    assert transpose_before_dequantize(model, load_catalogue()) is model


def test_tile_patch_still_matches_this_iree():
    """If IREE prints its configurations differently the patch silently does nothing: fail."""
    from iree.compiler import compile_str

    model, _ = dq_transpose_proto([(256, 384)])
    backend = get_backend("mlir")
    asm = backend._import(model)
    configured = compile_str(asm, input_type="onnx", extra_args=[
        *iree_backend.FLAGS, "--compile-to=executable-configurations"]).decode()
    patched = tile_2d_transposes(configured)
    assert patched != configured and "vector_common_parallel = [16, 16]" in patched


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    model, feeds = dq_transpose([(256, 384), (384, 256), (128, 128)], zero_point=True)
    backend = get_backend("mlir", cache_dir=str(tmp_path_factory.mktemp("iree")))
    backend.prepare(model)
    assert backend.routed_to is None and backend.out_params
    return backend, model, feeds


def test_results_equal_ort_and_survive_later_calls(prepared):
    backend, model, feeds = prepared
    first = backend.run(feeds)
    kept = {k: v.copy() for k, v in first.items()}
    expected = _ort(model, feeds)
    for name in expected:
        assert np.array_equal(first[name], expected[name])
    other = {k: (v // 2).astype(np.int8) for k, v in feeds.items()}
    second = backend.run(other)
    for name in expected:  # a result the caller still holds is never reused
        assert np.array_equal(first[name], kept[name])
        assert np.array_equal(second[name], _ort(model, other)[name])


def test_output_memory_is_reused_once_dropped(prepared):
    backend, _, feeds = prepared
    address = backend.run(feeds)["t0"].ctypes.data  # dropped at once
    assert backend.run(feeds)["t0"].ctypes.data == address


def test_unaligned_and_strided_inputs(prepared):
    backend, model, feeds = prepared
    odd = {}
    for name, arr in feeds.items():
        raw = np.empty(arr.nbytes + 1, np.int8)[1:]  # one byte past an aligned start
        odd[name] = raw.reshape(arr.shape)
        odd[name][...] = arr
    strided = {k: np.ascontiguousarray(np.repeat(v, 2, axis=1))[:, ::2] for k, v in feeds.items()}
    expected = _ort(model, feeds)
    for variant in (odd, strided):
        result = backend.run(variant)
        for name in expected:
            assert np.array_equal(result[name], expected[name])


def test_concurrent_calls(prepared):
    backend, model, feeds = prepared
    expected = _ort(model, feeds)
    failures = []

    def work():
        for _ in range(5):
            result = backend.run(feeds)
            failures.extend(n for n in expected if not np.array_equal(result[n], expected[n]))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_read_only_and_mapped_inputs(prepared, tmp_path):
    # numpy_helper.to_array, np.frombuffer and np.load(mmap_mode="r") all give read-only arrays
    backend, model, feeds = prepared
    expected = _ort(model, feeds)
    readonly = {k: np.frombuffer(v.tobytes(), v.dtype).reshape(v.shape) for k, v in feeds.items()}
    np.savez(tmp_path / "w.npz", **feeds)
    for name, arr in feeds.items():
        np.save(tmp_path / f"{name}.npy", arr)
    mapped = {k: np.load(tmp_path / f"{k}.npy", mmap_mode="r") for k in feeds}
    for variant in (readonly, mapped):
        assert not any(a.flags.writeable for a in variant.values())
        result = backend.run(variant)
        for name in expected:
            assert np.array_equal(result[name], expected[name])


def test_session_with_read_only_weights_equals_numpy(tmp_path):
    import onnxfold
    from tests.support.weight_models import RUNTIME, weight_feeds, weights_as_inputs_model

    model, feeds = weights_as_inputs_model(), weight_feeds()
    frozen = {k: np.frombuffer(v.tobytes(), v.dtype).reshape(v.shape) for k, v in feeds.items()}
    mlir = onnxfold.Session(model, RUNTIME, backend="mlir",
                            backend_options={"cache_dir": str(tmp_path)})
    reference = onnxfold.Session(model, RUNTIME, backend="numpy")
    assert np.array_equal(mlir.run(None, frozen)[0], reference.run(None, feeds)[0])


def test_a_module_cache_others_can_write_is_not_trusted(tmp_path):
    # a compiled module holds native code: a cache directory writable by others is ignored
    model, feeds = dq_transpose([(64, 32)])
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    first = get_backend("mlir", cache_dir=str(shared))
    first.prepare(model)
    assert list(shared.iterdir()) == []  # nothing stored where others could swap it
    private = tmp_path / "private"
    for expect_hit in (False, True):
        backend = get_backend("mlir", cache_dir=str(private))
        backend.prepare(model)
        assert backend.cache_hit is expect_hit
        assert np.array_equal(backend.run(feeds)["t0"], _ort(model, feeds)["t0"])
    assert oct(private.stat().st_mode & 0o777) == "0o700"
