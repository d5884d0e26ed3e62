"""Reading with memory-mapped weights, streaming atomic writes, external data."""

import os

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from onnxfold.errors import OutputError
from onnxfold.io import load_model, save_model, segments, writer
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import run_ort


def _mlp(tmp_path, external=False, n=64):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n, n)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[1, n])], [vinfo("y", shape=[1, n])],
                       [tensor("w", w), tensor("small", np.arange(3, dtype=np.int64))])
    path = str(tmp_path / "mlp.onnx")
    if external:
        onnx.save(proto, path, save_as_external_data=True, location="mlp.onnx.data",
                  size_threshold=0)
    else:
        onnx.save(proto, path)
    return path, w


def test_inline_weights_are_memory_mapped_not_copied(tmp_path):
    path, w = _mlp(tmp_path)
    model = load_model(path)
    tensor_ = model.graph.initializers["w"].const_value
    assert isinstance(tensor_, ir.ExternalTensor)  # refers to its bytes inside the .onnx
    assert os.path.samefile(tensor_.path, path)
    np.testing.assert_array_equal(tensor_.numpy(), w)
    assert not tensor_.numpy().flags.writeable


def test_round_trip_is_byte_identical_in_values(tmp_path):
    path, w = _mlp(tmp_path)
    out = str(tmp_path / "copy.onnx")
    save_model(load_model(path), out)
    x = np.ones((1, 64), np.float32)
    np.testing.assert_array_equal(run_ort(path, {"x": x})[0], run_ort(out, {"x": x})[0])
    saved = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
    np.testing.assert_array_equal(saved["w"], w)


def test_external_data_input_and_forced_external_output(tmp_path):
    path, _w = _mlp(tmp_path, external=True)
    model = load_model(path)
    out = str(tmp_path / "ext_out.onnx")
    info = save_model(model, out, external_data=True)
    assert info.data_path and os.path.exists(info.data_path)
    x = np.ones((1, 64), np.float32)
    np.testing.assert_array_equal(run_ort(path, {"x": x})[0], run_ort(out, {"x": x})[0])


def test_large_models_switch_to_external_data_automatically(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "EMBED_LIMIT", 1000)  # stands in for protobuf's 2 GiB
    path, _ = _mlp(tmp_path)
    out = str(tmp_path / "auto.onnx")
    info = save_model(load_model(path), out)
    assert info.data_path == str(tmp_path / "auto.onnx.data")
    x = np.ones((1, 64), np.float32)
    np.testing.assert_array_equal(run_ort(path, {"x": x})[0], run_ort(out, {"x": x})[0])


def test_folded_views_are_written_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(segments, "_CHUNK", 1024)  # force many chunks for a transposed view
    arr = np.arange(64 * 48, dtype=np.float32).reshape(64, 48)
    model = ir.serde.deserialize_model(make_model(
        [helper.make_node("Identity", ["c"], ["y"])], [], [vinfo("y", shape=[48, 64])]))
    value = ir.Value(name="c", const_value=ir.Tensor(arr.T), shape=ir.Shape([48, 64]),
                     type=ir.TensorType(ir.DataType.FLOAT))
    model.graph.register_initializer(value)
    model.graph.node(0).replace_input_with(0, value)
    out = str(tmp_path / "view.onnx")
    save_model(model, out)
    np.testing.assert_array_equal(run_ort(out, {})[0], arr.T)


def test_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    path, _ = _mlp(tmp_path)
    out = tmp_path / "out.onnx"
    out.write_bytes(b"precious")

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(segments, "_write_one", boom)
    with pytest.raises(OutputError, match="No space left"):
        save_model(load_model(path), str(out))
    assert out.read_bytes() == b"precious"
    assert sorted(os.listdir(tmp_path)) == ["mlp.onnx", "out.onnx"]


def test_refuses_to_overwrite_its_own_inputs(tmp_path):
    path, _ = _mlp(tmp_path, external=True)
    model = load_model(path)
    with pytest.raises(OutputError, match="overwrite an input"):
        save_model(model, str(tmp_path / "x.onnx"), external_data=True, data_name="mlp.onnx.data")
    with pytest.raises(OutputError, match="overwrite an input"):
        save_model(model, path)


@pytest.mark.parametrize("external_out", [None, True], ids=["auto", "external"])
def test_small_external_weights_are_written_into_the_output(tmp_path, external_out):
    """Tensors too small to stream are written into the output: a reference to the input's
    data file would name a path that does not exist beside an output in another directory."""
    src_dir, out_dir = tmp_path / "in", tmp_path / "out"
    src_dir.mkdir()
    out_dir.mkdir()
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y0"]),
             helper.make_node("Add", ["y0", "b"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[1, 64])], [vinfo("y", shape=[1, 64])],
                       [tensor("w", w), tensor("b", np.float32([0.5]))])
    src = str(src_dir / "m.onnx")
    onnx.save(proto, src, save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    out = str(out_dir / "m.onnx")
    save_model(load_model(src), out, external_data=external_out)
    x = {"x": np.ones((1, 64), np.float32)}
    np.testing.assert_array_equal(run_ort(out, x)[0], run_ort(src, x)[0])
    assert load_model(src).graph.initializers["b"].const_value.numpy() == 0.5  # input untouched


def test_header_reads_match_the_file_across_windows(tmp_path):
    """The reader walks headers with pread through a small window instead of a memory map."""
    from onnxfold.io.reader import _FileBytes

    data = np.random.default_rng(0).integers(0, 256, 100_000, dtype=np.uint8).tobytes()
    path = tmp_path / "bytes.bin"
    path.write_bytes(data)
    with open(path, "rb") as f:
        buf = _FileBytes(f.fileno(), len(data))
        rng = np.random.default_rng(1)
        for pos in [0, 16383, 16384, 99_999, *rng.integers(0, len(data), 200).tolist()]:
            assert buf[pos] == data[pos]
            end = pos + int(rng.integers(0, 40_000))
            assert buf[pos:end] == data[pos:end]
        with pytest.raises(IndexError):
            buf[len(data)]
