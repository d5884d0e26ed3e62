"""A model whose weights are ``Constant`` nodes (as Paddle exports them) is checked without
copies of those weights: the check's runs of the original's cones hand a large Constant's
tensor over as an initializer (never serialized into the model they build), its sizing
inference reads no Constant's data, and what the runs compute is the original's bits."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxfold.check.inputs.sizes import Sizes
from onnxfold.check.running import cones as cones_module
from onnxfold.check.running.cones import Cones
from onnxfold.check.running.models import CONSTANT_NODE_BYTES, constant_weight
from onnxfold.io.reader import load_model

SIDE = 256  # a 256x256 float weight: 256 KiB, more than CONSTANT_NODE_BYTES


def _constant_weights(path) -> np.ndarray:
    """x -> MatMul(x, Transpose(Constant w0)) -> MatMul(., Constant w1) -> y; ``w0``."""
    rng = np.random.default_rng(3)
    w0, w1 = (rng.standard_normal((SIDE, SIDE)).astype(np.float32) for _ in range(2))
    nodes = [helper.make_node("Constant", [], ["w0"], value=numpy_helper.from_array(w0, "t0")),
             helper.make_node("Transpose", ["w0"], ["w0t"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "w0t"], ["h"]),
             helper.make_node("Constant", [], ["w1"], value=numpy_helper.from_array(w1, "t1")),
             helper.make_node("MatMul", ["h", "w1"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", SIDE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", SIDE])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return w0


def _original(path, feeds: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
    """onnxruntime's own values of ``names`` in the original (graph optimizations off, as the
    cones run; the values made graph outputs)."""
    model = onnx.load(str(path))
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(names, feeds)


def test_a_large_constant_node_is_handed_over_and_the_runs_keep_the_originals_bits(
        tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    w0 = _constant_weights(path)
    assert w0.nbytes > CONSTANT_NODE_BYTES
    model = load_model(str(path))
    cones = Cones(model, list(model.graph.inputs))
    built: list[int] = []  # the bytes of the nodes each run builds its model of
    real = cones_module.run_nodes

    def measured(nodes, *args, **kwargs):
        built.append(sum(n.ByteSize() for n in nodes))
        return real(nodes, *args, **kwargs)

    monkeypatch.setattr(cones_module, "run_nodes", measured)
    values = {str(o.name): o for n in model.graph for o in n.outputs}
    feeds = {"x": np.random.default_rng(1).standard_normal((3, SIDE)).astype(np.float32)}
    names = ["w0t", "h", "y"]
    for exact in (True, False):
        got = cones.run([values[n] for n in names], feeds, exact=exact)
        if exact:  # bit for bit as the original computes them
            for name, want in zip(names, _original(path, feeds, names)):
                assert got[values[name]].tobytes() == want.tobytes(), name
        assert built[-1] < 4096, "a Constant's weight was serialized into the run's model"
    # a Constant asked for itself: its tensor as the node holds it
    (alone,) = cones.run([values["w0"]], feeds).values()
    assert alone.tobytes() == w0.tobytes()


def test_the_sizing_inference_reads_no_constants_data_and_still_sizes_its_output(tmp_path):
    path = tmp_path / "m.onnx"
    _constant_weights(path)
    sizes = Sizes(load_model(str(path)))
    bound = sizes.bound({"x": (5, SIDE)})
    assert bound.ByteSize() < 4096  # no weight's data
    at = sizes.at({"x": (5, SIDE)})
    assert at["w0"] == at["w0t"] == SIDE * SIDE * 4  # the Constant's output sized all the same
    assert at["h"] == 5 * SIDE * 4


def test_a_constant_asked_for_with_its_readers_is_given_as_held_and_still_read(tmp_path):
    path = tmp_path / "m.onnx"
    w0 = _constant_weights(path)
    model = load_model(str(path))
    cones = Cones(model, list(model.graph.inputs))
    values = {str(o.name): o for n in model.graph for o in n.outputs}
    feeds = {"x": np.ones((2, SIDE), np.float32)}
    got = cones.run([values["w0"], values["w0t"], values["h"]], feeds)
    want = _original(path, feeds, ["w0", "w0t", "h"])
    assert got[values["w0"]].tobytes() == w0.tobytes() == want[0].tobytes()
    assert got[values["w0t"]].tobytes() == want[1].tobytes()
    assert got[values["h"]].tobytes() == want[2].tobytes()


def _runs_as_the_original(path, names: list[str], feeds: dict[str, np.ndarray]) -> None:
    model = load_model(str(path))
    cones = Cones(model, list(model.graph.inputs))
    values = {str(o.name): o for n in model.graph for o in n.outputs}
    got = cones.run([values[n] for n in names], feeds)  # exact: the original's bits
    for name, want in zip(names, _original(path, feeds, names)):
        assert np.asarray(got[values[name]]).tobytes() == np.asarray(want).tobytes(), name


def test_a_large_constant_a_subgraph_reads_is_handed_over_where_the_subgraph_sees_it(
        tmp_path):
    """An If's branch reads the Constant from the enclosing graph: handed over as an
    initializer, the branch still finds it by name."""
    w = np.random.default_rng(5).standard_normal((SIDE, SIDE)).astype(np.float32)
    then = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, SIDE])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, SIDE])])
    nodes = [helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(w, "tw")),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, SIDE]),
                     helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, SIDE])])
    path = tmp_path / "if.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    x = np.random.default_rng(6).standard_normal((2, SIDE)).astype(np.float32)
    _runs_as_the_original(path, ["y"], {"x": x, "c": np.array(True)})


def test_large_constants_of_other_types_stay_nodes_and_compute_as_before(tmp_path):
    """bfloat16 (carried through float32 by the runner) and strings are not handed over: they
    run as the nodes they are."""
    import ml_dtypes

    big = np.arange(SIDE * SIDE, dtype=np.float32).reshape(SIDE, SIDE) / 7
    bf = helper.make_tensor("tb", TensorProto.BFLOAT16, [SIDE, SIDE],
                            big.astype(ml_dtypes.bfloat16).view(np.uint16).tobytes(), raw=True)
    words = numpy_helper.from_array(np.array([b"w" * 64] * 2048, dtype=object), "ts")
    nodes = [helper.make_node("Constant", [], ["b"], value=bf),
             helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["bf", "x"], ["y"]),
             helper.make_node("Constant", [], ["s"], value=words),
             helper.make_node("Identity", ["s"], ["z"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [SIDE, SIDE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [SIDE, SIDE]),
         helper.make_tensor_value_info("z", TensorProto.STRING, [2048])])
    path = tmp_path / "types.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    model = load_model(str(path))
    held = [n for n in model.graph if constant_weight(n) is not None]
    assert held == []
    _runs_as_the_original(path, ["y"], {"x": np.ones((SIDE, SIDE), np.float32)})
