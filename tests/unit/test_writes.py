"""Direct writes of whole pages, page-cache writes of the rest: the file gets exactly the bytes,
each page is written one way only, and a refusal falls back to the page cache."""

import errno
import os

import numpy as np
import pytest

from onnxfold.io import segments, writes
from onnxfold.io.segments import Segment
from onnxfold.io.writes import ALIGNMENT, AlignedBuffer, Writes, placement

PAGE = ALIGNMENT


def _recorded(monkeypatch):
    """Every ``pwrite``: (descriptor, offset, length)."""
    calls = []
    real = os.pwrite

    def pwrite(fd, data, offset):
        n = real(fd, data, offset)
        calls.append((fd, offset, n))
        return n

    monkeypatch.setattr(writes.os, "pwrite", pwrite)
    return calls


def _pages(offset, length):
    return set(range(offset // PAGE, (offset + length - 1) // PAGE + 1)) if length else set()


def _placed(data: bytes, offset: int) -> np.ndarray:
    buffer = AlignedBuffer().bytes(placement(offset) + len(data))[placement(offset):]
    buffer[:] = np.frombuffer(data, np.uint8)
    return buffer


@pytest.mark.parametrize("offset, length", [(0, 3 << 20), (123, (3 << 20) + 77),
                                            (PAGE - 1, (2 << 20) + 2), (5 * PAGE, 1 << 20)])
def test_whole_pages_go_direct_and_the_ends_through_the_cache(tmp_path, monkeypatch,
                                                              offset, length):
    data = np.random.default_rng(offset).integers(0, 256, length, np.uint8).tobytes()
    path = tmp_path / "out.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    calls = _recorded(monkeypatch)
    try:
        with Writes(fd) as out:
            if out._direct is None:
                pytest.skip("this file system refuses O_DIRECT (tmpfs before Linux 6.6)")
            direct = out._direct
            assert out.write(_placed(data, offset), offset) == length
    finally:
        os.close(fd)
    assert path.read_bytes()[offset:] == data
    direct_pages = set().union(*(_pages(o, n) for f, o, n in calls if f == direct))
    cached_pages = set().union(*(_pages(o, n) for f, o, n in calls if f == fd))
    assert direct_pages, "nothing was written directly"
    assert not direct_pages & cached_pages, "a page was written both ways"
    assert all(o % PAGE == 0 and n % PAGE == 0 for f, o, n in calls if f == direct)
    assert sum(n for _, _, n in calls) == length


def test_an_unplaced_buffer_goes_through_the_cache(tmp_path, monkeypatch):
    data = np.arange(3 << 20, dtype=np.uint8)
    fd = os.open(tmp_path / "out.bin", os.O_RDWR | os.O_CREAT)
    calls = _recorded(monkeypatch)
    try:
        with Writes(fd) as out:
            out.write(data[1:], 0)  # its address is one past a page boundary, its offset 0
    finally:
        os.close(fd)
    assert {f for f, _, _ in calls} == {fd}
    assert (tmp_path / "out.bin").read_bytes() == data[1:].tobytes()


def test_a_refused_direct_write_falls_back_to_the_cache(tmp_path, monkeypatch):
    """EINVAL (an alignment the file system wants larger, a mount that turns it down) costs
    nothing but speed: the same bytes land, later pieces go through the cache too."""
    data = np.random.default_rng(3).integers(0, 256, 3 << 20, np.uint8).tobytes()
    fd = os.open(tmp_path / "out.bin", os.O_RDWR | os.O_CREAT)
    real = os.pwrite
    refused = []

    def pwrite(f, buf, off):
        if f != fd:
            refused.append(off)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(f, buf, off)

    monkeypatch.setattr(writes.os, "pwrite", pwrite)
    try:
        with Writes(fd) as out:
            if out._direct is None:
                pytest.skip("this file system refuses O_DIRECT")
            out.write(_placed(data, 10), 10)
            out.write(_placed(data, 20 << 20), 20 << 20)
    finally:
        os.close(fd)
    raw = (tmp_path / "out.bin").read_bytes()
    assert raw[10:10 + len(data)] == data and raw[20 << 20:] == data
    assert len(refused) == 1


def test_other_write_errors_are_raised(tmp_path, monkeypatch):
    fd = os.open(tmp_path / "out.bin", os.O_RDWR | os.O_CREAT)
    real = os.pwrite

    def pwrite(f, buf, off):
        if f != fd:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(f, buf, off)

    monkeypatch.setattr(writes.os, "pwrite", pwrite)
    try:
        with Writes(fd) as out, pytest.raises(OSError) as caught:
            if out._direct is None:
                pytest.skip("this file system refuses O_DIRECT")
            out.write(_placed(bytes(2 << 20), 0), 0)
    finally:
        os.close(fd)
    assert caught.value.errno == errno.ENOSPC


@pytest.mark.parametrize("dtype", ["<f2", "<f4", ">f4", "u1"])
def test_transposed_weights_written_on_two_threads_give_numpys_bytes(tmp_path, dtype):
    """The writer's own path: transposed views cut in halves, each half's chunks placed for
    their offsets, written directly where whole pages allow, next to framing bytes."""
    rng = np.random.default_rng(4)
    weights = [rng.standard_normal(shape).astype(dtype).T
               for shape in [(1500, 701), (2048, 1024), (33, 4096)]]
    written, expected = _written(tmp_path, weights, b"framing!", start=7)
    assert written == expected


def _written(tmp_path, weights, framing=b"", start=0) -> tuple[bytes, bytes]:
    """``weights`` laid out from ``start``, each after ``framing``, written by the writer:
    the file's bytes, and numpy's bytes for them (little-endian, C order)."""
    parts, offset, expected = [], start, bytearray(start)
    for w in weights:
        if framing:
            parts.append(Segment(offset, framing))
            offset += len(framing)
        parts.append(Segment(offset, w))
        offset += w.nbytes
        expected += framing + np.ascontiguousarray(w).astype(w.dtype.newbyteorder("<"),
                                                             copy=False).tobytes()
    fd = os.open(tmp_path / "out.bin", os.O_RDWR | os.O_CREAT)
    try:
        segments.write(fd, parts)
    finally:
        os.close(fd)
    return (tmp_path / "out.bin").read_bytes(), bytes(expected)


def test_small_pieces_go_through_the_cache(tmp_path, monkeypatch):
    """Below ``DIRECT_MIN`` a direct write saves nothing worth a synchronous round trip."""
    data = bytes(range(256)) * 1024  # 256 KiB, whole pages
    fd = os.open(tmp_path / "out.bin", os.O_RDWR | os.O_CREAT)
    calls = _recorded(monkeypatch)
    try:
        with Writes(fd) as out:
            out.write(_placed(data, 0), 0)
    finally:
        os.close(fd)
    assert {f for f, _, _ in calls} == {fd}
    assert (tmp_path / "out.bin").read_bytes() == data


@pytest.mark.parametrize("refusal", ["einval", "short"])
def test_a_refusal_while_both_halves_write_directly(tmp_path, monkeypatch, refusal):
    """The writer's two threads share one ``Writes``: a refusal that one of them meets (EINVAL,
    or a short write off a page boundary) must not pull the direct descriptor from under the
    other one (found by an adversarial round: a TypeError from ``pwrite(None, ...)``, EBADF
    from a descriptor closed meanwhile). Every refusal is slow here, so both threads meet
    one; the bytes are numpy's."""
    import threading
    import time

    real_open, real_pwrite = writes.open_direct, os.pwrite
    direct_fds = set()

    def open_direct(fd):
        got = real_open(fd)
        if got is None:
            pytest.skip("this file system refuses O_DIRECT")
        direct_fds.add(got)
        return got

    threads = set()

    def pwrite(fd, data, offset):
        if fd in direct_fds:
            threads.add(threading.get_ident())
            time.sleep(0.05)
            if refusal == "einval":
                raise OSError(errno.EINVAL, "Invalid argument")
            return real_pwrite(fd, memoryview(data)[:5 * 1024], offset)
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(writes, "open_direct", open_direct)
    monkeypatch.setattr(writes.os, "pwrite", pwrite)
    weights = [np.random.default_rng(k).standard_normal((4096, 1024)).astype(np.float16).T
               for k in range(3)]
    written, expected = _written(tmp_path, weights)
    assert len(threads) == 2, "both halves were to meet a refusal"
    assert written == expected


def test_what_the_writer_reads_ahead_is_what_it_would_read(tmp_path):
    """The reading thread takes every segment ``unmapped`` reads out of an input file: a view
    of a mapping that is no plain range of it, and every mapped piece of a concatenation (it
    read only the former: a merged Q/K/V of plain weights was read on the writing thread)."""
    import onnx
    from onnx import helper, numpy_helper

    from onnxfold.io import load_model
    from onnxfold.io.segments import _reads_mapping, unmapped
    from onnxfold.ir.blocks import Concatenated

    weights = [np.full((64, 32), k, np.float32) for k in range(3)]
    graph = helper.make_graph(
        [helper.make_node("Concat", [f"w{k}" for k in range(3)], ["y"], axis=0)], "g", [],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [192, 32])],
        [numpy_helper.from_array(w, f"w{k}") for k, w in enumerate(weights)])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(path), save_as_external_data=True,
              size_threshold=0)
    model = load_model(str(path))
    views = [model.graph.initializers[f"w{k}"].const_value.numpy() for k in range(3)]
    cases = {"plain": views[0], "transposed": views[0].T, "in memory": views[0].copy(),
             "concatenation": Concatenated(views, 0)}
    for name, data in cases.items():
        seg = Segment(0, data)
        was = seg.data
        read = unmapped(seg).data
        reads = read is not was and not isinstance(read, segments.FileRange)
        assert _reads_mapping(seg) == reads, name
    assert [_reads_mapping(Segment(0, d)) for d in cases.values()] == [False, True, False, True]
