"""The check hands onnxruntime a model file with its large weights referenced in the file
(``check/running/file_refs``): every other byte as the file holds it, each reference at the
exact bytes of the weight, the same outputs bit for bit; anything it does not read plainly
handed over as a path; a file changed under it an error, never a session over other bytes."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, external_data_helper, helper, numpy_helper

from onnxfold.check.running import file_refs
from onnxfold.check.running.file_refs import MIN_BYTES, referenced
from onnxfold.check.running.runner import built_session, session_parts
from onnxfold.errors import InputError
from tests.support.models import make_model

F = TensorProto.FLOAT
SIDE = 640  # a 640x640 float32 weight: 1.6 MB, past MIN_BYTES


def _model(sides: tuple[int, ...] = (SIDE, SIDE)) -> onnx.ModelProto:
    """x [1, SIDE] through MatMuls by weights of ``sides`` (large ones referenced), each
    plus a small bias."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for k, side in enumerate(sides):
        w = rng.standard_normal((SIDE, side)).astype(np.float32)
        b = rng.standard_normal(side).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(b, f"b{k}")]
        nodes += [helper.make_node("MatMul", [prev, f"w{k}"], [f"m{k}"]),
                  helper.make_node("Add", [f"m{k}", f"b{k}"], [f"y{k}"])]
        prev = f"y{k}"
    return make_model(nodes, [helper.make_tensor_value_info("x", F, [1, SIDE])],
                      [helper.make_tensor_value_info(prev, F, None)], inits)


def _outputs(source, options=None) -> list[np.ndarray]:
    session = ort.InferenceSession(source, options or ort.SessionOptions(),
                                   providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((1, SIDE)).astype(np.float32)
    return session.run(None, {"x": x})


def test_large_weights_are_referenced_at_their_bytes_and_nothing_else_changes(tmp_path):
    path = tmp_path / "m.onnx"
    original = _model((SIDE, SIDE, 8))
    onnx.save(original, path)
    found = referenced(str(path))
    assert found is not None and found.folder == str(tmp_path)
    light = onnx.load_from_string(found.proto)
    data = path.read_bytes()
    referred = set()
    for before, after in zip(original.graph.initializer, light.graph.initializer):
        if len(before.raw_data) < MIN_BYTES:
            assert after == before  # small ones stay as the file holds them
            continue
        refs = {e.key: e.value for e in after.external_data}
        assert after.data_location == TensorProto.EXTERNAL and refs["location"] == "m.onnx"
        start, length = int(refs["offset"]), int(refs["length"])
        assert data[start:start + length] == before.raw_data
        after.ClearField("external_data")
        after.ClearField("data_location")
        after.raw_data = before.raw_data
        assert after == before
        referred.add(before.name)
    assert referred == {"w0", "w1"}
    assert light.graph.node == original.graph.node and light.opset_import == \
        original.opset_import and light.ir_version == original.ir_version


def test_onnxruntime_computes_the_same_bits_from_the_references(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    parts = session_parts(str(path))
    assert isinstance(parts.source, bytes)  # referenced, not the path
    session = built_session(parts, "m")
    x = np.random.default_rng(1).standard_normal((1, SIDE)).astype(np.float32)
    got = session.run(None, {"x": x})
    want = _outputs(str(path))
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want))


@pytest.mark.parametrize("shift", [-1, 1])
def test_a_reference_off_by_a_byte_computes_other_values(tmp_path, monkeypatch, shift):
    """The bitwise test above holds the offsets: a reference one byte off is caught."""
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    real = file_refs._tensor

    def shifted(data, begin, end, location, budget):
        name, found = real(data, begin, end, location, budget)
        if found is None:
            return name, None
        tensor = onnx.TensorProto.FromString(found)
        for entry in tensor.external_data:
            if entry.key == "offset":
                entry.value = str(int(entry.value) + shift)
        return name, tensor.SerializeToString()

    monkeypatch.setattr(file_refs, "_tensor", shifted)
    found = referenced(str(path))
    assert found is not None
    options = ort.SessionOptions()
    options.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                     found.folder)
    got = _outputs(found.proto, options)
    assert any(a.tobytes() != b.tobytes() for a, b in zip(got, _outputs(str(path))))


def test_nothing_large_is_handed_as_a_path(tmp_path):
    path = tmp_path / "small.onnx"
    onnx.save(_model((8,)), path)
    assert referenced(str(path)) is None
    assert session_parts(str(path)).source == str(path)


def test_a_model_with_external_data_is_handed_as_a_path(tmp_path):
    path = tmp_path / "ext.onnx"
    model = _model((SIDE, SIDE))
    onnx.save(model, path, save_as_external_data=True, location="ext.onnx.data",
              size_threshold=MIN_BYTES)
    assert os.path.getsize(path) > 0 and referenced(str(path)) is None


def test_a_model_with_one_weight_external_is_handed_as_a_path(tmp_path):
    """Its external data resolves beside the path given (a symlink's folder), the references
    beside the file itself: one model never mixes both."""
    path = tmp_path / "mixed.onnx"
    model = _model((SIDE, SIDE))
    external = model.graph.initializer[0]
    (tmp_path / "w0.bin").write_bytes(external.raw_data)
    external_data_helper.set_external_data(external, "w0.bin")
    external.ClearField("raw_data")
    onnx.save(model, path)
    assert len(_outputs(str(path))) == 1  # (onnxruntime reads it as it is)
    assert referenced(str(path)) is None


def test_a_graph_given_twice_is_handed_as_a_path(tmp_path):
    """Protobuf merges a message field given twice: not what this reads."""
    path = tmp_path / "twice.onnx"
    model = _model()
    path.write_bytes(model.SerializeToString() + model.SerializeToString())
    assert len(onnx.load(path).graph.initializer) == 8  # (onnx's own reading: merged)
    assert referenced(str(path)) is None


@pytest.mark.parametrize("damage", ["truncated", "random", "group"])
def test_a_damaged_file_is_handed_as_a_path(tmp_path, damage):
    path = tmp_path / "bad.onnx"
    data = _model().SerializeToString()
    if damage == "truncated":
        data = data[:len(data) - 100]
    elif damage == "random":
        data = np.random.default_rng(2).integers(0, 256, MIN_BYTES * 2, np.uint8).tobytes()
    else:  # a field in the deprecated group encoding, then the model
        data = bytes([0x0B, 0x0C]) + data  # field 1, start group; end group
    path.write_bytes(data)
    assert referenced(str(path)) is None


def test_a_link_in_its_own_folder_is_referenced_one_into_another_is_a_path(tmp_path):
    real = tmp_path / "real" / "m.onnx"
    real.parent.mkdir()
    onnx.save(_model(), real)
    beside = real.parent / "link.onnx"
    beside.symlink_to(real)
    found = referenced(str(beside))
    assert found is not None and found.folder == str(real.parent)
    elsewhere = tmp_path / "elsewhere.onnx"
    elsewhere.symlink_to(real)
    assert referenced(str(elsewhere)) is None


def test_a_nodes_external_data_resolves_beside_the_path_given(tmp_path):
    """Review finding: a Constant node's tensor in external data ``c.bin``, the model given
    through a link from folder A into folder B, each holding its own ``c.bin``: onnxruntime
    reads A's from the path; the references would have read B's (a check once failed a
    correct fold on it). Handed as the path: the same values."""
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir(), b.mkdir()
    c = numpy_helper.from_array(np.zeros(SIDE, np.float32), "cv")
    external_data_helper.set_external_data(c, "c.bin")
    c.ClearField("raw_data")
    model = _model()
    model.graph.node.append(helper.make_node("Constant", [], ["c"], value=c))
    model.graph.node.append(helper.make_node("Add", ["y0", "c"], ["z"]))
    model.graph.output[0].name = "z"
    onnx.save(model, b / "m.onnx")
    np.full(SIDE, 100, np.float32).tofile(a / "c.bin")
    np.full(SIDE, 200, np.float32).tofile(b / "c.bin")
    (a / "m.onnx").symlink_to(b / "m.onnx")
    parts = session_parts(str(a / "m.onnx"))
    assert parts.source == str(a / "m.onnx")
    x = {"x": np.zeros((1, SIDE), np.float32)}
    got = built_session(parts, "m").run(None, x)[0]
    in_b = built_session(session_parts(str(b / "m.onnx")), "b").run(None, x)[0]
    assert np.allclose(got, in_b - 100, atol=1e-3)  # A's c.bin (100), not B's (200)


def _tampered(raw: bytes, old: bytes, new: bytes) -> bytes:
    assert raw.count(old) == 1
    return raw.replace(old, new)


@pytest.mark.parametrize("form", ["length in 6 bytes", "key in 6 bytes", "key past 32 bits"])
def test_what_protobuf_reads_otherwise_is_handed_as_a_path(tmp_path, form):
    """Review findings: onnxruntime's protobuf reads a key or a length in at most 5 bytes and
    a key as 32 bits (one with bit 32 set is another field); a reading that took more would
    hand onnxruntime a model it refuses from the path, or another field's bytes."""
    model = _model()  # (its large weights would be referenced, but for the odd one)
    raw_data = np.arange(SIDE * SIDE, dtype=np.float32).tobytes()
    tensor = numpy_helper.from_array(np.zeros((SIDE, SIDE), np.float32), "extra")
    tensor.raw_data = raw_data
    model.graph.initializer.append(tensor)
    data = model.SerializeToString()
    head = b"\x4a" + _varint_bytes(len(raw_data))  # raw_data's key (9, length) and length
    if form == "length in 6 bytes":
        new = b"\x4a" + _varint_bytes(len(raw_data), 6)
    elif form == "key in 6 bytes":
        new = b"\xca\x80\x80\x80\x80\x00" + _varint_bytes(len(raw_data))
    else:
        new = b"\xca\x80\x80\x80\x10" + _varint_bytes(len(raw_data))  # 9 << 3 | 2 + 2**32
    # (lengths of the enclosing messages fixed up: the graph's and the tensor's grow alike)
    data = _reframed(model, _tampered(tensor.SerializeToString(), head, new))
    path = tmp_path / "odd.onnx"
    path.write_bytes(data)
    assert referenced(str(path)) is None


def _varint_bytes(value: int, width: int = 0) -> bytes:
    out = bytearray()
    while True:
        out.append(value & 0x7F)
        value >>= 7
        if not value and len(out) >= width:
            break
        out[-1] |= 0x80
    return bytes(out)


def _reframed(model: onnx.ModelProto, last_tensor: bytes) -> bytes:
    """``model`` serialized with its last initializer's bytes given as ``last_tensor``."""
    graph = onnx.GraphProto()
    graph.CopyFrom(model.graph)
    del graph.initializer[-1]
    graph_bytes = graph.SerializeToString() + b"\x2a" + _varint_bytes(len(last_tensor)) + \
        last_tensor
    rest = onnx.ModelProto()
    rest.CopyFrom(model)
    rest.ClearField("graph")
    return rest.SerializeToString() + b"\x3a" + _varint_bytes(len(graph_bytes)) + graph_bytes


@pytest.mark.parametrize("again", ["initializer", "node output", "sparse initializer"])
def test_a_referenced_name_defined_again_is_handed_as_a_path(tmp_path, again):
    model = _model()
    if again == "initializer":
        model.graph.initializer.append(model.graph.initializer[0])
    elif again == "node output":
        model.graph.node.insert(0, helper.make_node(
            "Constant", [], ["w0"], value=numpy_helper.from_array(np.zeros((SIDE, SIDE),
                                                                          np.float32))))
    else:
        model.graph.sparse_initializer.append(helper.make_sparse_tensor(
            numpy_helper.from_array(np.ones(1, np.float32), "w0"),
            numpy_helper.from_array(np.zeros((1, 2), np.int64)), [SIDE, SIDE]))
    path = tmp_path / "twice.onnx"
    onnx.save(model, path)
    assert referenced(str(path)) is None


def test_a_folder_named_in_no_utf8_is_handed_as_a_path(tmp_path):
    folder = os.path.join(os.fsencode(tmp_path), b"dir\xff")
    os.mkdir(folder)
    path = os.fsdecode(os.path.join(folder, b"m.onnx"))
    onnx.save(_model(), path)
    assert referenced(path) is None
    assert session_parts(path).source == path


def test_a_file_emptied_before_it_is_mapped_is_handed_as_a_path(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)

    def emptied(*args, **kwargs):
        raise ValueError("cannot mmap an empty file")

    monkeypatch.setattr(file_refs.mmap, "mmap", emptied)
    assert referenced(str(path)) is None


def test_a_file_of_more_fields_than_a_model_has_is_given_up(tmp_path, monkeypatch):
    """Review finding: a file of millions of tiny fields took 4.7 s to walk where
    onnxruntime refuses it at once; the walk stops at MAX_FIELDS."""
    monkeypatch.setattr(file_refs, "MAX_FIELDS", 1000)
    model = _model()
    for k in range(1001):
        model.graph.node.append(helper.make_node("Identity", ["x"], [f"i{k}"]))
    path = tmp_path / "many.onnx"
    onnx.save(model, path)
    assert referenced(str(path)) is None


def test_a_file_of_two_gib_or_more_is_handed_as_a_path(tmp_path):
    """Review finding: onnxruntime refuses a file past protobuf's 2 GiB from its path; its
    references would have loaded."""
    path = tmp_path / "big.onnx"
    head = _model().SerializeToString() + b"\xba\x3e"  # an unknown field (999) to the end
    size = file_refs.MAX_FILE - len(head) - 5
    path.write_bytes(head + _varint_bytes(size, 5))
    os.truncate(path, file_refs.MAX_FILE)  # (sparse: no disk taken)
    assert referenced(str(path)) is None


@pytest.mark.parametrize("change", ["rewritten", "replaced", "removed", "truncated"])
def test_a_file_changed_before_the_session_is_built_is_an_error(tmp_path, change):
    """Said as a change of the file, also where onnxruntime fails on the bytes it found
    (a truncated file: its weights' references run past its end)."""
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    parts = session_parts(str(path))
    assert parts.read_as is not None
    if change == "rewritten":  # same size, other bytes, a later time
        data = bytearray(path.read_bytes())
        data[-1] ^= 1
        path.write_bytes(bytes(data))
        os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    elif change == "replaced":
        other = tmp_path / "other.onnx"
        onnx.save(_model(), other)
        os.replace(other, path)
    elif change == "truncated":
        os.truncate(path, os.path.getsize(path) // 2)
    else:
        os.unlink(path)
    with pytest.raises(InputError, match=r"changed while onnxruntime read it"):
        built_session(parts, str(path))


def _rewritten_in_place(path) -> None:
    """``path``'s bytes changed where they lie (one bit near its end), its
    modification time set back: only its change time tells."""
    before = os.stat(path)
    data = bytearray(path.read_bytes())
    data[-8] ^= 1
    with open(path, "r+b") as f:
        f.write(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_file_rewritten_under_a_built_session_is_an_error_after_its_runs(tmp_path):
    """Review finding: onnxruntime reads referenced weights through its mapping as long as
    the session lives: rewritten in place (its modification time set back), the values
    change; the change time tells, checked after the session's last run."""
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    session = built_session(session_parts(str(path)), "m")
    session.still_read()
    _rewritten_in_place(path)
    with pytest.raises(InputError, match="changed while onnxruntime read it"):
        session.still_read()


def test_latency_creates_its_sessions_from_the_path(tmp_path, monkeypatch):
    """``--latency`` times session creation as a user's is: onnxruntime parsing the file,
    never the check's references."""
    import onnxfold

    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    asked = []
    monkeypatch.setattr(file_refs, "referenced", lambda source: asked.append(source))
    onnxfold.measure_latency(str(path), str(path), runs=1)
    assert asked == []
    session_parts(str(path))
    assert asked == [str(path)]  # (the probe sees the check's own use)


@pytest.mark.parametrize("which", ["original", "optimized"])
def test_a_compare_whose_file_is_rewritten_while_it_runs_is_an_error(tmp_path, which):
    """Through the public ``compare``: a model's weights rewritten in place while its
    session runs (told by the progress line) end the check in an error, never a verdict."""
    import onnxfold

    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(_model(), a)
    onnx.save(_model(), b)
    target = a if which == "original" else b
    done = []

    def progress(text: str) -> None:
        if text.startswith(which) and not done:
            _rewritten_in_place(target)
            done.append(text)

    with pytest.raises(InputError, match="changed while onnxruntime read it"):
        onnxfold.compare(str(a), str(b), n=1, progress=progress)
    assert done


def test_a_reader_that_misplaces_a_weight_is_caught_by_the_check(tmp_path, monkeypatch):
    """The check's session of the original finds a weight's bytes with its own walker: a
    reader (``io/reader.py``) that placed them 4 bytes off folds ``Transpose(W)`` of the
    wrong bytes, and the check, reading the right ones, fails it. Were the walker shared,
    both sides would read the same wrong bytes and the fold be certified."""
    import onnxfold
    from onnxfold.io import reader

    rng = np.random.default_rng(3)
    w = rng.standard_normal((SIDE, SIDE)).astype(np.float32)
    model = make_model(
        [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
         helper.make_node("MatMul", ["x", "wt"], ["y"])],
        [helper.make_tensor_value_info("x", F, [1, SIDE])],
        [helper.make_tensor_value_info("y", F, [1, SIDE])], [numpy_helper.from_array(w, "w")])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert onnxfold.simplify(str(path), check_n=1)[1]  # (as the reader is: it passes)
    real = reader._strip_tensor

    def misplaced(buf, start, end, location):
        found = real(buf, start, end, location)
        if found is None:
            return None
        tensor = onnx.TensorProto.FromString(found)
        for entry in tensor.external_data:
            if entry.key == "offset":
                entry.value = str(int(entry.value) + 4)
        return tensor.SerializeToString()

    monkeypatch.setattr(reader, "_strip_tensor", misplaced)
    assert not onnxfold.simplify(str(path), check_n=1)[1]
