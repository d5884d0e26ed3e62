"""A value read only inside the subgraph of a node that is gone (an ``If`` folded to its
result, then pruned) is dead: onnx-ir still lists the subgraph's nodes among its readers, and
taking that at its word left the producer, or the constant the fold made of it, in the
output."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto
from onnx import helper as h

from onnxfold.pipeline.passes import remove_dead_nodes
from tests.support.running import fold_proto, random_feeds, run_ort
from tools.fuzz import graphgen


def _branch(name: str, op: str, reads: str, dtype: int = TensorProto.FLOAT) -> onnx.GraphProto:
    return h.make_graph([h.make_node(op, [reads], [f"{name}_out"])], name, [],
                        [h.make_tensor_value_info(f"{name}_out", dtype, None)])


def test_an_outer_value_read_only_in_a_removed_subgraph_is_removed_with_its_producer():
    nodes = [h.make_node("Relu", ["x"], ["v"], name="relu"),
             h.make_node("If", ["cond"], ["unused"], name="if",
                         then_branch=_branch("then", "Abs", "v"),
                         else_branch=_branch("else", "Neg", "v")),
             h.make_node("Identity", ["x"], ["y"], name="identity")]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                                      h.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = ir.from_proto(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    assert remove_dead_nodes(model) == 2
    assert [node.op_type for node in model.graph] == ["Identity"]


def test_the_fuzz_graph_that_left_a_dead_cast_folds_to_live_nodes_only(tmp_path):
    """Fuzz seed 1350: a float16 Cast read only inside an ``If`` that folds. The fold declined
    the Cast (its reader in the branch is an Abs); once the ``If`` was pruned the Cast still
    counted its Abs as a reader, and stayed (or, folded in a later round, stayed as an
    initializer nothing reads)."""
    original = graphgen.generate(1350).model
    folded, _, _ = fold_proto(original, tmp_path)
    read = {name for n in folded.graph.node for name in n.input}
    outputs = {o.name for o in folded.graph.output}
    assert all(o in read or o in outputs for n in folded.graph.node for o in n.output)
    inputs = {i.name for i in folded.graph.input}
    assert all(t.name in read | inputs | outputs for t in folded.graph.initializer)
    assert "Cast" not in [n.op_type for n in folded.graph.node]
    feeds = random_feeds(str(tmp_path / "in.onnx"))
    for expected, got in zip(run_ort(original, feeds), run_ort(folded, feeds), strict=True):
        np.testing.assert_array_equal(expected, got)
