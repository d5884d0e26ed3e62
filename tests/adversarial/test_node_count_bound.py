"""An input with more nodes than the documented bound is refused at once, in one line.

A 1.2 MB file holds 600,000 empty nodes; read with ``--skip-check`` (onnx's checker would refuse
the empty op types) it cost minutes and gigabytes. The bound (``onnxfold.io.node_bound``,
500,000 nodes) counts the main graph, subgraphs and function bodies; ``ONNXFOLD_MAX_NODES``
moves it.
"""

from __future__ import annotations

import os

import onnx
import pytest
from onnx import TensorProto, helper

import onnxfold
from onnxfold.errors import InputError
from tests.support.cli import Finished, assert_ok, assert_one_error_line, run_cli

LIMIT = 30  # seconds


def _run(*args, max_nodes: str | None = None) -> Finished:
    """The CLI with ``ONNXFOLD_MAX_NODES`` unset or set to ``max_nodes``, killed after LIMIT
    seconds."""
    env = {k: v for k, v in os.environ.items() if k != "ONNXFOLD_MAX_NODES"}
    if max_nodes is not None:
        env["ONNXFOLD_MAX_NODES"] = max_nodes
    return run_cli(*args, timeout=LIMIT, env=env)


def _chain(count: int) -> onnx.ModelProto:
    """``count`` Relu nodes in a chain."""
    nodes = [helper.make_node("Relu", [f"v{k - 1}" if k else "x"], [f"v{k}"])
             for k in range(count)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2])], [helper.make_tensor_value_info(
            f"v{count - 1}", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_six_hundred_thousand_empty_nodes_are_refused_quickly(tmp_path):
    model = _chain(1)
    model.graph.node.extend(onnx.NodeProto() for _ in range(600_000))
    source = tmp_path / "empty.onnx"
    onnx.save(model, source)
    assert source.stat().st_size < 2 << 20
    done = _run("optimize", source, "--skip-check", "-o", tmp_path / "o.onnx")
    assert_one_error_line(done, "more than 500,000 nodes", "ONNXFOLD_MAX_NODES")
    assert not (tmp_path / "o.onnx").exists()


def test_the_bound_can_be_moved(tmp_path):
    source, out = tmp_path / "chain.onnx", tmp_path / "out.onnx"
    onnx.save(_chain(300), source)
    assert_one_error_line(_run("optimize", source, "-o", out, max_nodes="299"),
                          "more than 299 nodes")
    assert_ok(_run("optimize", source, "-o", out, max_nodes="300"))


@pytest.mark.parametrize("value", ["many", "-5", "0", "1e6", "٣"])
def test_a_bad_bound_is_a_one_line_error(tmp_path, value):
    source = tmp_path / "chain.onnx"
    onnx.save(_chain(3), source)
    done = _run("optimize", source, "-o", tmp_path / "o.onnx", max_nodes=value)
    assert_one_error_line(done, "ONNXFOLD_MAX_NODES")


def test_subgraphs_and_function_bodies_count(tmp_path, monkeypatch):
    """8 nodes in the graph, 5 in an If's branches, 4 in a function body: 17 in all."""
    branch = helper.make_graph([helper.make_node("Identity", ["x"], [f"b{k}"]) for k in range(2)]
                               + [helper.make_node("Identity", ["x"], ["r"])], "then", [],
                               [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["s"]),
                               helper.make_node("Identity", ["s"], ["r2"])], "else", [],
                              [helper.make_tensor_value_info("r2", TensorProto.FLOAT, [2])])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    function = helper.make_function("local", "f", ["a"], ["b"], [
        helper.make_node("Relu", ["a"], ["t0"]), helper.make_node("Relu", ["t0"], ["t1"]),
        helper.make_node("Relu", ["t1"], ["t2"]), helper.make_node("Relu", ["t2"], ["b"])],
        opsets[:1])
    nodes = [helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
                 "c", TensorProto.BOOL, [], [True])),
             helper.make_node("If", ["c"], ["i"], then_branch=branch, else_branch=other),
             helper.make_node("f", ["i"], ["y0"], domain="local")]
    nodes += [helper.make_node("Relu", [f"y{k}"], [f"y{k + 1}"]) for k in range(5)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y5", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, functions=[function], opset_imports=opsets)
    onnx.checker.check_model(model)
    monkeypatch.setenv("ONNXFOLD_MAX_NODES", "16")
    with pytest.raises(InputError, match="more than 16 nodes"):
        onnxfold.optimize(model)
    monkeypatch.setenv("ONNXFOLD_MAX_NODES", "17")
    onnxfold.optimize(model)
