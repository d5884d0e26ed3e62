"""Seeds (``tests/support/rule_seeds.py``) of the arithmetic pattern rules: weight fusions,
low-rank merges, written normalizations, shared-input products, no-ops, zero recurrent
states and CastLike of a constant.

Each builder makes a small float32 model whose every node is named; the values its rule
consumes are read only inside the match, and a node named ``after`` computes the graph's
output from the rewritten value. The intermediates' types and shapes are inferred into the
graph's value infos: the rules read them, and the rule attempt infers none.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.support.models import make_model as _bare_model
from tests.support.models import tensor, vinfo
from tests.support.rule_seeds import Seed


def make_model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    """The model of ``tests.support.models.make_model`` (IR 8) with its intermediates' types
    and shapes inferred (the rules read them; the attempt infers none)."""
    model = _bare_model(nodes, inputs, outputs, initializers, opset=opset, ir_version=8)
    return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _floats(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _positive(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.random(shape) + 0.5).astype(np.float32)


def _node(op: str, inputs: list[str], outputs: list[str], name: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs, name=name, **attrs)


def _batch_norm_params(rng: np.random.Generator, channels: int) -> list[onnx.TensorProto]:
    return [tensor("bn_scale", _positive(rng, channels)), tensor("bn_bias", _floats(rng, channels)),
            tensor("bn_mean", _floats(rng, channels)), tensor("bn_var", _positive(rng, channels))]


_BN_INPUTS = ["bn_scale", "bn_bias", "bn_mean", "bn_var"]


def batch_norm_after_gemm() -> onnx.ModelProto:
    """x [N, 3] -> Gemm(W [3, 4], C [4]) -> BatchNormalization -> Relu."""
    rng = _rng()
    nodes = [_node("Gemm", ["x", "W", "C"], ["g"], "gemm"),
             _node("BatchNormalization", ["g", *_BN_INPUTS], ["b"], "bn"),
             _node("Relu", ["b"], ["y"], "after")]
    inits = [tensor("W", _floats(rng, 3, 4)), tensor("C", _floats(rng, 4)),
             *_batch_norm_params(rng, 4)]
    return make_model(nodes, [vinfo("x", shape=["N", 3])], [vinfo("y", shape=["N", 4])], inits)


def batch_norm_after_conv() -> onnx.ModelProto:
    """x [N, 2, 4, 4] -> Conv(W [3, 2, 3, 3], B [3], pads 1) -> BatchNormalization -> Relu."""
    rng = _rng()
    nodes = [_node("Conv", ["x", "W", "B"], ["c"], "conv", pads=[1, 1, 1, 1]),
             _node("BatchNormalization", ["c", *_BN_INPUTS], ["b"], "bn"),
             _node("Relu", ["b"], ["y"], "after")]
    inits = [tensor("W", _floats(rng, 3, 2, 3, 3)), tensor("B", _floats(rng, 3)),
             *_batch_norm_params(rng, 3)]
    return make_model(nodes, [vinfo("x", shape=["N", 2, 4, 4])],
                      [vinfo("y", shape=["N", 3, 4, 4])], inits)


def _conv_then(op: str) -> onnx.ModelProto:
    """x [N, 2, 4, 4] -> Conv(W [3, 2, 1, 1], B [3]) -> ``op`` c [3, 1, 1] -> Relu."""
    rng = _rng()
    nodes = [_node("Conv", ["x", "W", "B"], ["c"], "conv"),
             _node(op, ["c", "k"], ["m"], "per_channel"),
             _node("Relu", ["m"], ["y"], "after")]
    inits = [tensor("W", _floats(rng, 3, 2, 1, 1)), tensor("B", _floats(rng, 3)),
             tensor("k", _positive(rng, 3, 1, 1))]
    return make_model(nodes, [vinfo("x", shape=["N", 2, 4, 4])],
                      [vinfo("y", shape=["N", 3, 4, 4])], inits)


def conv_times_channels() -> onnx.ModelProto:
    """x [N, 2, 4, 4] -> Conv(W [3, 2, 1, 1], B [3]) -> Mul c [3, 1, 1] -> Relu."""
    return _conv_then("Mul")


def conv_plus_channels() -> onnx.ModelProto:
    """x [N, 2, 4, 4] -> Conv(W [3, 2, 1, 1], B [3]) -> Add c [3, 1, 1] -> Relu."""
    return _conv_then("Add")


def matmul_plus_bias() -> onnx.ModelProto:
    """x [N, 3] -> MatMul(W [3, 4]) -> Add c [4] -> Relu."""
    rng = _rng()
    nodes = [_node("MatMul", ["x", "W"], ["p"], "matmul"),
             _node("Add", ["p", "c"], ["s"], "add"),
             _node("Relu", ["s"], ["y"], "after")]
    inits = [tensor("W", _floats(rng, 3, 4)), tensor("c", _floats(rng, 4))]
    return make_model(nodes, [vinfo("x", shape=["N", 3])], [vinfo("y", shape=["N", 4])], inits)


def twice_scaled() -> onnx.ModelProto:
    """x [N, 3, 4] -> Mul k [4] -> Mul c [4] -> Relu."""
    rng = _rng()
    nodes = [_node("Mul", ["x", "k"], ["xk"], "inner"),
             _node("Mul", ["xk", "c"], ["xkc"], "outer"),
             _node("Relu", ["xkc"], ["y"], "after")]
    inits = [tensor("k", _positive(rng, 4)), tensor("c", _positive(rng, 4))]
    return make_model(nodes, [vinfo("x", shape=["N", 3, 4])], [vinfo("y", shape=["N", 3, 4])],
                      inits)


def scaled_operands_product() -> onnx.ModelProto:
    """q [N, 2, S, 4] * s, k [N, 2, 4, S] * s -> MatMul -> Softmax (an exported attention's
    scores, each operand scaled by the square root of the scale)."""
    nodes = [_node("Mul", ["q", "s"], ["qs"], "scale_q"),
             _node("Mul", ["k", "s"], ["ks"], "scale_k"),
             _node("MatMul", ["qs", "ks"], ["scores"], "scores"),
             _node("Softmax", ["scores"], ["y"], "after")]
    return make_model(nodes, [vinfo("q", shape=["N", 2, "S", 4]),
                              vinfo("k", shape=["N", 2, 4, "S"])],
                      [vinfo("y", shape=["N", 2, "S", "S"])],
                      [tensor("s", np.array(0.70710677, np.float32))])


LOW_RANK_INPUTS = ("lora_a", "lora_b")  # the runtime constants the rule needs


def low_rank_branch() -> onnx.ModelProto:
    """x [N, 3] -> MatMul(W [3, 4]) + s * MatMul(MatMul(x, A [3, 2]), B [2, 4]) -> Relu; A
    and B are graph inputs (runtime constants: the rule merges only across those)."""
    rng = _rng()
    nodes = [_node("MatMul", ["x", "W"], ["base"], "base"),
             _node("MatMul", ["x", "lora_a"], ["down"], "lora_down"),
             _node("MatMul", ["down", "lora_b"], ["up"], "lora_up"),
             _node("Mul", ["up", "s"], ["scaled"], "lora_scale"),
             _node("Add", ["base", "scaled"], ["sum"], "sum"),
             _node("Relu", ["sum"], ["y"], "after")]
    inits = [tensor("W", _floats(rng, 3, 4)), tensor("s", np.float32(2.0))]
    inputs = [vinfo("x", shape=["N", 3]), vinfo("lora_a", shape=[3, 2]),
              vinfo("lora_b", shape=[2, 4])]
    return make_model(nodes, inputs, [vinfo("y", shape=["N", 4])], inits)


def written_layer_norm() -> onnx.ModelProto:
    """x [N, 3, 4] -> LayerNorm over the last axis op by op (ReduceMean, Sub, Pow, ReduceMean,
    Add eps, Sqrt, Div), * scale [4] + bias [4] -> Relu (opset 17)."""
    rng = _rng()
    nodes = [_node("ReduceMean", ["x"], ["mean"], "mean", axes=[-1]),
             _node("Sub", ["x", "mean"], ["centred"], "centre"),
             _node("Pow", ["centred", "two"], ["squared"], "square"),
             _node("ReduceMean", ["squared"], ["variance"], "variance", axes=[-1]),
             _node("Add", ["variance", "eps"], ["shifted"], "add_eps"),
             _node("Sqrt", ["shifted"], ["deviation"], "sqrt"),
             _node("Div", ["centred", "deviation"], ["normed"], "normalize"),
             _node("Mul", ["normed", "gamma"], ["scaled"], "scale"),
             _node("Add", ["scaled", "beta"], ["shifted_out"], "bias"),
             _node("Relu", ["shifted_out"], ["y"], "after")]
    inits = [tensor("two", np.float32(2.0)), tensor("eps", np.float32(1e-5)),
             tensor("gamma", _positive(rng, 4)), tensor("beta", _floats(rng, 4))]
    return make_model(nodes, [vinfo("x", shape=["N", 3, 4])], [vinfo("y", shape=["N", 3, 4])],
                      inits, opset=17)


def three_products_of_x() -> onnx.ModelProto:
    """x [N, 3, 4] -> MatMul by each of W1 [4, 2], W2 [4, 3], W3 [4, 2] -> Concat."""
    rng = _rng()
    widths = (2, 3, 2)
    nodes = [_node("MatMul", ["x", f"W{i}"], [f"p{i}"], f"matmul_{i}")
             for i in range(1, len(widths) + 1)]
    nodes.append(_node("Concat", ["p1", "p2", "p3"], ["y"], "after", axis=-1))
    inits = [tensor(f"W{i}", _floats(rng, 4, w)) for i, w in enumerate(widths, start=1)]
    return make_model(nodes, [vinfo("x", shape=["N", 3, 4])], [vinfo("y", shape=["N", 3, 7])],
                      inits)


def times_one() -> onnx.ModelProto:
    """x [N, 3] -> Relu -> Mul ones [3] -> Neg."""
    nodes = [_node("Relu", ["x"], ["r"], "before"),
             _node("Mul", ["r", "ones"], ["m"], "times_one"),
             _node("Neg", ["m"], ["y"], "after")]
    return make_model(nodes, [vinfo("x", shape=["N", 3])], [vinfo("y", shape=["N", 3])],
                      [tensor("ones", np.ones(3, np.float32))])


def inference_dropout() -> onnx.ModelProto:
    """x [N, 3] -> Relu -> Dropout (no training mode, no mask) -> Neg."""
    nodes = [_node("Relu", ["x"], ["r"], "before"),
             _node("Dropout", ["r"], ["d"], "dropout", seed=0),
             _node("Neg", ["d"], ["y"], "after")]
    return make_model(nodes, [vinfo("x", shape=["N", 3])], [vinfo("y", shape=["N", 3])])


def gru_from_zeros() -> onnx.ModelProto:
    """x [2, 2, 3] -> GRU(hidden 4) from an initial_h of +0.0 [1, 2, 4] (a Constant node: the
    value the rewrite stops reading) -> Relu."""
    rng = _rng()
    hidden, features, gates = 4, 3, 3 * 4
    zeros = helper.make_node("Constant", [], ["h0"], name="zeros",
                             value=tensor("h0_value", np.zeros((1, 2, hidden), np.float32)))
    nodes = [zeros, _node("GRU", ["x", "W", "R", "B", "", "h0"], ["states"], "gru",
                   hidden_size=hidden),
             _node("Relu", ["states"], ["y"], "after")]
    inits = [tensor("W", _floats(rng, 1, gates, features) * 0.5),
             tensor("R", _floats(rng, 1, gates, hidden) * 0.5),
             tensor("B", _floats(rng, 1, 2 * gates) * 0.5)]
    return make_model(nodes, [vinfo("x", shape=[2, 2, features])],
                      [vinfo("y", shape=[2, 1, 2, hidden])], inits)


def cast_like_constant() -> onnx.ModelProto:
    """x [N, 3] + CastLike(c: float64 [3], x) -> Add (the sum is the output)."""
    rng = _rng()
    nodes = [_node("CastLike", ["c", "x"], ["cast"], "cast_like"),
             _node("Add", ["x", "cast"], ["y"], "after")]
    inits = [tensor("c", rng.standard_normal(3).astype(np.float64))]
    return make_model(nodes, [vinfo("x", shape=["N", 3])],
                      [vinfo("y", TensorProto.FLOAT, ["N", 3])], inits)


SEEDS: dict[str, Seed] = {
    "fuse_batch_norm_into_gemm": Seed(batch_norm_after_gemm, "bn"),
    "fuse_batch_norm_into_conv": Seed(batch_norm_after_conv, "bn"),
    "fuse_mul_into_conv": Seed(conv_times_channels, "per_channel"),
    "fuse_add_into_conv": Seed(conv_plus_channels, "per_channel"),
    "fuse_matmul_add_into_gemm": Seed(matmul_plus_bias, "add"),
    "merge_constant_factors": Seed(twice_scaled, "outer"),
    "scale_the_product_once": Seed(scaled_operands_product, "scores"),
    "merge_low_rank_branches": Seed(low_rank_branch, "sum", LOW_RANK_INPUTS),
    "write_normalization": Seed(written_layer_norm, "bias"),
    "merge_shared_input_matmuls": Seed(three_products_of_x, "matmul_1"),
    "drop_neutral_element": Seed(times_one, "times_one"),
    "drop_inference_dropout": Seed(inference_dropout, "dropout"),
    "drop_zero_initial_state": Seed(gru_from_zeros, "gru"),
    "cast_like_of_a_constant": Seed(cast_like_constant, "cast_like"),
}
