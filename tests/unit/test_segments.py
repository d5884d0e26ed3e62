"""Positioned output segments: layout, the split into two halves, and writing on two threads."""

import os

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx_ir.serde import TensorProtoTensor

from onnxfold.errors import OutputError
from onnxfold.io import load_model, save_model, segments
from onnxfold.io.segments import FileRange, Segment, halves
from onnxfold.pipeline.optimizer import optimize
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import run_ort


def test_halves_cut_arrays_between_rows_and_file_ranges_anywhere():
    view = np.arange(40, dtype=np.float32).reshape(10, 4).T  # 4 rows of 40 bytes, strided
    top, bottom = halves(Segment(3, view))
    assert (top.offset, bottom.offset) == (3, 3 + 80)
    np.testing.assert_array_equal(np.concatenate([top.data, bottom.data]), view)
    top, bottom = halves(Segment(100, FileRange("f", 10, 51)))
    assert top == Segment(100, FileRange("f", 10, 25))
    assert bottom == Segment(125, FileRange("f", 35, 26))
    assert halves(Segment(0, b"framing")) is None
    assert halves(Segment(0, np.zeros((1, 99), np.float32))) is None


def _model(tmp_path, external):
    """Folded transposes (non-contiguous views), a weight kept as it is, and an int4 weight."""
    rng = np.random.default_rng(0)
    keep = rng.standard_normal((257, 257)).astype(np.float32)
    q = rng.integers(-8, 8, (64, 64)).astype(np.int8)
    nodes = [helper.make_node("MatMul", ["x", "keep"], ["y"]),
             helper.make_node("DequantizeLinear", ["q4", "s"], ["q4f"])]  # kept: q4 stays
    inits = [tensor("keep", keep),
             helper.make_tensor("q4", onnx.TensorProto.INT4, q.shape, q.flatten().tolist()),
             tensor("s", np.float32(0.5))]
    outputs = [vinfo("y", shape=[1, 257]), vinfo("q4f", shape=[64, 64])]
    for i in range(3):
        rows = 300 + 7 * i
        inits.append(tensor(f"w{i}", rng.standard_normal((rows, 257)).astype(np.float32)))
        nodes.append(helper.make_node("Transpose", [f"w{i}"], [f"wt{i}"], perm=[1, 0]))
        outputs.append(vinfo(f"wt{i}", shape=[257, rows]))
    proto = make_model(nodes, [vinfo("x", shape=[1, 257])], outputs, inits, opset=21,
                       ir_version=10)
    path = str(tmp_path / "in.onnx")
    onnx.save(proto, path, save_as_external_data=external, location="in.onnx.data",
              size_threshold=0)
    return path


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external-data"])
def test_two_halves_write_the_same_bytes(tmp_path, monkeypatch, external):
    src = _model(tmp_path, external)
    outs = {}
    for name, threshold in (("one", 1 << 40), ("two", 1)):
        monkeypatch.setattr(segments, "PARALLEL_WRITE", threshold)
        model = optimize(src).model
        kinds = {type(seg.data).__name__ for seg in segments.layout(0, [
            (b"", v.const_value) for v in model.graph.initializers.values()])[0]}
        assert kinds == {"ndarray", "FileRange", "TensorProtoTensor"}  # every kind of segment
        assert any(not v.const_value.numpy().flags.c_contiguous
                   for v in model.graph.initializers.values()
                   if v.const_value.dtype != onnx.TensorProto.INT4)  # views really written
        out = tmp_path / name / "m.onnx"
        out.parent.mkdir()
        save_model(model, out, external_data=external)
        outs[name] = {p: (out.parent / p).read_bytes() for p in sorted(os.listdir(out.parent))}
    assert outs["one"] == outs["two"]
    x = {"x": np.random.default_rng(1).standard_normal((1, 257)).astype(np.float32)}
    for a, b in zip(run_ort(src, x), run_ort(str(tmp_path / "two" / "m.onnx"), x)):
        np.testing.assert_array_equal(a, b)


def test_a_failing_half_leaves_nothing_behind(tmp_path, monkeypatch):
    """The second half of each cut fails (a full disk), whichever thread writes it (an I/O
    thread, or the writer where none had started it): nothing is left behind."""
    src = _model(tmp_path, external=False)
    monkeypatch.setattr(segments, "PARALLEL_WRITE", 1)
    real_halves, real = segments.halves, segments._write_one
    second: list[Segment] = []  # (held: their ids stay theirs)

    def recorded(seg):
        cut = real_halves(seg)
        if cut is not None:
            second.append(cut[1])
        return cut

    def second_half_fails(fd, seg, *rest):
        if any(seg is half for half in second):
            raise OSError(28, "No space left on device")
        real(fd, seg, *rest)

    monkeypatch.setattr(segments, "halves", recorded)
    monkeypatch.setattr(segments, "_write_one", second_half_fails)
    out = tmp_path / "out.onnx"
    with pytest.raises(OutputError, match="No space left"):
        save_model(load_model(src), out)
    assert second and sorted(os.listdir(tmp_path)) == ["in.onnx"]


def _mixed_segments(tmp_path) -> list[Segment]:
    """Framing, small arrays (contiguous, a strided view, big-endian, a 0-d one), an int4
    tensor, a range of another file, a large array, and a gap before the last piece."""
    source = tmp_path / "source.bin"
    source.write_bytes(bytes(range(256)) * 4)
    q4 = helper.make_tensor("q4", onnx.TensorProto.INT4, [4, 4], list(range(-8, 8)))
    parts: list[tuple[bytes, object]] = [
        (b"head", np.arange(6, dtype=np.float32)),
        (b"\x0a\x05", np.arange(12, dtype=np.int64).reshape(3, 4).T),
        (b"", np.arange(5, dtype=">i4")),
        (b"!", np.float32(2.5).reshape(())),
        (b"q", TensorProtoTensor(q4)),
        (b"f", FileRange(str(source), 3, 700)),
        (b"big", np.arange(40_000, dtype=np.float32)),
        (b"tail", np.ones(3, np.float16))]
    found, pos = [], 0
    for prefix, data in parts:
        found.append(Segment(pos, prefix))
        pos += len(prefix)
        found.append(Segment(pos, data))
        pos += found[-1].nbytes
    found.append(Segment(pos + 10, b"after a gap"))
    return found


def test_small_segments_gathered_into_few_writes_give_the_same_bytes(tmp_path, monkeypatch):
    """Runs of small segments go out in one ``pwrite`` each: the same bytes at the same
    places as one write per segment, and ``progress`` told every segment's bytes."""
    outputs, calls = {}, {}
    real_pwrite = os.pwrite
    for name, small in (("each alone", 0), ("gathered", segments.SMALL_SEGMENT)):
        monkeypatch.setattr(segments, "SMALL_SEGMENT", small)
        count = [0]

        def counted(fd, data, offset, count=count):
            count[0] += 1
            return real_pwrite(fd, data, offset)

        monkeypatch.setattr(segments.os, "pwrite", counted)
        told: list[int] = []
        out = tmp_path / f"{name}.bin"
        fd = os.open(out, os.O_RDWR | os.O_CREAT)
        try:
            segments.write(fd, _mixed_segments(tmp_path), told.append)
        finally:
            os.close(fd)
        monkeypatch.setattr(segments.os, "pwrite", real_pwrite)
        outputs[name], calls[name] = out.read_bytes(), count[0]
        assert told == [seg.nbytes for seg in _mixed_segments(tmp_path)]
    assert outputs["gathered"] == outputs["each alone"]
    assert calls["gathered"] == 5 < calls["each alone"]  # 4 runs of small ones, the big one
