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

    def shifted(data, begin, end, location):
        found = real(data, begin, end, location)
        if found is None:
            return None
        tensor = onnx.TensorProto.FromString(found)
        for entry in tensor.external_data:
            if entry.key == "offset":
                entry.value = str(int(entry.value) + shift)
        return tensor.SerializeToString()

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


def test_a_symlinked_model_is_referenced_where_it_is(tmp_path):
    real = tmp_path / "real" / "m.onnx"
    real.parent.mkdir()
    onnx.save(_model(), real)
    link = tmp_path / "elsewhere.onnx"
    link.symlink_to(real)
    found = referenced(str(link))
    assert found is not None and found.folder == str(real.parent)
    session = built_session(session_parts(str(link)), "link")
    assert session.get_inputs()[0].name == "x"


@pytest.mark.parametrize("change", ["rewritten", "replaced", "removed"])
def test_a_file_changed_before_the_session_is_built_is_an_error(tmp_path, change):
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
    else:
        os.unlink(path)
    with pytest.raises(InputError, match=r"changed while onnxruntime read it|cannot load"):
        built_session(parts, str(path))


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
