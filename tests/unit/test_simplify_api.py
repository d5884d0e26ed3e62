"""``onnxfold.app.simplify``, onnxsim's habits: ``(ModelProto, ok)``, dict shapes, Python words."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold import FoldOptions
from onnxfold.errors import InputError
from tests.support.models import make_model, reshape_to_rows_of_thirteen


def _foldable():
    """y = x + (c * 2): the product folds; x is [batch, 4]."""
    f = TensorProto.FLOAT
    return make_model([helper.make_node("Mul", ["c", "two"], ["c2"]),
                   helper.make_node("Add", ["x", "c2"], ["y"])],
                  [helper.make_tensor_value_info("x", f, ["batch", 4])],
                  [helper.make_tensor_value_info("y", f, ["batch", 4])],
                  [numpy_helper.from_array(np.arange(4, dtype=np.float32), "c"),
                   numpy_helper.from_array(np.float32(2), "two")])


def test_an_honest_fold_checks_ok():
    folded, ok = onnxfold.simplify(_foldable(), check_n=3)
    assert ok and isinstance(folded, onnx.ModelProto)
    assert [n.op_type for n in folded.graph.node] == ["Add"]


def test_a_failed_check_returns_false_instead_of_raising():
    """An output drawn at random differs between any two runs: the check must fail."""
    f = TensorProto.FLOAT
    model = make_model([helper.make_node("Mul", ["c", "two"], ["c2"]),
                    helper.make_node("RandomUniformLike", ["x"], ["noise"]),
                    helper.make_node("Add", ["noise", "c2"], ["y"])],
                   [helper.make_tensor_value_info("x", f, [2, 4])],
                   [helper.make_tensor_value_info("y", f, [2, 4])],
                   [numpy_helper.from_array(np.arange(4, dtype=np.float32), "c"),
                    numpy_helper.from_array(np.float32(2), "two")])
    folded, ok = onnxfold.simplify(model, check_n=2)
    assert ok is False and isinstance(folded, onnx.ModelProto)


@pytest.mark.parametrize("keyword", ["input_shapes", "overwrite_input_shapes"])
def test_dict_shapes_fix_the_inputs_and_the_check_uses_them(keyword):
    folded, ok = onnxfold.simplify(_foldable(), check_n=1, **{keyword: {"x": [3, 4]}})
    assert ok
    dims = folded.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [3, 4]


def test_dims_bind_the_check_and_messages_speak_python():
    assert onnxfold.simplify(_foldable(), check_n=1, dims={"batch": 5})[1]
    with pytest.raises(InputError) as e:
        onnxfold.simplify(_foldable(), check_n=1, dims={"nope": 5})
    assert str(e.value).startswith("dims[nope]: no input") and "--dim" not in str(e.value)
    with pytest.raises(InputError, match=r"^input_shapes\[nope\]: no such input"):
        onnxfold.simplify(_foldable(), input_shapes={"nope": [1, 4]})


def test_the_result_repr_is_one_short_line():
    text = repr(onnxfold.optimize(_foldable()))
    assert text.startswith("<OptimizeResult nodes 2 -> 1") and "\n" not in text
    assert len(text) < 120


def test_a_check_that_cannot_run_names_the_keyword_to_use():
    """Reshape to [-1, 1031] needs a multiple of 1031 elements: no guessed dim runs."""
    model = reshape_to_rows_of_thirteen(1031)
    with pytest.raises(InputError) as e:
        onnxfold.simplify(model, check_n=1)
    assert "dims={NAME: VALUE}" in str(e.value) and "--" not in str(e.value)
    assert onnxfold.simplify(model, check_n=1, dims={"n": 2062})[1]


def test_a_path_with_external_weights_and_fixed_shapes_checks(tmp_path):
    """The check's reference (the input with the same shapes fixed) carries the weights the
    model keeps in its .data file."""
    model = _foldable()
    big = np.arange(4096, dtype=np.float32).reshape(1024, 4)
    model.graph.initializer.append(numpy_helper.from_array(big, "big"))
    model.graph.node.append(helper.make_node("MatMul", ["y", "big_t"], ["z"]))
    model.graph.node.insert(0, helper.make_node("Transpose", ["big"], ["big_t"]))
    model.graph.output[0].CopyFrom(
        helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 1024]))
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, size_threshold=1024,
              location="m.onnx.data")
    assert (tmp_path / "m.onnx.data").exists()
    folded, ok = onnxfold.simplify(str(path), check_n=1, overwrite_input_shapes={"x": [2, 4]})
    assert ok and [d.dim_value for d in folded.graph.input[0].type.tensor_type.shape.dim] == [
        2, 4]


def test_optimize_takes_shapes_as_dicts_and_refuses_what_it_would_misread(tmp_path):
    """Shapes as onnxsim's dicts in optimize and FoldOptions; check=3 (an int, not onnx's
    checker switch) and unknown keywords are one-line errors naming where the meaning is."""
    from onnxfold import FoldOptions

    path = tmp_path / "m.onnx"
    nodes = [helper.make_node("Add", ["x", "one"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["n", 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    result = onnxfold.optimize(str(path), input_shapes={"x": [2, 4]})
    assert list(result.model.graph.inputs[0].shape) == [2, 4]
    assert FoldOptions(input_shapes={"x": [2, None]}).input_shapes == ("x:2,?",)
    with pytest.raises(InputError, match=r"check=3: .*simplify\(model, check_n=3\)"):
        onnxfold.optimize(str(path), check=3)
    with pytest.raises(InputError, match=r"no keyword check_n .*simplify"):
        onnxfold.optimize(str(path), check_n=3)
    with pytest.raises(InputError, match=r"no keyword input_shape .*input_shapes="):
        onnxfold.optimize(str(path), input_shape={"x": [2, 4]})
    assert onnxfold.optimize(str(path), fold_qdq=True).model is not None


def _annotated():
    """``_foldable`` with a doc string on its Mul (what ``strip_metadata`` drops)."""
    model = _foldable()
    model.graph.node[0].doc_string = "exporter's note"
    return model


# options that each change the folded model of ``_annotated``: every one must reach the fold
# whether simplify or optimize is given it
CHANGING = {
    "input_shapes": FoldOptions(input_shapes=("x:2,4",)),
    "keep": FoldOptions(keep=("Mul",)),
    "disabled_rules": FoldOptions(disabled_rules={"Mul"}, fallback=False),
    "target_opset": FoldOptions(target_opset=18),
    "strip_metadata": FoldOptions(keep=("Mul",), strip_metadata="all"),
}


@pytest.mark.parametrize("name", sorted(CHANGING))
def test_simplify_honours_every_option_as_optimize_does(name):
    """``simplify(m, options=O)`` and ``simplify(m, **fields of O)`` give the very bytes
    ``optimize(m, O)`` gives, and those differ from the default fold's (so the option
    reached the fold; ``options=FoldOptions(input_shapes=...)`` was dropped once)."""
    options = CHANGING[name]
    want = onnxfold.optimize(_annotated(), options).to_proto().SerializeToString()
    assert want != onnxfold.simplify(_annotated())[0].SerializeToString(), name
    assert onnxfold.simplify(_annotated(), options=options)[0].SerializeToString() == want
    given = {f.name: getattr(options, f.name) for f in dataclasses.fields(FoldOptions)
             if getattr(options, f.name) != getattr(FoldOptions(), f.name)}
    assert onnxfold.simplify(_annotated(), **given)[0].SerializeToString() == want
    assert onnxfold.optimize(_annotated(), **given).to_proto().SerializeToString() == want


def test_the_options_input_shapes_fix_the_model_and_the_check():
    """The options' own shapes count in simplify (the check runs the original with them);
    ``input_shapes=`` replaces them, as it does in optimize."""
    folded, ok = onnxfold.simplify(_foldable(), check_n=1,
                                   options=FoldOptions(input_shapes=("x:2,4",)))
    assert ok and [d.dim_value for d in folded.graph.input[0].type.tensor_type.shape.dim] == [
        2, 4]
    replaced = FoldOptions(input_shapes=("x:2,4",))
    for folded in (onnxfold.simplify(_foldable(), input_shapes={"x": [3, 4]},
                                     options=replaced)[0],
                   onnxfold.optimize(_foldable(), replaced, input_shapes={"x": [3, 4]})
                   .to_proto()):
        assert [d.dim_value for d in folded.graph.input[0].type.tensor_type.shape.dim] == [
            3, 4]


def test_simplify_takes_optimize_s_keywords_and_refuses_the_same_mistakes():
    """The same keywords, read by the same code: ``check`` (onnx's checker), any FoldOptions
    field, and an unknown keyword named with the nearest one."""
    optimize_keywords = set(inspect.signature(onnxfold.optimize).parameters)
    simplify_keywords = set(inspect.signature(onnxfold.simplify).parameters)
    assert {"options", "check", "input_shapes", "fold_options"} <= \
        optimize_keywords & simplify_keywords
    with pytest.raises(InputError, match=r"^simplify\(\) has no keyword fold_qbq "
                                         r"\(did you mean fold_qdq=\?\)"):
        onnxfold.simplify(_foldable(), fold_qbq=True)
    with pytest.raises(InputError, match=r"check=3: "):
        onnxfold.simplify(_foldable(), check=3)
