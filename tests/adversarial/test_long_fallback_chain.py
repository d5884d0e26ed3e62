"""A long chain of ops without a native rule folds in one onnxruntime session, in time linear
in its length: each node joining the batch is checked against what the batch computes so far,
not against every node of it again (10,000 nodes took 17 s that way)."""

from __future__ import annotations

import time

import numpy as np
from onnx import TensorProto, helper

from onnxfold.declare.catalogue import load_catalogue
from onnxfold.fold.folder import fold_model
from onnxfold.io.reader import model_from_proto
from tests.support.models import make_model, tensor, vinfo

LENGTH = 10_000
SECONDS = 8  # a generous bound: about one second here


def test_a_chain_of_ten_thousand_fallback_nodes_folds_in_one_session_in_seconds():
    c = np.array([0.5, 1.0, 2.0, 3.0], np.float32)  # Elu keeps positive values as they are
    nodes = [helper.make_node("Elu", [f"v{i}"], [f"v{i + 1}"]) for i in range(LENGTH)]
    nodes.append(helper.make_node("Add", ["x", f"v{LENGTH}"], ["y"]))
    proto = make_model(nodes, [vinfo("x", shape=[4])], [vinfo("y", TensorProto.FLOAT, [4])],
                       [tensor("v0", c)])
    model = model_from_proto(proto, check=False)
    started = time.process_time()
    counts = fold_model(model, load_catalogue())
    assert time.process_time() - started < SECONDS
    assert (counts.folded, counts.via_fallback, counts.fallback_sessions) == (LENGTH, LENGTH, 1)
    add = next(n for n in model.graph if n.op_type == "Add")  # (the Elus are dead code now)
    folded = add.inputs[1]
    assert folded is not None and folded.const_value is not None
    np.testing.assert_array_equal(folded.const_value.numpy(), c)
