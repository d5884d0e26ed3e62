"""Constants inside model-local function bodies fold without inlining; a body's external or
sparse Constant is never read from outside the model (issue #14, item 5).

Every folded model is checked by onnx and run in onnxruntime against the original.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from onnxfold import FoldOptions, InputError, optimize
from onnxfold.io.reader import load_model
from tests.support.cli import assert_one_error_line, run_cli
from tests.support.models import tensor, vinfo
from tests.support.running import fold_proto, run_ort

X = np.arange(12, dtype=np.float32).reshape(4, 3) / 7


def _const(name, arr):
    return helper.make_node("Constant", [], [name], value=tensor(f"{name}_v", arr))


def _chain():
    """Constant -> Add -> Mul -> Transpose -> Cast -> Cast, read by MatMul with the input."""
    return [_const("c", np.arange(6, dtype=np.float32).reshape(2, 3) / 3),
            _const("d", np.full((2, 3), 0.3, np.float32)),
            helper.make_node("Add", ["c", "d"], ["s"]),
            helper.make_node("Mul", ["s", "d"], ["m"]),
            helper.make_node("Transpose", ["m"], ["t"], perm=[1, 0], name="tr"),
            helper.make_node("Cast", ["t"], ["k"], to=TensorProto.DOUBLE),
            helper.make_node("Cast", ["k"], ["k2"], to=TensorProto.FLOAT),
            helper.make_node("MatMul", ["a", "k2"], ["b"])]


def _model(body, outputs=("b",), calls=None, graph_outputs=(("y", [4, 2]),), attributes=(),
           functions=()):
    opsets = [helper.make_opsetid("", 17)] + \
        [helper.make_opsetid("local", 1)] * any(n.domain == "local" for n in body)
    fn = helper.make_function("local", "f", ["a"], list(outputs), body, opsets,
                              attributes=list(attributes))
    calls = calls or [helper.make_node("f", ["x"], [name for name, _ in graph_outputs],
                                       domain="local")]
    graph = helper.make_graph(calls, "g", [vinfo("x", shape=[4, 3])],
                              [vinfo(name, shape=shape) for name, shape in graph_outputs])
    model = helper.make_model(graph, functions=[fn, *functions], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _run(model):
    return run_ort(model, {"x": X})


def _fold(model, **options):
    result = optimize(model, FoldOptions(strict=True, **options))
    folded = result.to_proto()
    onnx.checker.check_model(folded)
    return folded, result


def _body(folded, name="f"):
    return next(f for f in folded.functions if f.name == name)


def _ops(folded, name="f"):
    return [n.op_type for n in _body(folded, name).node]


def _same_outputs(original, folded):
    for want, got in zip(_run(original), _run(folded), strict=True):
        np.testing.assert_array_equal(got, want)  # bitwise: every fold here is numpy-exact


def test_a_constant_chain_in_a_body_folds_to_one_constant():
    original = _model(_chain())
    folded, result = _fold(original)
    assert _ops(folded) == ["Constant", "MatMul"]
    assert [n.op_type for n in folded.graph.node] == ["f"]  # the call stays: no inlining
    constant = _body(folded).node[0]
    assert list(constant.output) == ["k2"] and constant.attribute[0].name == "value"
    assert list(_body(folded).node[1].input) == ["a", "k2"]
    assert result.stats.folded_in_functions == 5 == result.stats.native
    assert result.stats.function_constants == 1 and result.stats.materialized == 0
    _same_outputs(original, folded)


def test_the_fallback_folds_in_bodies_with_the_function_s_opsets():
    original = _model(_chain())
    folded, result = _fold(original, disabled_rules={"Transpose"})
    assert _ops(folded) == ["Constant", "MatMul"]
    assert result.stats.via_fallback >= 1
    _same_outputs(original, folded)
    folded, _ = _fold(original, disabled_rules={"Transpose"}, fallback=False)
    assert _ops(folded) == ["Constant", "Transpose", "Cast", "Cast", "MatMul"]
    _same_outputs(original, folded)


def test_a_constant_passed_as_a_function_attribute_is_not_folded():
    value = helper.make_node("Constant", [], ["c"])
    value.attribute.append(helper.make_attribute_ref("value_float", AttributeProto.FLOAT))
    value.attribute[0].ref_attr_name = "alpha"
    body = [value, helper.make_node("Neg", ["c"], ["n"]),
            helper.make_node("Mul", ["a", "n"], ["b"])]
    call = helper.make_node("f", ["x"], ["y"], domain="local", alpha=2.5)
    original = _model(body, calls=[call], graph_outputs=(("y", [4, 3]),), attributes=["alpha"])
    folded, _ = _fold(original)
    assert _ops(folded) == ["Constant", "Neg", "Mul"]
    assert _body(folded).node[0].attribute[0].ref_attr_name == "alpha"
    _same_outputs(original, folded)


def test_a_node_with_an_attribute_reference_is_not_folded():
    alpha = helper.make_attribute_ref("alpha", AttributeProto.FLOAT)
    alpha.ref_attr_name = "alpha"  # onnx 1.19's helper (the declared minimum) leaves it empty
    leaky = helper.make_node("LeakyRelu", ["c"], ["r"])
    leaky.attribute.append(alpha)
    body = [_const("c", np.array([-1.0, 2.0, -3.0], np.float32)), leaky,
            helper.make_node("Mul", ["a", "r"], ["b"])]
    call = helper.make_node("f", ["x"], ["y"], domain="local", alpha=0.25)
    original = _model(body, calls=[call], graph_outputs=(("y", [4, 3]),), attributes=["alpha"])
    folded, result = _fold(original)
    assert _ops(folded) == ["Constant", "LeakyRelu", "Mul"]
    assert any("function attribute" in str(r) for _, _, r in result.stats.declined_nodes)
    _same_outputs(original, folded)


def test_a_random_op_in_a_body_is_not_folded():
    body = [helper.make_node("RandomNormal", [], ["r"], shape=[3], seed=1.0),
            _const("c", np.ones(3, np.float32)),
            helper.make_node("Add", ["r", "c"], ["s"]),
            helper.make_node("Mul", ["a", "s"], ["b"])]
    original = _model(body, graph_outputs=(("y", [4, 3]),))
    folded, result = _fold(original)
    assert _ops(folded) == ["RandomNormal", "Constant", "Add", "Mul"]
    assert result.stats.declined["non-deterministic op"] == 1
    assert _run(folded)[0].shape == (4, 3)


@pytest.mark.parametrize("keep", ["Transpose", "tr"])  # an op type, a node name
def test_keep_is_honoured_in_bodies(keep):
    original = _model(_chain())
    folded, result = _fold(original, keep=(keep,))
    assert _ops(folded) == ["Constant", "Transpose", "Cast", "Cast", "MatMul"]
    assert list(_body(folded).node[0].output) == ["m"]  # Add and Mul folded above it
    assert result.stats.declined["kept (--keep)"] == 1
    _same_outputs(original, folded)


def test_a_function_output_that_becomes_constant_keeps_its_name():
    body = [_const("c", np.array([1.0, 2.0, 4.0], np.float32)),
            helper.make_node("Neg", ["c"], ["k"]),
            helper.make_node("Mul", ["a", "k"], ["b"])]
    original = _model(body, outputs=("b", "k"), graph_outputs=(("y", [4, 3]), ("z", [3])))
    folded, _ = _fold(original)
    function = _body(folded)
    assert list(function.output) == ["b", "k"]
    assert _ops(folded) == ["Constant", "Mul"]
    assert list(function.node[0].output) == ["k"]
    _same_outputs(original, folded)


def test_identities_of_a_constant_read_it_instead_of_copies():
    body = [_const("w", np.array([1.0, -2.0, 3.0], np.float32)),
            helper.make_node("Identity", ["w"], ["i1"]),
            helper.make_node("Identity", ["w"], ["i2"]),
            helper.make_node("Mul", ["a", "i1"], ["m"]),
            helper.make_node("Add", ["m", "i2"], ["b"])]
    original = _model(body, graph_outputs=(("y", [4, 3]),))
    folded, _ = _fold(original)
    assert _ops(folded) == ["Constant", "Mul", "Add"]  # one weight, not three
    assert [list(n.input)[1] for n in _body(folded).node[1:]] == ["w", "w"]
    _same_outputs(original, folded)


def test_a_function_called_twice():
    calls = [helper.make_node("f", ["x"], ["h"], domain="local"),
             helper.make_node("Neg", ["x"], ["nx"]),
             helper.make_node("f", ["nx"], ["y"], domain="local"),
             helper.make_node("Add", ["y", "h"], ["y2"])]
    original = _model(_chain(), calls=calls, graph_outputs=(("y2", [4, 2]),))
    folded, _ = _fold(original)
    assert _ops(folded) == ["Constant", "MatMul"]
    assert [n.op_type for n in folded.graph.node] == ["f", "Neg", "f", "Add"]
    _same_outputs(original, folded)


def test_a_call_of_another_local_function_is_left_alone():
    inner = helper.make_function("local", "g", ["p"], ["q"], [
        _const("w", np.full(3, 2.0, np.float32)),
        helper.make_node("Neg", ["w"], ["nw"]),
        helper.make_node("Mul", ["p", "nw"], ["q"])], [helper.make_opsetid("", 17)])
    body = [_const("c", np.array([1.0, 2.0, 3.0], np.float32)),
            helper.make_node("g", ["c"], ["gc"], domain="local"),
            helper.make_node("Mul", ["a", "gc"], ["b"])]
    original = _model(body, graph_outputs=(("y", [4, 3]),), functions=[inner])
    folded, _ = _fold(original)
    assert _ops(folded) == ["Constant", "g", "Mul"]  # the call stays
    assert _ops(folded, "g") == ["Constant", "Mul"]  # the callee's own body folds
    _same_outputs(original, folded)


def test_a_large_result_in_a_body_is_refused_for_growth():
    body = [_const("one", np.array([1.5], np.float32)),
            _const("shape", np.array([512, 1024], np.int64)),
            helper.make_node("Expand", ["one", "shape"], ["big"]),
            helper.make_node("ReduceSum", ["a"], ["s"], keepdims=0),
            helper.make_node("Mul", ["s", "big"], ["b"])]
    original = _model(body, graph_outputs=(("y", [512, 1024]),))
    folded, result = _fold(original)
    assert _ops(folded) == ["Constant", "Constant", "Expand", "ReduceSum", "Mul"]
    assert result.stats.declined["growth"] == 1
    _same_outputs(original, folded)
    grown, _ = _fold(original, growth_factor=None, expansion_min_bytes=4 << 20)
    assert _ops(grown) == ["Constant", "ReduceSum", "Mul"]
    _same_outputs(original, grown)


def test_a_copy_of_a_weight_still_read_in_the_body_is_refused():
    weight = np.arange(3 * 3 * 8, dtype=np.float32).reshape(3, 24)
    body = [_const("w", weight),
            helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
            helper.make_node("MatMul", ["a", "w"], ["aw"]),
            helper.make_node("MatMul", ["aw", "wt"], ["b"])]
    original = _model(body, graph_outputs=(("y", [4, 3]),))
    folded, result = _fold(original)
    assert "Transpose" in _ops(folded)
    assert result.stats.declined["growth"] == 1
    _same_outputs(original, folded)


def test_a_failing_body_fold_is_skipped_and_reported(monkeypatch):
    from onnxfold.fold import function_bodies

    def broken(*args, **kwargs):
        raise ValueError("boom")

    monkeypatch.setattr(function_bodies, "fold_function", broken)
    original = _model(_chain())
    result = optimize(original)  # not strict: the step is left out, the run goes on
    assert any("fold_functions" in step and "boom" in step
               for step in result.report.skipped_steps)
    folded = result.to_proto()
    assert _ops(folded) == [n.op_type for n in original.functions[0].node]
    _same_outputs(original, folded)


def test_inline_functions_still_inlines_then_folds():
    original = _model(_chain())
    folded, _ = _fold(original, inline_functions=True)
    assert not folded.functions
    assert [n.op_type for n in folded.graph.node] == ["MatMul"]
    _same_outputs(original, folded)


def test_optimize_on_the_command_line(tmp_path):
    original = _model(_chain())
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(original, src)
    done = run_cli("optimize", src, "-o", out, "--strict")
    assert done.returncode == 0, done.stderr
    assert "functions    5 folded in local function bodies (1 Constant nodes written)" \
        in done.stdout
    folded = onnx.load(str(out))
    onnx.checker.check_model(folded)
    assert _ops(folded) == ["Constant", "MatMul"]
    _same_outputs(original, folded)


def _function_model(body, inputs=("a",), outputs=("b",)):
    fn = helper.make_function("local", "f", list(inputs), list(outputs), body,
                              [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("f", ["x"], ["y"], domain="local")], "g",
                              [vinfo("x", shape=[4, 3])], [vinfo("y", shape=[4, 3])])
    model = helper.make_model(graph, functions=[fn], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    model.ir_version = 8
    return model


def _external(name, location, dtype, count):
    t = onnx.TensorProto(name=name, data_type=dtype, dims=[count])
    t.data_location = onnx.TensorProto.EXTERNAL
    for key, value in {"location": location, "offset": "0",
                       "length": str(count * np.dtype(helper.tensor_dtype_to_np_dtype(
                           dtype)).itemsize)}.items():
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def test_an_external_constant_in_a_body_is_never_read(tmp_path):
    """A body's external data location can name any file, an absolute path among them, and
    the checker (which ``--skip-check`` turns off) does not look into bodies: refused at load,
    unread; and the body folder never takes such a Constant as a source (a model built in
    memory)."""
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"TOPSECRET-BYTES!")
    body = [helper.make_node("Constant", [], ["c"], value=_external(
                "c_v", str(secret), TensorProto.UINT8, 16)),
            helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
            helper.make_node("ReduceSum", ["cf"], ["s"], keepdims=0),
            helper.make_node("Add", ["a", "s"], ["b"])]
    (tmp_path / "model").mkdir()
    path = tmp_path / "model" / "m.onnx"
    onnx.save(_function_model(body), path)
    with pytest.raises(InputError, match="stored as external data"):
        load_model(path, check=False)  # --skip-check
    model = ir.serde.deserialize_model(onnx.load(str(path), load_external_data=False))
    folded = optimize(model, FoldOptions(strict=True)).to_proto()
    fn = folded.functions[0]
    assert [n.op_type for n in fn.node] == ["Constant", "Cast", "ReduceSum", "Add"]
    assert fn.node[0].attribute[0].t.data_location == onnx.TensorProto.EXTERNAL


def test_a_sparse_constant_in_a_body(tmp_path):
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([5.0], np.float32)),
                                       numpy_helper.from_array(np.array([1], np.int64)), [3])
    body = [helper.make_node("Constant", [], ["c"], sparse_value=sparse),
            helper.make_node("Neg", ["c"], ["n"]), helper.make_node("Add", ["a", "n"], ["b"])]
    proto = _function_model(body)
    _, _, out = fold_proto(proto, tmp_path)
    # not the original in onnxruntime: a sparse Constant in a function body makes its session
    # creation crash now and then (a segfault, seen under pytest-xdist); ours is dense
    x = np.ones((4, 3), np.float32)
    np.testing.assert_array_equal(run_ort(out, {"x": x})[0], x - np.array([0, 5, 0], np.float32))
    assert not any(a.name == "sparse_value" for f in onnx.load(out).functions for n in f.node
                   for a in n.attribute)


def test_a_body_constant_with_external_data_is_refused(tmp_path, monkeypatch):
    """A body's external data would be resolved against the working directory, and the data
    files' checks and the writer cover the graphs only: refused, in one line, before anything
    is read (from a file and from memory)."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "w.bin").write_bytes(np.arange(3, dtype=np.float32).tobytes())
    body = [helper.make_node("Constant", [], ["c"], value=_external(
                "c_v", "w.bin", TensorProto.FLOAT, 3)),
            helper.make_node("Add", ["a", "c"], ["b"])]
    path = tmp_path / "model" / "m.onnx"
    onnx.save(_function_model(body), path)
    monkeypatch.chdir(tmp_path)  # not the model's directory
    for given in (str(path), onnx.load(str(path), load_external_data=False)):
        with pytest.raises(InputError, match="local function body 'f' is stored as external"):
            optimize(given, FoldOptions(strict=True))
    done = run_cli("optimize", path, "-o", tmp_path / "out.onnx")
    assert_one_error_line(done)
    assert done.stderr.count("\n") == 1 and not (tmp_path / "out.onnx").exists()
