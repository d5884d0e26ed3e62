"""Equal folded constants share one initializer (``fold/materialize.py``'s ``_Stored``, and
the ``dedupe_initializers`` cleanup for an IR 3 model, whose fold lists every stored tensor
among the inputs): equal means the same dtype, shape and bits, so ``-0.0`` and ``+0.0`` stay
apart; a graph output keeps its name (an equal fold may read it)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.support.models import make_model, tensor, vinfo
from tests.support.running import assert_same_bits, fold_proto, run_ort


def _generated(fills, ir_version=8, extra_output=False):
    """Sum of x [2, 8] * w_i for each fill, each w_i = ConstantOfShape([2, 8], fill_i) (a
    weight generated in the graph) -> y."""
    nodes = []
    for i, fill in enumerate(fills):
        nodes += [helper.make_node("ConstantOfShape", ["shape"], [f"w{i}"],
                                   value=helper.make_tensor("v", TensorProto.FLOAT, [1], [fill])),
                  helper.make_node("Mul", ["x", f"w{i}"], [f"m{i}"])]
    nodes.append(helper.make_node("Sum", [f"m{i}" for i in range(len(fills))], ["y"]))
    outputs = [vinfo("y", shape=[2, 8])] + ([vinfo("w0", shape=[2, 8])] if extra_output else [])
    model = make_model(nodes, [vinfo("x", shape=[2, 8])], outputs,
                       [tensor("shape", np.asarray([2, 8], np.int64))], ir_version=ir_version)
    if ir_version < 4:
        model.graph.input.append(vinfo("shape", TensorProto.INT64, [2]))
    return model


def _folded_weights(folded):
    return [t for t in folded.graph.initializer if t.dims == [2, 8]]


@pytest.mark.parametrize("ir_version", [3, 8])
def test_equal_folded_weights_are_one_initializer(tmp_path, ir_version):
    model = _generated([0.5, 0.5, 0.5, 2.0], ir_version)
    folded, _, _ = fold_proto(model, tmp_path)
    assert len(_folded_weights(folded)) == 2  # 0.5 once, 2.0 once
    inputs = {i.name for i in folded.graph.input}
    assert all(t.name in inputs for t in _folded_weights(folded)) == (ir_version < 4)
    assert_same_bits(model, folded, {"x": np.arange(16, dtype=np.float32).reshape(2, 8)})


def test_equal_values_of_other_bits_stay_apart(tmp_path):
    model = _generated([0.0, -0.0, np.nan, np.nan])  # 0.0 == -0.0 but not bitwise; NaN != NaN
    folded, _, _ = fold_proto(model, tmp_path)
    assert len(_folded_weights(folded)) == 3


def test_a_graph_output_keeps_its_name_and_the_equal_fold_reads_it(tmp_path):
    model = _generated([0.5, 0.5], extra_output=True)
    folded, _, _ = fold_proto(model, tmp_path)
    assert [t.name for t in _folded_weights(folded)] == ["w0"]
    assert [o.name for o in folded.graph.output] == ["y", "w0"]
    assert_same_bits(model, folded, {"x": np.arange(16, dtype=np.float32).reshape(2, 8)})


def test_a_shared_fold_still_fuses_into_each_reader(tmp_path):
    """Two Convs whose equal generated weights the fold shares, each followed by a batch
    norm: both norms fuse into their Conv (each reader had a copy of its own), and the equal
    fused weights are one again (DenseNet's light model: 499 nodes, as before the sharing)."""
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.02])
    nodes = []
    for i in range(2):
        nodes += [helper.make_node("ConstantOfShape", ["wshape"], [f"w{i}"], value=value),
                  helper.make_node("Conv", [f"x{i}", f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("BatchNormalization", [f"c{i}", "s", "b", "m", "v"],
                                   [f"y{i}"])]
    inits = [tensor("wshape", np.asarray([4, 3, 3, 3], np.int64))] + [
        tensor(n, np.full(4, 0.5, np.float32)) for n in ("s", "b", "m", "v")]
    model = make_model(nodes, [vinfo(f"x{i}", shape=[1, 3, 8, 8]) for i in range(2)],
                       [vinfo(f"y{i}", shape=[1, 4, 8, 8]) for i in range(2)], inits)
    folded, _, _ = fold_proto(model, tmp_path)
    assert [n.op_type for n in folded.graph.node] == ["Conv", "Conv"]
    weights = {n.input[1] for n in folded.graph.node}
    assert len(weights) == 1
    feeds = {f"x{i}": np.random.default_rng(i).standard_normal((1, 3, 8, 8), np.float32)
             for i in range(2)}
    for want, got in zip(run_ort(model, feeds), run_ort(folded, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # a fusion rounds once
