"""A model handed the check as an ``onnx.ModelProto`` is read once: its large weights written
once to a scratch file (``check/running/spilled.py``), or where none can be written held in
memory (``check/running/held.py``: its graph parsed once and cloned for each step, its large
weights copied once into aligned arrays handed to every session). What holds either to the
truth: a session over it computes the proto's own bits, the verdict over protos is the verdict
over the same models' files (a wrong weight still fails), messages still name a proto as
"model A"/"model B" (never by a scratch path), and no scratch file outlives the check."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.check.compare import compare_models
from onnxfold.check.inputs.feeds import synthetic_feeds
from onnxfold.check.running import held as held_module
from onnxfold.check.running import models as models_module
from onnxfold.check.running import spilled as spilled_module
from onnxfold.check.running.held import HeldModel
from onnxfold.check.running.options import CompareOptions
from onnxfold.check.running.runner import open_session
from onnxfold.errors import InputError
from onnxfold.pipeline.optimizer import optimize


@pytest.fixture(params=["spilled", "in memory"])
def holding(request, monkeypatch, tmp_path):
    """How the check holds a proto: its weights spilled to a scratch file (under a temporary
    directory of the test's own, checked empty after the test), or in memory (no scratch
    file can be written)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    if request.param == "in memory":
        monkeypatch.setattr(spilled_module, "spilled", lambda proto, label: None)
    yield request.param
    assert not list(scratch.iterdir())  # nothing outlives the check


def _weights_model() -> onnx.ModelProto:
    """x @ Transpose(W) + b, Gather from an int8 table cast up, a float16 scale: weights
    of several dtypes, large (handed over) and small (written), one folded by the fold."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 96)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b")
    table = numpy_helper.from_array(rng.integers(-128, 127, (100, 64), dtype=np.int8), "T")
    scale = numpy_helper.from_array(rng.standard_normal(64 * 40).astype(np.float16)
                                    .reshape(40, 64), "S")
    nodes = [helper.make_node("Transpose", ["W"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["h"]),
             helper.make_node("Gather", ["T", "ids"], ["g8"]),
             helper.make_node("Cast", ["g8"], ["g"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["h", "g"], ["y"]),
             helper.make_node("Cast", ["S"], ["s32"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["s32"], ["z"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 96]),
                     helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [64])],
        [w, b, table, scale])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_held_models_session_computes_the_protos_own_bits():
    proto = _weights_model()
    model = HeldModel(proto, "model A")
    _, arrays = model.session_source()
    assert set(arrays) == {"W", "T", "S"}  # b (256 B) is written into the model
    feeds = synthetic_feeds(proto, seed=3, dims={"n": 5})[0]
    ours = open_session(model, "model A").run(None, feeds)
    theirs = open_session(proto, "model A").run(None, feeds)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(ours, theirs, strict=True))


def test_each_step_gets_its_own_graph_over_one_read_only_copy_of_the_weights():
    model = HeldModel(_weights_model(), "model A")
    first, second = model.graph(), model.graph()
    assert first is not second and first.graph.node(0) is not second.graph.node(0)
    w1 = first.graph.initializers["W"].const_value.numpy()
    w2 = second.graph.initializers["W"].const_value.numpy()
    assert np.shares_memory(w1, w2) and not w1.flags.writeable
    assert w1.ctypes.data % 64 == 0
    first.graph.initializers["W"].shape = None  # a step reinferring its copy's shapes ...
    assert second.graph.initializers["W"].shape is not None  # ... leaves the others' alone


def test_a_check_over_protos_reads_each_once_and_judges_as_over_their_files(
        tmp_path, monkeypatch, holding):
    proto = _weights_model()
    result = optimize(proto, record_rewrites=True)
    folded = result.to_proto()
    reads = []
    for module, name in ((held_module, "model_from_proto"), (models_module, "model_from_proto"),
                         (spilled_module, "load_model"), (held_module, "load_model")):
        original = getattr(module, name)

        def counted(p, *args, _original=original, **kwargs):
            reads.append(id(p) if isinstance(p, onnx.ModelProto) else "a file")
            return _original(p, *args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    options = CompareOptions(dims={"n": 3})
    over_protos = compare_models(proto, folded, 3, options, evidence=result.evidence)
    # once each: the proto itself, or its scratch file
    assert sorted(map(str, reads)) == sorted(map(str, [id(proto), id(folded)])) \
        if holding == "in memory" else reads == ["a file", "a file"]
    monkeypatch.undo()
    onnx.save(proto, tmp_path / "a.onnx")
    onnx.save(folded, tmp_path / "b.onnx")
    over_files = compare_models(str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), 3,
                                options)
    assert over_protos.ok and over_files.ok
    assert [vars(r) for r in over_protos.rows] == [vars(r) for r in over_files.rows]
    assert over_protos.folds is not None and over_protos.folds.tensors


def test_a_wrong_weight_in_a_held_proto_still_fails(holding):
    proto = _weights_model()
    folded = optimize(proto).to_proto()
    for tensor in folded.graph.initializer:
        if tensor.dims == [96, 64]:  # the folded Transpose of W
            array = numpy_helper.to_array(tensor).copy()
            array.view(np.uint32)[7, 5] += 1  # one ulp
            tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
            break
    else:
        pytest.fail("the fold did not fold Transpose(W)")
    result = compare_models(proto, folded, 2, CompareOptions(dims={"n": 2}))
    assert not result.ok


def test_a_held_proto_onnxruntime_refuses_is_named_as_the_model_given(holding, tmp_path):
    proto = _weights_model()
    broken = onnx.ModelProto()
    broken.CopyFrom(proto)
    broken.graph.node[1].op_type = "MatMulNoSuchOp"
    result = compare_models(proto, broken, 1, CompareOptions(dims={"n": 2}, verify=False))
    assert not result.ok and result.failure.startswith("model B: onnxruntime cannot load it")
    with pytest.raises(InputError, match=r"^model A: onnxruntime cannot load it") as raised:
        compare_models(broken, proto, 1, CompareOptions(dims={"n": 2}, verify=False))
    for said in (result.failure, result.summary(), str(raised.value)):
        assert str(tmp_path) not in said and "onnxfold-check-" not in said
        assert "Load model from" not in said


def _softmax_model() -> onnx.ModelProto:
    weight = np.random.default_rng(7).standard_normal((64, 64)).astype(np.float32) * 0.3
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["W"], ["e"]), helper.make_node("MatMul", ["x", "e"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
        [numpy_helper.from_array(weight, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_held_fold_keeps_its_record_so_a_one_ulp_move_fails_as_in_a_file(tmp_path,
                                                                            holding):
    """(adversarial round) The held model's weights lost their tensors' metadata, onnxfold's
    records among them: a folded Softmax moved 1 ulp failed over files and passed over
    protos (judged with a tolerance instead of the bits its record asks for)."""
    original = _softmax_model()
    folded = optimize(original).to_proto()
    tensor = folded.graph.initializer[0]
    assert [p.key for p in tensor.metadata_props] == ["onnxfold.folded_from"]
    array = numpy_helper.to_array(tensor).copy()
    array.flat[5] = np.nextafter(array.flat[5], np.float32(np.inf))
    tensor.raw_data = array.tobytes()
    onnx.save(original, tmp_path / "a.onnx")
    onnx.save(folded, tmp_path / "b.onnx")
    over_files = compare_models(str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), 1,
                                CompareOptions())
    over_protos = compare_models(original, folded, 1, CompareOptions())
    assert not over_files.ok and not over_protos.ok
    assert over_protos.folds.tensors[0].state == over_files.folds.tensors[0].state


def test_the_callers_protos_are_left_as_they_were(holding):
    """(adversarial round) The reader deleted a tensor's metadata from the caller's proto
    (which onnx-ir's model shares): compare, simplify and optimize of an onnxfold output, or
    of a user's annotated weight, changed the proto the caller holds."""
    original = _softmax_model()
    original.graph.initializer[0].metadata_props.add(key="mine", value="keep me")
    folded = optimize(original).to_proto()
    for call in (lambda: compare_models(original, folded, 1, CompareOptions()),
                 lambda: optimize(folded), lambda: optimize(original)):
        before = (original.SerializeToString(), folded.SerializeToString())
        call()
        assert (original.SerializeToString(), folded.SerializeToString()) == before


def test_a_weight_that_cannot_be_copied_out_of_a_held_proto_is_one_line(monkeypatch):
    """(adversarial round) Under ``ulimit -v`` the copy of a weight out of the proto raised a
    raw MemoryError from the check (in its session's source, or where the fold verification
    first read the weight): the machine's shortage is one line naming the model."""
    from onnxfold.errors import ResourceLimitError

    def short(array):
        raise MemoryError("Unable to allocate 24.0 KiB")

    proto = _weights_model()
    monkeypatch.setattr(spilled_module, "spilled", lambda proto, label: None)  # in memory
    monkeypatch.setattr(held_module, "aligned", short)
    with pytest.raises(ResourceLimitError, match=r"^model A: reading weight \w+: out of memory"):
        compare_models(proto, proto, 1, CompareOptions(dims={"n": 2}))


def test_a_proto_the_reader_refuses_is_named_as_the_caller_gave_it():
    """(adversarial round) optimize's errors on a proto said "model:", a name no caller gave."""
    broken = _weights_model()
    broken.graph.initializer.append(broken.graph.initializer[0])  # W twice
    with pytest.raises(InputError, match=r"^the model given: "):
        optimize(broken)


def test_a_check_over_files_parses_each_once_and_names_them_by_path(tmp_path, monkeypatch):
    """A check walked each file's graph five times, a parse each (``HeldPath``): one parse
    per file now, each step a clone of it; messages still name the files by path."""
    proto = _weights_model()
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(proto, a)
    result = optimize(proto, record_rewrites=True)
    onnx.save(result.to_proto(), b)
    parsed = []
    real = held_module.load_model
    monkeypatch.setattr(held_module, "load_model",
                        lambda path, **kw: parsed.append(path) or real(path, **kw))
    compared = compare_models(a, b, 2, CompareOptions(dims={"n": 3}), evidence=result.evidence)
    assert compared.ok, compared.summary()
    assert sorted(parsed) == sorted([str(a), str(b)])
    assert (compared.model_a, compared.model_b) == (str(a), str(b))


def _shadowing_model() -> onnx.ModelProto:
    """A branch with an initializer of the name an outer one has (as TorchScript writes
    them: a silero VAD model's If branches; only the main graph reads the outer one, so
    onnxruntime runs the branch with its own), and a Constant whose tensor has a name of its
    own: the reader renames the branch's apart, the serializer names each initializer after
    its value."""
    branch = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])],
                               [numpy_helper.from_array(np.array([3.0], np.float32), "k")])
    other = helper.make_graph([helper.make_node("Add", ["x", "x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4])])
    constant = numpy_helper.from_array(np.ones(4, np.float32), "named_apart")
    nodes = [helper.make_node("Constant", [], ["c"], value=constant),
             helper.make_node("Add", ["x", "c"], ["xc"]),
             helper.make_node("Mul", ["xc", "k"], ["xk"]),
             helper.make_node("ReduceSum", ["xk"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["p"]),
             helper.make_node("If", ["p"], ["y"], then_branch=branch, else_branch=other)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array([2.0], np.float32), "k"),
         numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_fold_renaming_a_protos_values_leaves_the_callers_proto_as_it_was():
    """(found comparing simplify's outputs over the wild corpus) onnx-ir's tensor of a proto
    writes its name into the proto: the reader renaming a branch's initializer apart from an
    outer one (or the serializer naming it after its value) renamed it in the caller's proto,
    whose branch then read a value no longer there; ``simplify(proto, check_n=1)`` of a silero
    VAD model was refused ("value '664' ... is never defined")."""
    import onnxfold

    proto = _shadowing_model()
    before = proto.SerializeToString()
    result = optimize(proto)
    folded = result.to_proto()
    assert proto.SerializeToString() == before
    names = {t.name for g in (folded.graph,) for t in g.initializer}
    assert "k" in names  # (the output keeps its own names)
    then = next(a.g for a in folded.graph.node[-1].attribute if a.name == "then_branch")
    assert [t.name for t in then.initializer] == ["k__onnxfold0"]  # (renamed apart)
    assert onnxfold.simplify(proto, check_n=1)[1]
    assert proto.SerializeToString() == before
