"""The dims the fold's walk derives for convolutions, pools, pads, Gemm and the recurrent ops
(``rules/window_dims.py``), as expressions of the input's dynamic dims, evaluated at many
sizes against the shapes onnxruntime's own run gives (a reference that shares nothing with
the walk): random attributes (kernel, stride, dilation, pads, auto_pad), sizes down to where
the window no longer fits."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.analysis.step_inputs import shared_dim_names
from onnxfold.analysis.symbolic import shape_values
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.ir.constants import source_array
from onnxfold.signature.compute import Binding, _Inputs, shape_of

STEPS = load_catalogue().shape_steps
F = TensorProto.FLOAT


def _model(node: onnx.NodeProto, inputs, initializers) -> onnx.ModelProto:
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info(node.output[0], F, None)],
                              initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def _derived(proto: onnx.ModelProto):
    """The walk's dims of the node's first output (None: none derived), after ONNX's
    inference, as the fold runs it; and the ir model they are symbols of."""
    import onnx_ir as ir

    model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(proto))
    shape_values(model.graph, source_array, shared_dim_names(model), steps=STEPS,
                 complete=lambda _: True)
    out = next(iter(model.graph)).outputs[0]
    return (None if out.shape is None else shape_of(out, _Inputs(model))), model


def _ran(proto: onnx.ModelProto, feeds) -> tuple[int, ...] | None:
    """The output's shape in onnxruntime, None where it refuses the sizes."""
    try:
        session = ort.InferenceSession(proto.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        return tuple(session.run(None, feeds)[0].shape)
    except Exception:  # (a window that does not fit: refused, which any dims then match)
        return None


def _check(node, weights, sizes, x_rank=4, channels=3):
    x = helper.make_tensor_value_info("x", F, ["n", channels, *[f"d{i}" for i in
                                                                range(x_rank - 2)]])
    proto = _model(node, [x], weights)
    derived, model = _derived(proto)
    assert derived is not None and None not in derived, derived
    checked = 0
    for spatial in sizes:
        shape = [2, channels, *spatial]
        want = _ran(proto, {"x": np.zeros(shape, np.float32)})
        if want is None:
            continue
        binding = Binding(model, {"x": shape})
        assert tuple(binding.size(d) for d in derived) == want, (node, shape)
        checked += 1
    assert checked, "no size ran"


SIZES_2D = [(h, w) for h in (1, 2, 3, 5, 7, 8, 16, 17) for w in (4, 9)]


@pytest.mark.parametrize("seed", range(24))
def test_conv_dims_are_onnxruntimes_at_every_size(seed):
    rng = np.random.default_rng(seed)
    k = [int(v) for v in rng.integers(1, 4, 2)]
    attrs: dict = {"strides": [int(v) for v in rng.integers(1, 4, 2)]}
    auto = ["NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"][seed % 4]
    if auto == "NOTSET":
        attrs["pads"] = [int(v) for v in rng.integers(0, 3, 4)]
        attrs["dilations"] = [int(v) for v in rng.integers(1, 3, 2)]
    else:
        attrs["auto_pad"] = auto
    w = numpy_helper.from_array(rng.standard_normal((4, 3, *k)).astype(np.float32), "w")
    _check(helper.make_node("Conv", ["x", "w"], ["y"], **attrs), [w], SIZES_2D)


@pytest.mark.parametrize("op,seed", list(itertools.product(["MaxPool", "AveragePool"], range(8))))
def test_pool_dims_are_onnxruntimes_at_every_size(op, seed):
    rng = np.random.default_rng(seed)
    attrs: dict = {"kernel_shape": [int(v) for v in rng.integers(1, 4, 2)],
                   "strides": [int(v) for v in rng.integers(1, 3, 2)]}
    if seed % 2:
        attrs["auto_pad"] = "SAME_UPPER"
    else:
        pads = [int(v) for v in rng.integers(0, 2, 4)]
        attrs["pads"] = [min(p, k - 1) for p, k in zip(pads, attrs["kernel_shape"] * 2)]
    _check(helper.make_node(op, ["x"], ["y"], **attrs), [], SIZES_2D)


def test_global_pools_pads_and_transposed_convolutions_are_onnxruntimes():
    rng = np.random.default_rng(1)
    _check(helper.make_node("GlobalAveragePool", ["x"], ["y"]), [], SIZES_2D)
    pads = numpy_helper.from_array(np.array([0, 0, 1, 2, 0, 0, 3, 0], np.int64), "p")
    _check(helper.make_node("Pad", ["x", "p"], ["y"], mode="constant"), [pads], SIZES_2D)
    w = numpy_helper.from_array(rng.standard_normal((3, 2, 3, 2)).astype(np.float32), "w")
    _check(helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 3],
                            pads=[1, 0, 0, 1], output_padding=[1, 0], group=1), [w], SIZES_2D)


def test_a_ceil_mode_pool_is_left_underived():
    x = helper.make_tensor_value_info("x", F, ["n", 3, "h", "w"])
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                            ceil_mode=1)
    derived, _ = _derived(_model(node, [x], []))
    assert derived is None or None in derived


def _value_model(nodes, initializers) -> onnx.ModelProto:
    """``s = Shape(x)`` of x [n, 3, m], then ``nodes``, their last output ``y`` the graph's."""
    x = helper.make_tensor_value_info("x", F, ["n", 3, "m"])
    graph = helper.make_graph([helper.make_node("Shape", ["x"], ["s"]), *nodes], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
                              initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


VALUE_CASES = {
    "neg": [helper.make_node("Neg", ["s"], ["y"])],
    "prod": [helper.make_node("ReduceProd", ["s"], ["y"], keepdims=0)],
    "sum_kept": [helper.make_node("ReduceSum", ["s", "axis0"], ["y"])],
    "max": [helper.make_node("Gather", ["s", "axis1"], ["c"], axis=0),  # max(3, 5)
            helper.make_node("Max", ["c", "five"], ["y"])],
    "min": [helper.make_node("Min", ["s", "s"], ["y"])],
    "slice_from_minus": [  # x[:, :, -m:] (T5's relative positions): the whole axis
        helper.make_node("Gather", ["s", "two"], ["m"], axis=0),
        helper.make_node("Neg", ["m"], ["minus"]),
        helper.make_node("Unsqueeze", ["minus", "axis0"], ["start"]),
        helper.make_node("Slice", ["x", "start", "big", "axis2"], ["cut"]),
        helper.make_node("Shape", ["cut"], ["y"])],
}


@pytest.mark.parametrize("case", VALUE_CASES)
def test_shape_value_steps_are_onnxruntimes_values(case):
    """The walk's elements of ``y`` (symbols of n and m, or ints), evaluated at several sizes,
    are the values onnxruntime computes; a step that gives none fails."""
    import onnx_ir as ir

    inits = [numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.array([3, 1, 5], np.int64), "k"),
             numpy_helper.from_array(np.array(2, np.int64), "two"),
             numpy_helper.from_array(np.array([2**62], np.int64), "big"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1"),
             numpy_helper.from_array(np.array([2], np.int64), "axis2"),
             numpy_helper.from_array(np.array([5], np.int64), "five")]
    proto = _value_model(VALUE_CASES[case], inits)
    model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(proto))
    known = shape_values(model.graph, source_array, shared_dim_names(model), steps=STEPS)
    y = next(v for node in model.graph for v in node.outputs if v.name == "y")
    assert known.get(y) is not None, "no step gave y's elements"
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for n, m in ((1, 1), (2, 7), (5, 3)):
        want = session.run(None, {"x": np.zeros((n, 3, m), np.float32)})[0]
        binding = Binding(model, {"x": [n, 3, m]})
        got = [binding.size(e) for e in known[y].elements]
        assert got == want.reshape(-1).tolist(), (case, n, m)


@pytest.mark.parametrize("size", [6, 7])
def test_an_if_the_walk_knows_takes_its_branchs_dims(size):
    """``If(Size(x) == size)`` over x [2, 3]: then ``x``, else ``Concat(x, x)``; inference
    merges the branches (a dim unknown), the walk knows the condition and takes the dims of
    the branch onnxruntime runs."""
    import onnx_ir as ir

    x = helper.make_tensor_value_info("x", F, [2, 3])
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["a"])], "then", [],
                             [helper.make_tensor_value_info("a", F, [2, 3])])
    other = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["b"], axis=0)], "else",
                              [], [helper.make_tensor_value_info("b", F, [4, 3])])
    graph = helper.make_graph(
        [helper.make_node("Size", ["x"], ["n"]),
         helper.make_node("Equal", ["n", "size"], ["cond"]),
         helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)],
        "g", [x], [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(np.array(size, np.int64), "size")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(proto))
    shape_values(model.graph, source_array, frozenset(), steps=STEPS, complete=lambda _: True)
    y = next(v for node in model.graph for v in node.outputs if v.name == "y")
    want = ort.InferenceSession(proto.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": np.zeros((2, 3), np.float32)})[0].shape
    assert shape_of(y, _Inputs(model)) == want
