"""Files of other frameworks given where an ONNX model is expected: named in one line.

A PyTorch checkpoint (a real ``torch.save``, zip and legacy), safetensors, a TensorFlow
SavedModel directory, a frozen GraphDef, TFLite, Keras/HDF5: each is built in the test and
given to ``optimize``, ``compare``, ``inspect``, ``split`` and ``run``, and to the Python API.
Each must exit 2 with one line saying what the file is and how to get an ONNX model, write
nothing, and never unpickle the file.
"""

from __future__ import annotations

import json
import os
import struct
import zipfile

import numpy as np
import pytest

import onnxfold
from onnxfold.errors import InputError
from onnxfold.io.formats import describe, describe_head
from tests.support.cli import assert_one_error_line, run_cli, save_add_model


def _cli(*args, cwd=None):
    return run_cli(*args, cwd=cwd, timeout=120)


def _torch_zip(d):
    torch = pytest.importorskip("torch")
    path = d / "weights.pt"
    torch.save({"w": torch.zeros(3)}, path)
    return path


def _torch_legacy(d):
    torch = pytest.importorskip("torch")
    path = d / "weights.pth"
    torch.save({"w": torch.zeros(3)}, path, _use_new_zipfile_serialization=False)
    return path


class _Boom:
    """Unpickling this writes a file: the test fails if anything unpickles the checkpoint."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _booby_trapped_pickle(d):
    import pickle

    path = d / "model.bin"
    path.write_bytes(pickle.dumps(_Boom(str(d / "UNPICKLED")), protocol=4))
    return path


def _safetensors(d):
    header = json.dumps({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}).encode()
    path = d / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(12))
    return path


def _saved_model(d):
    directory = d / "saved"
    (directory / "variables").mkdir(parents=True)
    # SavedModel{saved_model_schema_version: 1, meta_graphs: {...}}: protobuf, like ONNX
    (directory / "saved_model.pb").write_bytes(b"\x08\x01\x12\x04\x0a\x02\x08\x01")
    return directory


def _frozen_graph(d):
    node = b"\x0a\x05input" + b"\x12\x0bPlaceholder"  # NodeDef{name: "input", op: ...}
    path = d / "frozen.pb"
    path.write_bytes(b"\x0a" + bytes([len(node)]) + node)
    return path


def _tflite(d):
    path = d / "model.tflite"
    path.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(64))
    return path


def _hdf5(d):
    path = d / "model.h5"
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(64))
    return path


def _keras3(d):
    path = d / "model.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("metadata.json", "{}")
        archive.writestr("config.json", "{}")
        archive.writestr("model.weights.h5", b"\x89HDF\r\n\x1a\n")
    return path


KINDS = {
    "pytorch zip": (_torch_zip, "a PyTorch checkpoint, not an ONNX model", "torch.onnx.export"),
    "pytorch legacy": (_torch_legacy, "a PyTorch checkpoint", "torch.onnx.export"),
    "pickle": (_booby_trapped_pickle, "a Python pickle", "never unpickles"),
    "safetensors": (_safetensors, "a safetensors file", "export"),
    "saved model": (_saved_model, "a TensorFlow SavedModel, not an ONNX model", "tf2onnx"),
    "frozen graph": (_frozen_graph, "a TensorFlow frozen graph", "--graphdef"),
    "tflite": (_tflite, "a TensorFlow Lite model", "--tflite"),
    "hdf5": (_hdf5, "an HDF5 file", "from_keras"),
    "keras": (_keras3, "a Keras model", "from_keras"),
}


@pytest.fixture
def onnx_model(tmp_path):
    return save_add_model(tmp_path / "m.onnx")


@pytest.mark.parametrize("kind", KINDS)
def test_optimize_names_the_format_and_writes_nothing(tmp_path, kind):
    make, what, advice = KINDS[kind]
    source = make(tmp_path)
    before = sorted(os.listdir(tmp_path))
    proc = _cli("optimize", str(source), "-o", str(tmp_path / "out.onnx"))
    assert_one_error_line(proc, f"{source}: {what}", advice)
    assert sorted(os.listdir(tmp_path)) == before
    assert not (tmp_path / "UNPICKLED").exists()


@pytest.mark.parametrize("kind", ["pytorch zip", "safetensors", "tflite", "saved model"])
def test_every_command_that_reads_a_model_names_the_format(tmp_path, onnx_model, kind):
    make, what, _ = KINDS[kind]
    source = str(make(tmp_path))
    np.savez(tmp_path / "feeds.npz", x=np.zeros(2, np.float32))
    for command in (["inspect", source], ["compare", str(onnx_model), source],
                    ["compare", source, str(onnx_model)],
                    ["split", source, "--runtime-const", "x", "-o", str(tmp_path / "parts")],
                    ["run", source, "--inputs", str(tmp_path / "feeds.npz")]):
        assert_one_error_line(_cli(*command), what)
    assert not (tmp_path / "parts").exists()


def test_a_saved_model_directory_given_to_batch_optimize_is_named(tmp_path):
    source = _saved_model(tmp_path)
    proc = _cli("optimize", str(source), "-o", str(tmp_path / "out") + "/")
    assert_one_error_line(proc, "a TensorFlow SavedModel", "tf2onnx")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["pytorch zip", "pickle", "safetensors", "saved model"])
def test_the_python_api_names_the_format(tmp_path, kind):
    make, what, _ = KINDS[kind]
    source = make(tmp_path)
    for call in (onnxfold.load_model, onnxfold.optimize, onnxfold.simplify):
        with pytest.raises(InputError, match=what.split(",")[0]):
            call(str(source))
    if source.is_file():
        with pytest.raises(InputError, match=what.split(",")[0]):
            onnxfold.optimize(source.read_bytes())
    assert not (tmp_path / "UNPICKLED").exists()


def test_onnx_models_are_not_mistaken_for_other_formats(onnx_model):
    assert describe(str(onnx_model)) is None
    assert onnxfold.load_model(str(onnx_model)) is not None


def test_only_the_first_bytes_decide():
    assert describe_head(b"\x08\x08\x12\x07pytorch", 1000) is None  # an ONNX file's start
    # an ONNX producer named "TFL3..." is not a TFLite flatbuffer (its root offset is no offset)
    assert describe_head(b"\x08\x08\x12\x04TFL3" + bytes(8), 1000) is None
    assert describe_head(b"\x1c\x00\x00\x00TFL3" + bytes(8), 1000) is not None
    header = b'{"a":1}'
    # a safetensors header length beyond the file is not safetensors
    assert describe_head(struct.pack("<Q", 10**9) + header, 100) is None
    assert describe_head(struct.pack("<Q", len(header)) + header, 8 + len(header)) is not None
