"""A rewrite's new nodes keep the provenance of the node they replace (dynamo's module path
and source line), so a profile of the optimized model still points at the code (with
``--keep-metadata``: by default that metadata is dropped from the output)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from onnxfold import optimize

NAMESPACE = "model.layers.0.attn: Attention"


def _two_transposes() -> onnx.ModelProto:
    first = helper.make_node("Transpose", ["x"], ["t"], name="first", perm=[1, 0, 2])
    second = helper.make_node("Transpose", ["t"], ["z"], name="second", perm=[0, 2, 1])
    for key, value in (("namespace", NAMESPACE), ("pkg.torch.onnx.stack_trace", "model.py:7")):
        entry = second.metadata_props.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [first, second], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 4, 2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_built_node_carries_the_matched_nodes_metadata() -> None:
    model = optimize(_two_transposes(), strip_metadata=None).to_proto()  # --keep-metadata
    (node,) = model.graph.node
    assert node.op_type == "Transpose"  # the two became one
    assert {p.key: p.value for p in node.metadata_props} == {
        "namespace": NAMESPACE, "pkg.torch.onnx.stack_trace": "model.py:7"}


def test_a_node_without_metadata_gives_none() -> None:
    bare = _two_transposes()
    del bare.graph.node[1].metadata_props[:]
    (node,) = optimize(bare).to_proto().graph.node
    assert node.op_type == "Transpose" and not node.metadata_props
