"""A proto's large weights written once to a scratch file for the check
(``check/running/spilled.py``): what is written (exactly the proto's bytes, aligned; anything
odd left in the model file as the proto holds it), that a session over it gives the proto's
own bits, that a disk that cannot take it falls back to holding the proto in memory, and that
the scratch directory is gone however the check ends."""

from __future__ import annotations

import errno
import os

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.check.compare import compare_models
from onnxfold.check.inputs.feeds import synthetic_feeds
from onnxfold.check.running import spilled as spilled_module
from onnxfold.check.running.options import CompareOptions
from onnxfold.check.running.runner import open_session
from onnxfold.check.running.spilled import ALIGNMENT, MODEL, WEIGHTS, SpilledModel, spilled
from onnxfold.errors import InputError
from onnxfold.pipeline.optimizer import optimize


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """The temporary directory the check's scratch files go to (checked empty after)."""
    where = tmp_path / "scratch"
    where.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(where))
    yield where
    assert not list(where.iterdir())


def _model() -> onnx.ModelProto:
    """Weights of several dtypes and sizes, one a tensor of typed fields (float_data), one
    bfloat16 (carried), one small; each reaching an output through its own op."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((33, 97)).astype(np.float32), "W")
    h = numpy_helper.from_array(rng.standard_normal((97, 65)).astype(np.float16), "H")
    ids = numpy_helper.from_array(rng.integers(-2**40, 2**40, (3000,), dtype=np.int64), "I")
    typed = helper.make_tensor("F", TensorProto.FLOAT, [2000],
                               rng.standard_normal(2000).astype(np.float32).tolist())
    small = numpy_helper.from_array(np.arange(8, dtype=np.float32), "s")
    bf = numpy_helper.from_array(rng.standard_normal(3000).astype(ml_dtypes.bfloat16), "B")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]),
             helper.make_node("Cast", ["xw"], ["xh"], to=TensorProto.FLOAT16),
             helper.make_node("MatMul", ["xh", "H"], ["y"]),
             helper.make_node("ReduceSum", ["I"], ["i"], keepdims=0),
             helper.make_node("ReduceSum", ["F"], ["f"], keepdims=0),
             helper.make_node("Mul", ["s", "s"], ["s2"]),
             helper.make_node("Cast", ["B"], ["b32"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["b32"], ["b"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 33])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n", 65]),
         helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("f", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("s2", TensorProto.FLOAT, [8]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [])],
        [w, h, ids, typed, small, bf])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_large_raw_weights_are_written_aligned_and_the_rest_left_in_the_model(scratch):
    proto = _model()
    model = spilled(proto, "model A")
    assert isinstance(model, SpilledModel)
    try:
        written = onnx.load(os.path.join(model.directory, MODEL), load_external_data=False)
        places = {t.name: {e.key: e.value for e in t.external_data}
                  for t in written.graph.initializer if t.external_data}
        assert set(places) == {"W", "H", "I", "B"}  # F: typed fields; s: 32 bytes
        with open(os.path.join(model.directory, WEIGHTS), "rb") as f:
            data = f.read()
        for tensor in proto.graph.initializer:
            if tensor.name in places:
                offset, length = int(places[tensor.name]["offset"]), \
                    int(places[tensor.name]["length"])
                assert offset % ALIGNMENT == 0
                assert data[offset:offset + length] == tensor.raw_data
            else:
                kept = next(t for t in written.graph.initializer if t.name == tensor.name)
                assert kept == tensor
        assert model.label == "model A"
    finally:
        model.close()
    assert not os.path.exists(model.directory)


def test_a_session_over_the_spilled_model_gives_the_protos_own_bits(scratch):
    proto = _model()
    feeds = synthetic_feeds(proto, seed=4, dims={"n": 7})[0]
    model = spilled(proto, "model A")
    assert model is not None
    try:
        ours = open_session(model, "model A").run(None, feeds)
    finally:
        model.close()
    theirs = open_session(proto, "model A").run(None, feeds)
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_odd_tensors_stay_in_the_model_as_the_proto_holds_them(scratch):
    """Short or long raw_data, raw_data beside typed fields, an external reference, strings,
    int4: none is written to the weights file (each as the proto has it: onnxruntime and the
    reader judge it as they judge the proto)."""
    proto = _model()
    w = proto.graph.initializer[0]
    short = onnx.TensorProto()
    short.CopyFrom(w)
    short.name, short.raw_data = "short", w.raw_data[:-4]
    both = onnx.TensorProto()
    both.CopyFrom(w)
    both.name = "both"
    both.float_data.append(1.0)
    external = onnx.TensorProto(name="ext", data_type=TensorProto.FLOAT, dims=[5000],
                                data_location=TensorProto.EXTERNAL)
    external.external_data.add(key="location", value="elsewhere.bin")
    text = helper.make_tensor("text", TensorProto.STRING, [2000], [b"x" * 4] * 2000)
    packed = onnx.TensorProto(name="int4", data_type=TensorProto.INT4, dims=[10000],
                              raw_data=bytes(5000))
    odd = [short, both, external, text, packed]
    for tensor in odd:
        assert spilled_module._spilled_bytes(tensor) is None or \
            spilled_module._spilled_bytes(tensor) != len(tensor.raw_data)
    proto.graph.initializer.extend(odd)
    directory = str(scratch / "d")
    os.mkdir(directory)
    spilled_module._write(proto, directory)
    written = onnx.load(os.path.join(directory, MODEL), load_external_data=False)
    kept = {t.name: t for t in written.graph.initializer}
    for tensor in odd:
        assert kept[tensor.name] == tensor
    assert kept["W"].external_data  # (the ordinary one is written)
    for name in os.listdir(directory):
        os.unlink(os.path.join(directory, name))
    os.rmdir(directory)


def test_nothing_to_spill_is_held_in_memory(scratch):
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.ones(4, np.float32), "c")])
    assert spilled(helper.make_model(graph), "model A") is None


@pytest.mark.parametrize("fault", ["disk full", "no temporary directory"])
def test_a_disk_that_cannot_take_the_weights_holds_the_proto_in_memory(scratch, monkeypatch,
                                                                        fault):
    proto = _model()
    if fault == "disk full":
        def full(fd, data, offset):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(spilled_module, "_write_at", full)
    else:
        monkeypatch.setattr("tempfile.tempdir", str(scratch / "missing"))
    assert spilled(proto, "model A") is None
    folded = optimize(proto).to_proto()
    result = compare_models(proto, folded, 2, CompareOptions(dims={"n": 3}))
    assert result.ok, result.summary()


@pytest.mark.parametrize("raised", [RuntimeError, KeyboardInterrupt])
def test_the_scratch_directory_is_removed_however_the_check_ends(scratch, monkeypatch, raised):
    from onnxfold.check import compare as compare_module

    proto = _model()
    made = []
    real = spilled_module.scratch_directory
    monkeypatch.setattr(spilled_module, "scratch_directory",
                        lambda prefix: made.append(real(prefix)) or made[-1])

    def interrupted(*args, **kwargs):
        assert all(os.path.isdir(d) for d in made) and len(made) == 2
        raise raised("stop")

    monkeypatch.setattr(compare_module, "_compared", interrupted)
    with pytest.raises(raised):
        compare_models(proto, proto, 1, CompareOptions(dims={"n": 2}))
    assert made and not any(os.path.exists(d) for d in made)


def test_a_fault_writing_or_reading_the_scratch_copy_leaves_nothing(scratch, monkeypatch):
    """An error other than the disk's while writing (a bug, an interrupt) propagates, and
    the scratch directory goes with it; so does a model the reader then refuses."""
    proto = _model()

    def broken(fd, data, offset):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(spilled_module, "_write_at", broken)
        with pytest.raises(KeyboardInterrupt):
            spilled(proto, "model A")
    twice = onnx.ModelProto()
    twice.CopyFrom(proto)
    twice.graph.initializer.append(twice.graph.initializer[0])  # W twice
    with pytest.raises(InputError) as raised:
        compare_models(twice, proto, 1, CompareOptions(dims={"n": 2}))
    assert str(raised.value).startswith("model A") and str(scratch) not in str(raised.value)


def _simplified(model: onnx.ModelProto, **kwargs) -> tuple[bytes, bool] | str:
    """``onnxfold.simplify``'s output's bytes and ok, or the message it raised."""
    import onnxfold

    try:
        folded, ok = onnxfold.simplify(model, **kwargs)
    except InputError as e:
        return str(e)
    return folded.SerializeToString(), ok


@pytest.mark.parametrize("given", ["weights", "tiny BERT export", "refused by the checker",
                                   "an initializer twice"])
def test_simplify_folds_and_checks_a_proto_from_its_copy_as_from_the_proto(scratch, monkeypatch,
                                                                           given):
    """``simplify(proto, check_n=N)`` folds the proto's scratch copy and checks against it
    (the fold's reads of a proto were copies it kept for the check): the same output, the same
    verdict and the same messages as read from the proto itself, and no scratch path said."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    proto = onnx.load(os.path.join(root, "models", "tiny_bert_ts.onnx")) \
        if given == "tiny BERT export" else _model()
    if given == "refused by the checker":
        proto.graph.node[0].op_type = "NoSuchOp"
    elif given == "an initializer twice":
        proto.graph.initializer.append(proto.graph.initializer[0])
    made = []
    real = spilled_module.scratch_directory
    monkeypatch.setattr(spilled_module, "scratch_directory",
                        lambda prefix: made.append(real(prefix)) or made[-1])
    copied = _simplified(proto, check_n=2)
    assert made  # it was copied (the model and the check's folded one)
    monkeypatch.setattr(spilled_module, "spilled", lambda model, label: None)
    held = _simplified(proto, check_n=2)
    assert copied == held
    if isinstance(copied, str):
        assert "onnxfold-check-" not in copied and str(scratch) not in copied
        assert copied.startswith("the model given")
    else:
        assert copied[1]


def test_the_rewrite_log_keeps_a_protos_weights_as_its_tensors():
    """A window's constant that is a weight of the proto the fold read is kept as the proto's
    tensor, read where the window runs: kept as an array it was a copy (each read of a
    proto's tensor is one), and a check of BERT-base's proto held 324 MiB of them."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    proto = onnx.load(os.path.join(root, "models", "tiny_bert_ts.onnx"))
    names = {t.name for t in proto.graph.initializer}
    result = optimize(proto, record_rewrites=True)
    kept = [constant for record in result.evidence.rewrites.records
            for window in (record.before, record.after) if window is not None
            for name, constant in window.constants.items() if name in names]
    assert kept and not any(isinstance(c, np.ndarray) for c in kept)
    checked = compare_models(proto, result.to_proto(), 2, CompareOptions(),
                             evidence=result.evidence)
    validated = checked.rewrites
    assert checked.ok and validated is not None and validated.rewrites, checked.summary()
    assert validated.count("bitwise") + validated.count("within") == len(validated.rewrites)


def _refers_to(location: str) -> onnx.ModelProto:
    """:func:`_model` with an initializer that refers to external data at ``location``."""
    proto = _model()
    external = onnx.TensorProto(name="E", data_type=TensorProto.FLOAT, dims=[1024],
                                data_location=TensorProto.EXTERNAL)
    external.external_data.add(key="location", value=location)
    proto.graph.initializer.append(external)
    proto.graph.node.append(helper.make_node("ReduceSum", ["E"], ["es"], keepdims=0))
    proto.graph.output.append(helper.make_tensor_value_info("es", TensorProto.FLOAT, []))
    return proto


@pytest.mark.parametrize("location", [WEIGHTS, MODEL, "elsewhere.bin"])
def test_a_proto_referring_to_external_data_is_refused_as_held_in_memory(scratch, location):
    """(adversarial round) Read from the scratch directory, a reference to ``weights`` found
    the scratch copy's own file: the check passed, a folded ReduceSum of W's first floats."""
    import onnxfold

    proto = _refers_to(location)
    assert spilled(proto, "model A") is None
    with pytest.raises(InputError, match="refers to external data"):
        onnxfold.simplify(proto, check_n=1)
    with pytest.raises(InputError, match="refers to external data"):
        onnxfold.compare(proto, proto, n=1)


def test_a_copy_the_file_reader_judges_otherwise_is_held_in_memory(scratch):
    """(adversarial round) ``ir_version`` 0 is refused by the reader of a file, not by the
    reader of a proto: the copy is not used, and the check runs as on the proto held."""
    import onnxfold

    proto = _model()
    proto.ir_version = 0
    assert spilled(proto, "model A") is None
    assert onnxfold.compare(proto, proto, n=1).ok


def test_a_large_initializers_doc_string_is_kept(scratch):
    """(adversarial round) An initializer read from a file's data lost its doc_string when
    the output was serialized (``io.writer.inline_references``)."""
    import onnxfold

    proto = _model()
    proto.graph.initializer[0].doc_string = "big doc"
    folded, ok = onnxfold.simplify(proto, check_n=1)
    assert ok and {t.name: t.doc_string for t in folded.graph.initializer}["W"] == "big doc"


def test_a_scratch_path_with_a_newline_is_never_said(scratch, monkeypatch):
    """(adversarial round) onnxruntime's message was cut at its first line before the
    scratch path in it was named: a TMPDIR with a newline left part of the path, and no
    reason."""
    import onnxfold

    where = scratch / "new\nline"
    where.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(where))
    proto = _model()
    proto.graph.node[0].op_type, proto.graph.node[0].domain = "Bar", "foo"
    proto.opset_import.append(helper.make_opsetid("foo", 1))
    with pytest.raises(InputError) as raised:
        onnxfold.compare(proto, proto, n=1)
    assert "is not a registered function/op" in str(raised.value)
    assert "new" not in str(raised.value).replace("\n", " ").split("registered")[0]
    assert not list(where.iterdir())
    where.rmdir()
