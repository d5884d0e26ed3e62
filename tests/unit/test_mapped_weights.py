"""Weights read as views of one shared mapping per file (``onnxfold.io.mapped``)."""

from __future__ import annotations

import errno
import gc
import itertools
import os
import weakref

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.errors import InputError
from onnxfold.io.mapped import MappedTensor, drop_resident_pages
from onnxfold.io.reader import load_model
from onnxfold.io.segments import FileRange, SourceFiles, copy_range
from onnxfold.ir.arrays import release_pages

COUNT = 300


def _weights_model(path: str, count: int = COUNT) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((40, 40)).astype(np.float32) for _ in range(count)]
    nodes, prev = [], "x"
    for i in range(count):
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"]))
        prev = f"h{i}"
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 40])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 40])],
        [numpy_helper.from_array(a, f"w{i}") for i, a in enumerate(arrays)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return arrays


def _mappings_of(path: str) -> int:
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if line.rstrip().endswith(real))


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_every_weight_of_a_file_is_a_view_of_one_mapping(tmp_path):
    path = str(tmp_path / "m.onnx")
    arrays = _weights_model(path)
    before = _open_descriptors()
    model = load_model(path)
    tensors = [model.graph.initializers[f"w{i}"].const_value for i in range(COUNT)]
    assert all(isinstance(t, MappedTensor) for t in tensors)
    for tensor, want in zip(tensors, arrays, strict=True):
        np.testing.assert_array_equal(tensor.numpy(), want)
        assert tensor.tobytes() == want.tobytes()
    assert _mappings_of(path) == 1
    assert _open_descriptors() <= before + 1  # the mapping's own duplicate of the descriptor


def test_release_drops_one_view_and_the_others_still_read(tmp_path):
    """After ``release`` the tensor holds no view (the array it handed out dies with the
    caller's last reference), the file's one mapping stays while another weight's view uses
    it, and goes with the last view; a released weight is mapped again when read."""
    path = str(tmp_path / "m.onnx")
    arrays = _weights_model(path, 3)
    model = load_model(path)
    first, second = (model.graph.initializers[f"w{i}"].const_value for i in range(2))
    dropped = weakref.ref(first.numpy())
    held = second.numpy()
    assert dropped() is not None  # the tensor holds its view
    first.release()
    gc.collect()
    assert dropped() is None, "release kept the tensor's view"
    assert _mappings_of(path) == 1  # the second weight's view keeps the mapping
    np.testing.assert_array_equal(held, arrays[1])
    second.release()
    del held
    gc.collect()
    assert _mappings_of(path) == 0  # no view left: nothing of the file stays mapped
    np.testing.assert_array_equal(first.numpy(), arrays[0])  # mapped again on demand
    np.testing.assert_array_equal(second.numpy(), arrays[1])
    assert _mappings_of(path) == 1


def test_release_pages_drops_only_the_pages_of_one_weight(tmp_path):
    path = str(tmp_path / "m.onnx")
    arrays = _weights_model(path, 50)
    model = load_model(path)
    views = [model.graph.initializers[f"w{i}"].const_value.numpy() for i in range(50)]
    for view in views:
        view.sum()  # resident
    assert release_pages(views[10])
    np.testing.assert_array_equal(views[10], arrays[10])  # read back from the page cache
    np.testing.assert_array_equal(views[11], arrays[11])


def test_sub_byte_weights_are_unpacked_from_the_shared_mapping(tmp_path):
    values = np.array([(i % 16) - 8 for i in range(10_000)], np.int8)
    tensor = ir.Tensor(values.astype(ir.DataType.INT4.numpy()), name="q")
    packed = ir.serde.serialize_tensor(tensor)
    data = tmp_path / "w.bin"
    data.write_bytes(b"\0" * 100 + packed.raw_data)
    mapped = MappedTensor("w.bin", 100, len(packed.raw_data), ir.DataType.INT4,
                          shape=ir.Shape([10_000]), name="q", base_dir=str(tmp_path),
                          identity=(os.stat(data).st_dev, os.stat(data).st_ino))
    np.testing.assert_array_equal(mapped.numpy().astype(np.int8), values)
    assert mapped.tobytes() == packed.raw_data


def test_a_replaced_file_is_refused(tmp_path):
    data = tmp_path / "w.bin"
    data.write_bytes(np.arange(2048, dtype=np.float32).tobytes())
    identity = (os.stat(data).st_dev, os.stat(data).st_ino)
    other = tmp_path / "other.bin"
    other.write_bytes(data.read_bytes())
    os.replace(other, data)
    mapped = MappedTensor("w.bin", 0, 8192, ir.DataType.FLOAT, shape=ir.Shape([2048]),
                          name="w", base_dir=str(tmp_path), identity=identity)
    with pytest.raises(InputError, match="replaced after it was checked"):
        mapped.numpy()


def test_the_writer_copies_every_range_through_one_descriptor_per_file(tmp_path):
    source = tmp_path / "src.bin"
    source.write_bytes(bytes(range(256)) * 64)
    dst = os.open(tmp_path / "dst.bin", os.O_RDWR | os.O_CREAT)
    try:
        before = _open_descriptors()
        with SourceFiles() as sources:
            for i in range(200):
                copy_range(FileRange(str(source), i * 64, 64), dst, i * 64, sources)
                assert _open_descriptors() == before + 1
        assert _open_descriptors() == before
    finally:
        os.close(dst)
    assert (tmp_path / "dst.bin").read_bytes() == source.read_bytes()[: 200 * 64]


def _resident_kib_of(path: str) -> int:
    real, total, inside = os.path.realpath(path), 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields[0].split("-")) == 2 and ":" not in fields[0]:
                inside = line.rstrip().endswith(real)
            elif inside and line.startswith("Rss:"):
                total += int(fields[1])
    return total


def test_drop_resident_pages_gives_back_what_reads_of_many_weights_left(tmp_path):
    """Reading weights one after another and releasing each leaves their neighbours mapped
    (the kernel maps the pages around a fault); dropping the shared mappings' pages clears
    them, and the weights still read right afterwards."""
    path = str(tmp_path / "m.onnx")
    arrays = _weights_model(path)
    model = load_model(path)
    views = [model.graph.initializers[f"w{i}"].const_value.numpy() for i in range(COUNT)]
    for view in views:
        view.sum()
        release_pages(view)
    left = _resident_kib_of(path)
    drop_resident_pages()
    assert _resident_kib_of(path) == 0, left
    np.testing.assert_array_equal(views[7], arrays[7])


def test_a_prefetch_maps_nothing_and_fails_on_nothing(tmp_path, monkeypatch):
    """A prefetch is a hint to the page cache: it maps no file (mapping a whole data file for
    it failed a check in stages, which reads its weights with pread, under ulimit -v), holds
    no descriptor, and a file cut short is left for the read to report."""
    from onnxfold.io import mapped

    path = str(tmp_path / "m.onnx")
    _weights_model(path, count=3)
    model = load_model(path)
    tensors = [model.graph.initializers[f"w{i}"].const_value for i in range(3)]
    assert all(isinstance(t, MappedTensor) for t in tensors)

    def refused(*args, **kwargs):
        raise AssertionError("a prefetch mapped the file")

    monkeypatch.setattr(mapped, "shared_map", refused)
    before = _open_descriptors()
    for tensor in tensors:
        tensor.prefetch()
    assert _mappings_of(path) == 0 and _open_descriptors() == before
    os.truncate(path, 100)
    for tensor in tensors:
        tensor.prefetch()  # (nothing raised: the read says what is wrong)


def test_a_prefetch_asks_for_the_whole_weight_a_window_at_a_time(tmp_path, monkeypatch):
    """Linux reads one readahead window of a WILLNEED range (8 MiB here, 128 KiB on many
    disks) and drops the rest: a weight is asked for in steps no longer than that, which
    together cover every byte of it."""
    from onnxfold.io import mapped

    path = str(tmp_path / "m.onnx")
    big = np.random.default_rng(0).standard_normal((1500, 1000)).astype(np.float32)  # 6 MB
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"])], "g", [],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, big.shape)],
        [numpy_helper.from_array(big, "w")])), path, save_as_external_data=True,
        size_threshold=0)
    tensor = load_model(path).graph.initializers["w"].const_value
    asked = []
    monkeypatch.setattr(mapped.os, "posix_fadvise",
                        lambda fd, offset, length, advice: asked.append((offset, length)))
    tensor.prefetch()
    assert all(length <= mapped.PREFETCH_STEP for _, length in asked)
    covered = sorted(asked)
    assert covered[0][0] == tensor.offset
    assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(covered))
    assert covered[-1][0] + covered[-1][1] == tensor.offset + big.nbytes


def _hinted_thread_names(tensors, expected: int, monkeypatch) -> list[str]:
    """The threads on which ``prefetch_ahead(tensors)`` prefetched, once ``expected`` hints
    were given (waited for by an event, bounded, never by a fixed sleep)."""
    import threading

    from onnxfold.io import mapped

    names: list[str] = []
    done = threading.Event()

    def recorded(self):
        names.append(threading.current_thread().name)
        if len(names) == expected:
            done.set()

    monkeypatch.setattr(mapped.MappedTensor, "prefetch", recorded)
    mapped.prefetch_ahead(tensors)
    assert done.wait(60)  # a bound on a loaded machine, not a timing claim
    return names


def test_prefetch_ahead_hints_on_a_daemon_io_thread(tmp_path, monkeypatch):
    """The check hints the next window's weights and computes this one meanwhile: the hints
    (posix_fadvise reads much of the range before returning) are given on one of the
    process's I/O threads, daemons that nothing waits for at exit, each weight in a file once;
    weights held in memory are no file's and get no hint."""
    import threading

    path = str(tmp_path / "m.onnx")
    _weights_model(path, count=3)
    model = load_model(path)
    tensors = [model.graph.initializers[f"w{i}"].const_value for i in range(3)]
    names = _hinted_thread_names([*tensors, ir.tensor(np.ones(3, np.float32)), None], 3,
                                 monkeypatch)
    assert names == ["onnxfold-io"] * 3
    workers = [t for t in threading.enumerate() if t.name == "onnxfold-io"]
    assert workers and all(t.daemon for t in workers)


def test_prefetch_ahead_drops_a_request_a_newer_one_overtakes(tmp_path, monkeypatch):
    """Hints for a step its caller has left would only crowd a small cgroup's page cache:
    while one request is worked on, a newer one replaces what is left of it."""
    import threading

    from onnxfold.io import mapped

    path = str(tmp_path / "m.onnx")
    _weights_model(path, count=6)
    model = load_model(path)
    tensors = [model.graph.initializers[f"w{i}"].const_value for i in range(6)]
    first, second = tensors[:3], tensors[3:]
    started, release = threading.Event(), threading.Event()
    hinted: list[str] = []
    finished = threading.Event()

    def slow(self):
        hinted.append(self.name)
        if self is first[0]:
            started.set()
            release.wait(60)
        if self is second[-1]:
            finished.set()

    monkeypatch.setattr(mapped.MappedTensor, "prefetch", slow)
    mapped.prefetch_ahead(first)
    assert started.wait(60)
    mapped.prefetch_ahead(second)  # while the first request's first hint is given
    release.set()
    assert finished.wait(60)
    assert hinted == [first[0].name, *(t.name for t in second)]


def test_prefetch_ahead_gives_no_hint_where_no_thread_can_start(tmp_path, monkeypatch):
    """A hint is no work the run needs: where the machine refuses a thread, the caller goes
    on without one (the machine's limit is never the model's fault), and no hint is given."""
    import threading

    from onnxfold.io import mapped, threads

    path = str(tmp_path / "m.onnx")
    _weights_model(path, count=2)
    tensors = [load_model(path).graph.initializers[f"w{i}"].const_value for i in range(2)]
    monkeypatch.setattr(mapped, "_READ_AHEAD", mapped._ReadAhead())
    pool = threads._Pool()
    monkeypatch.setattr(threads, "_POOL", pool)
    hinted: list[object] = []
    monkeypatch.setattr(mapped.MappedTensor, "prefetch", hinted.append)

    def refused(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refused)
    mapped.prefetch_ahead(tensors)  # nothing raised
    assert pool.threads() == 0 and hinted == []


def test_a_weight_read_with_pread_starts_where_onnxruntime_holds_one(tmp_path):
    """read_range's new arrays start at a multiple of 64 bytes, as a session's tensors do: a
    check's run fed a weight it read takes it as it is, no aligned copy of it first (a copy of
    every transposed weight of a 7B slice, and its pages touched again)."""
    from onnxfold.io.checked import read_range

    path = str(tmp_path / "m.onnx")
    arrays = _weights_model(path, count=40)
    model = load_model(path)
    for i in range(40):
        tensor = model.graph.initializers[f"w{i}"].const_value
        array = tensor.checked_numpy()
        assert array.ctypes.data % 64 == 0 and array.flags.c_contiguous
        np.testing.assert_array_equal(array, arrays[i])
    for length in (1, 3, 63, 65, 4099):
        assert read_range(path, None, 7, length).ctypes.data % 64 == 0


@pytest.mark.parametrize("code", ["EXDEV", "ENOSYS", "EOPNOTSUPP", "EINVAL", "ENOSPC", "EIO"])
def test_copy_range_falls_back_only_where_the_kernel_cannot_copy(tmp_path, monkeypatch, code):
    """``copy_file_range`` failing because the kernel cannot copy between the two files
    (another file system, no such call ...) is copied by reads and writes instead; a full
    disk or an I/O error is the copy's own failure and is raised (the fall-back once caught
    every OSError, and wrote on where the disk was full)."""
    source = tmp_path / "src.bin"
    source.write_bytes(bytes(range(256)) * 16)
    number = getattr(errno, code)

    def refused(*_args):
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(os, "copy_file_range", refused)
    dst = os.open(tmp_path / "dst.bin", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if number in (errno.ENOSPC, errno.EIO):
            with pytest.raises(OSError) as raised:
                copy_range(FileRange(str(source), 16, 4000), dst, 0)
            assert raised.value.errno == number
        else:
            copy_range(FileRange(str(source), 16, 4000), dst, 0)
    finally:
        os.close(dst)
    if number not in (errno.ENOSPC, errno.EIO):
        assert (tmp_path / "dst.bin").read_bytes() == source.read_bytes()[16:4016]


def test_copy_range_says_an_input_that_ends_early(tmp_path):
    """``copy_file_range`` copying nothing (the input ends before the range) leaves the
    reads to say where it ends: the input changed, never a short output."""
    from onnxfold.io.checked import InputChanged

    source = tmp_path / "src.bin"
    source.write_bytes(b"x" * 100)
    dst = os.open(tmp_path / "dst.bin", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with pytest.raises(InputChanged, match="ends before byte 200"):
            copy_range(FileRange(str(source), 0, 200), dst, 0)
    finally:
        os.close(dst)
