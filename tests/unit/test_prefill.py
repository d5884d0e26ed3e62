"""The output prefill: a warm temporary file that the writer takes over and truncates. It is
made for a pinned output (``onnxfold.io.pinned``), and the save of that same output takes it."""

import os

import numpy as np
import pytest
from onnx import helper

from onnxfold.errors import OutputError
from onnxfold.io import load_model, save_model, segments
from onnxfold.io.pinned import pin
from onnxfold.io.prefill import PREFILL_LIMIT, OutputPrefill
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import run_ort


def _model(tmp_path, n=256):
    w = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"])]
    path = tmp_path / "in.onnx"
    path.write_bytes(make_model(nodes, [vinfo("x", shape=[1, n])], [vinfo("y", shape=[1, n])],
                                [tensor("w", w)]).SerializeToString())
    return str(path)


def _wait_filled(prefill):
    assert prefill._job.exception() is None  # (run here if no I/O thread has started it)
    assert prefill.filled == prefill.target


@pytest.mark.parametrize("factor", [0.25, 1.0, 3.0], ids=["shorter", "same", "longer"])
def test_output_is_identical_with_a_prefill_of_any_length(tmp_path, factor):
    src = _model(tmp_path)
    plain, warm = tmp_path / "plain.onnx", tmp_path / "warm.onnx"
    save_model(load_model(src), plain)
    output = pin(warm)
    prefill = OutputPrefill(output, int(os.path.getsize(plain) * factor))
    _wait_filled(prefill)  # the worst case: zeros everywhere the model goes, and beyond
    save_model(load_model(src), output, prefill=prefill)
    prefill.discard()  # taken: a no-op
    assert warm.read_bytes() == plain.read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["in.onnx", "plain.onnx", "warm.onnx"]
    x = {"x": np.ones((1, 256), np.float32)}
    np.testing.assert_array_equal(run_ort(str(warm), x)[0], run_ort(str(plain), x)[0])


def test_prefill_for_another_path_is_not_taken(tmp_path):
    src = _model(tmp_path)
    with OutputPrefill(pin(tmp_path / "a.onnx"), 1 << 20) as prefill:
        other = pin(tmp_path / "b.onnx")
        assert prefill.take(other) is None
        save_model(load_model(src), other, prefill=prefill)
        assert os.path.exists(tmp_path / prefill.tmp)
    assert sorted(os.listdir(tmp_path)) == ["b.onnx", "in.onnx"]  # discarded on exit


def test_discard_while_filling_removes_the_file(tmp_path):
    prefill = OutputPrefill(pin(tmp_path / "out.onnx"), PREFILL_LIMIT * 4)
    assert prefill.target == PREFILL_LIMIT  # capped
    prefill.discard()
    assert prefill._job.done() and os.listdir(tmp_path) == []


def test_failed_save_leaves_neither_output_nor_prefill(tmp_path, monkeypatch):
    src = _model(tmp_path)
    out = tmp_path / "out.onnx"
    out.write_bytes(b"precious")

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(segments, "_write_one", disk_full)
    output = pin(out)
    with OutputPrefill(output, 1 << 20) as prefill, pytest.raises(OutputError, match="No space"):
        save_model(load_model(src), output, prefill=prefill)
    assert out.read_bytes() == b"precious"
    assert sorted(os.listdir(tmp_path)) == ["in.onnx", "out.onnx"]


def test_unwritable_directory_is_a_clean_error(tmp_path):
    with pytest.raises(OutputError, match="does not exist"):
        OutputPrefill(pin(tmp_path / "missing" / "out.onnx"), 1 << 20)
    unwritable = tmp_path / "unwritable"
    unwritable.mkdir(mode=0o500)
    output = pin(unwritable / "out.onnx")
    if os.access(unwritable, os.W_OK):  # root
        return
    with pytest.raises(OutputError, match="cannot write here"):
        OutputPrefill(output, 1 << 20)


def test_external_data_output_over_a_prefill(tmp_path):
    """The prefilled file becomes the (small) .onnx; the weights go to OUT.data as usual."""
    src = _model(tmp_path)
    plain_dir, warm_dir = tmp_path / "plain", tmp_path / "warm"
    plain_dir.mkdir()
    warm_dir.mkdir()
    save_model(load_model(src), plain_dir / "m.onnx", external_data=True)
    output = pin(warm_dir / "m.onnx")
    prefill = OutputPrefill(output, 1 << 20)
    _wait_filled(prefill)
    save_model(load_model(src), output, external_data=True, prefill=prefill)
    for name in ("m.onnx", "m.onnx.data"):
        assert (warm_dir / name).read_bytes() == (plain_dir / name).read_bytes()
    assert sorted(os.listdir(warm_dir)) == ["m.onnx", "m.onnx.data"]
    x = {"x": np.ones((1, 256), np.float32)}
    np.testing.assert_array_equal(run_ort(str(warm_dir / "m.onnx"), x)[0], run_ort(src, x)[0])


def test_a_prefilled_file_is_overwritten_through_the_page_cache(tmp_path, monkeypatch):
    """Its pages are warm zeros: a direct write of a large weight would first make the kernel
    write those zeros out. Without a prefill the same weight is written directly."""
    from onnxfold.io import writes

    src = _model(tmp_path, n=1024)  # a 4 MiB transposed weight
    opened = []
    real = writes.open_direct
    monkeypatch.setattr(writes, "open_direct", lambda fd: opened.append(fd) or real(fd))
    save_model(load_model(src), tmp_path / "plain.onnx")
    assert len(opened) == 1
    output = pin(tmp_path / "warm.onnx")
    prefill = OutputPrefill(output, os.path.getsize(tmp_path / "plain.onnx"))
    _wait_filled(prefill)
    save_model(load_model(src), output, prefill=prefill)
    assert len(opened) == 1  # none for the prefilled file
    assert (tmp_path / "warm.onnx").read_bytes() == (tmp_path / "plain.onnx").read_bytes()
