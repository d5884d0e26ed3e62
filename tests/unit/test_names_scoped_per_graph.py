"""Names as ONNX scopes them: a subgraph may define a name its holder's outputs, a later node of
the enclosing graph, or a sibling subgraph define too (optimum's merged decoders name an If's
outputs and its branches' values alike). Such a model loads, folds inside its branches, keeps
every declared output type, stays valid for onnx's checker, and computes what the original
computes in onnxruntime on both branches. Before, it was refused on load ("defined twice"), and
once loaded, one branch's value took the other's inferred shape: optimum's with-past branch's
empty constant ``[0, 4, 1, 16]`` became the declared shape of the other branch's output."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxfold
from tests.support.models import constant_node, make_model, tensor, vinfo


def _declared(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def _merged_decoder(outputs=("logits", "present")):
    """optimum's layout in small: an If on ``use_cache_branch`` whose branches both define
    ``present`` (the If's own output, as ``outputs`` names them by default) and ``hidden``;
    the with-past branch returns an empty constant ``[0, 4]`` for ``present``, the other a
    computed ``[batch, 4]``, each through a foldable chain (a Transpose of a Transpose of a
    weight)."""
    w = np.arange(16, dtype=np.float32).reshape(4, 4)

    def branch(name, empty):
        nodes = [helper.make_node("Transpose", ["W"], ["wt"], perm=[1, 0]),
                 helper.make_node("Transpose", ["wt"], ["w2"], perm=[1, 0]),
                 helper.make_node("MatMul", ["x", "w2"], ["hidden"]),
                 helper.make_node("Relu", ["hidden"], ["logits"])]
        if empty:
            nodes.append(constant_node("present", np.zeros((0, 4), np.float32)))
        else:
            nodes.append(helper.make_node("Neg", ["hidden"], ["present"]))
        return helper.make_graph(nodes, name, [], [vinfo("logits", shape=["batch", 4]),
                                                   vinfo("present", shape=["batch", 4])])

    node = helper.make_node("If", ["use_cache_branch"], list(outputs),
                            then_branch=branch("with_past", True),
                            else_branch=branch("no_past", False))
    return make_model([node], [vinfo("x", shape=["batch", 4]),
                               vinfo("use_cache_branch", TensorProto.BOOL, [1])],
                      [vinfo(name, shape=["batch", 4]) for name in outputs], [tensor("W", w)])


def _later_outer_name():
    """A branch defines ``late``, which the enclosing graph defines after the If (not visible
    in the branch)."""
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["late"])], "then", [],
                             [vinfo("late", shape=["batch", 4])])
    other = helper.make_graph([helper.make_node("Relu", ["x"], ["late"])], "else", [],
                              [vinfo("late", shape=["batch", 4])])
    return make_model([helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other),
                       helper.make_node("Abs", ["z"], ["late"]),
                       helper.make_node("Add", ["late", "x"], ["y"])],
                      [vinfo("x", shape=["batch", 4]), vinfo("c", TensorProto.BOOL, [])],
                      [vinfo("y", shape=["batch", 4])])


def _loop_body_names_its_output():
    """A Loop whose body defines ``acc`` (the Loop's own output name) and ``x`` is carried."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "one"], ["acc"]),
         constant_node("one", np.ones((1, 4), np.float32))],
        "body", [vinfo("i", TensorProto.INT64, []), vinfo("cond_in", TensorProto.BOOL, []),
                 vinfo("acc_in", shape=["batch", 4])],
        [vinfo("cond_out", TensorProto.BOOL, []), vinfo("acc", shape=["batch", 4])])
    body.node.insert(1, body.node.pop())  # "one" defined before it is read
    return make_model([helper.make_node("Loop", ["n", "", "x"], ["acc"], body=body)],
                      [vinfo("x", shape=["batch", 4])], [vinfo("acc", shape=["batch", 4])],
                      [tensor("n", np.array(3, np.int64))])


def _run(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _folded(model):
    return onnxfold.optimize(model).to_proto()


@pytest.mark.parametrize("outputs", [("logits", "present"), ("y", "p")],
                         ids=["as-optimum-names-them", "branches-alike-only"])
def test_a_merged_decoder_folds_in_its_branches_and_keeps_its_outputs(outputs):
    model = _merged_decoder(outputs)
    onnx.checker.check_model(model, full_check=True)  # the layout is valid ONNX
    folded = _folded(model)
    onnx.checker.check_model(folded, full_check=True)
    assert [_declared(o) for o in folded.graph.output] == [["batch", 4], ["batch", 4]]
    branches = {a.name: a.g for a in folded.graph.node[0].attribute}
    assert [_declared(o) for o in branches["else_branch"].output] == [["batch", 4], ["batch", 4]]
    for branch in branches.values():  # the Transposes folded inside each branch
        assert [n.op_type for n in branch.node if n.op_type != "Constant"].count("Transpose") == 0
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    for cache in (True, False):
        feeds = {"x": x, "use_cache_branch": np.array([cache])}
        for a, b in zip(_run(model, feeds), _run(folded, feeds), strict=True):
            assert a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("build", [_later_outer_name, _loop_body_names_its_output])
def test_a_name_invisible_where_it_is_defined_again_loads_and_folds(build):
    model = build()
    onnx.checker.check_model(model, full_check=True)
    folded = _folded(model)
    onnx.checker.check_model(folded, full_check=True)
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    cases = [{"x": x, "c": np.array(c)} for c in (True, False)] if build is _later_outer_name \
        else [{"x": x}]
    for feeds in cases:
        for a, b in zip(_run(model, feeds), _run(folded, feeds), strict=True):
            assert a.tobytes() == b.tobytes()


def test_the_main_graph_keeps_every_name():
    """Only values inside subgraphs are renamed; the graph's inputs and outputs, which
    clients read, keep theirs."""
    folded = _folded(_merged_decoder())
    assert [i.name for i in folded.graph.input] == ["x", "use_cache_branch"]
    assert [o.name for o in folded.graph.output] == ["logits", "present"]
    assert list(folded.graph.node[0].output) == ["logits", "present"]


@pytest.mark.parametrize("seed", [0, 5, 10])  # 5, 10: random flags were true twice
def test_the_check_runs_both_branches_a_flag_chooses(tmp_path, seed):
    """A boolean input of one element (optimum's ``use_cache_branch``) takes each value in
    turn over the input sets, so two sets run both branches: a model whose no-past branch
    alone differs fails the comparison (random flags could take one value on every set)."""
    model = _merged_decoder()
    wrong = _merged_decoder()
    branch = next(a.g for a in wrong.graph.node[0].attribute if a.name == "else_branch")
    next(n for n in branch.node if n.op_type == "Neg").op_type = "Relu"
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(model, a)
    onnx.save(wrong, b)
    assert not onnxfold.compare(str(a), str(b), n=2, seed=seed)
    assert onnxfold.compare(str(a), str(a), n=2, seed=seed)
