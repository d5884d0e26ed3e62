"""Checked reads of an input's weights: pread copies that a truncated file cannot fault."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.errors import InputError
from onnxfold.io import load_model
from onnxfold.io.mapped import MappedTensor, detached, input_origin
from onnxfold.io.segments import FileRange, Segment, unmapped


def _weights(tmp_path):
    """A model with W (64 x 32 float32) and V (16 float32) in m.data; its loaded tensors."""
    w = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    v = np.linspace(0, 1, 16, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["W", "W"], ["y"]), helper.make_node("Neg", ["V"], ["z"])],
        "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 32]),
                  helper.make_tensor_value_info("z", TensorProto.FLOAT, [16])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(v, "V")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path),
              save_as_external_data=True, location="m.data", size_threshold=0)
    model = load_model(path)
    tensors = {name: value.const_value for name, value in model.graph.initializers.items()}
    assert all(isinstance(t, MappedTensor) for t in tensors.values())
    return tmp_path / "m.data", tensors, w, v


def test_a_view_of_a_mapped_weight_is_detached_into_memory_of_its_own(tmp_path):
    _data, tensors, w, _v = _weights(tmp_path)
    view = tensors["W"].numpy().T[3:40:2]
    assert input_origin(view) is not None
    copy = detached(view)
    assert input_origin(copy) is None
    np.testing.assert_array_equal(copy, w.T[3:40:2])
    assert not copy.flags.writeable


def test_memory_of_its_own_is_not_detached(tmp_path):
    arr = np.arange(10, dtype=np.float32)
    assert input_origin(arr) is None
    assert detached(arr) is arr


def test_a_contiguous_mapped_view_is_written_as_a_range_of_its_file(tmp_path):
    data, tensors, _w, _v = _weights(tmp_path)
    rows = tensors["W"].numpy()[2:5]
    seg = unmapped(Segment(100, rows))
    assert isinstance(seg.data, FileRange)
    assert (seg.offset, seg.data.length) == (100, rows.nbytes)
    with open(data, "rb") as f:
        f.seek(seg.data.offset)
        assert f.read(seg.data.length) == rows.tobytes()


def test_a_strided_mapped_view_is_written_from_a_checked_copy(tmp_path):
    _data, tensors, w, _v = _weights(tmp_path)
    seg = unmapped(Segment(0, tensors["W"].numpy().T))
    assert isinstance(seg.data, np.ndarray) and input_origin(seg.data) is None
    np.testing.assert_array_equal(seg.data, w.T)


@pytest.mark.parametrize("damage", ["truncated", "removed"])
def test_a_damaged_file_is_an_input_error_for_every_checked_read(tmp_path, damage):
    data, tensors, _w, _v = _weights(tmp_path)
    view = tensors["W"].numpy().T  # mapped (its pages were not read)
    if damage == "truncated":
        os.truncate(data, 1024)
    else:
        os.unlink(data)
    with pytest.raises(InputError, match=r"m\.data"):
        detached(view)
    with pytest.raises(InputError, match=r"m\.data"):
        tensors["W"].checked_numpy()
    with pytest.raises(InputError, match=r"m\.data"):
        tensors["W"].tobytes()


def test_a_weight_first_read_after_its_file_shrank_is_an_input_error(tmp_path):
    data, tensors, _w, _v = _weights(tmp_path)
    np.testing.assert_array_equal(tensors["W"].numpy()[:1], np.arange(32)[None])  # mapped
    os.truncate(data, 1024)  # V (stored after W) is now past the end; the mapping is not
    with pytest.raises(InputError, match="past the end of the file"):
        tensors["V"].numpy()
