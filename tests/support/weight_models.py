"""Models with weights fed as runtime-constant inputs (shared by the backend tests)."""

import numpy as np
from onnx import TensorProto, helper

D = 48


def weights_as_inputs_model(d=D, with_if=False):
    """x @ Transpose(DequantizeLinear(wq, scale, zp, axis=0)) + Cast(bias_h), weights as inputs.

    With ``with_if``, the bias path sits in an If branch that captures the runtime constant.
    """
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", d]),
              helper.make_tensor_value_info("wq", TensorProto.INT8, [d, d]),
              helper.make_tensor_value_info("scale", TensorProto.FLOAT, [d]),
              helper.make_tensor_value_info("zp", TensorProto.INT8, [d]),
              helper.make_tensor_value_info("bias_h", TensorProto.FLOAT16, [d])]
    nodes = [helper.make_node("DequantizeLinear", ["wq", "scale", "zp"], ["w"], axis=0),
             helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["h"])]
    if with_if:
        inputs.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))
        then_g = helper.make_graph(
            [helper.make_node("Cast", ["bias_h"], ["b32"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["b32", "two"], ["b2"])], "then", [],
            [helper.make_tensor_value_info("b2", TensorProto.FLOAT, [d])])
        else_g = helper.make_graph(
            [helper.make_node("Cast", ["bias_h"], ["b32e"], to=TensorProto.FLOAT)], "else", [],
            [helper.make_tensor_value_info("b32e", TensorProto.FLOAT, [d])])
        nodes.append(helper.make_node("If", ["flag"], ["bias"], then_branch=then_g,
                                      else_branch=else_g))
    else:
        nodes.append(helper.make_node("Cast", ["bias_h"], ["bias"], to=TensorProto.FLOAT))
    nodes.append(helper.make_node("Add", ["h", "bias"], ["y"]))
    graph = helper.make_graph(nodes, "weights_as_inputs", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             ["batch", d])],
                              [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def weight_feeds(seed=0, d=D, batch=2, flag=None):
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal((batch, d)).astype(np.float32),
             "wq": rng.integers(-128, 128, (d, d)).astype(np.int8),
             "scale": (rng.random(d).astype(np.float32) + 0.5) / 64,
             "zp": rng.integers(-4, 4, d).astype(np.int8),
             "bias_h": rng.standard_normal(d).astype(np.float16)}
    if flag is not None:
        feeds["flag"] = np.array(flag)
    return feeds


RUNTIME = ["wq", "scale", "zp", "bias_h"]
