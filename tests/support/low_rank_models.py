"""Small graphs of a base product and low-rank branches (LoRA) whose factors are graph inputs,
in each form ``rules/low_rank.py`` merges (built with ``onnx.helper``), and their feeds.

Every builder returns a :class:`LowRank`: the model, feeds for every input (B non-zero, as a
trained adapter's), and the names of the runtime-constant inputs (the adapters'). Dims: x is
[batch, 5, K] (2-D [5, K] where a Gemm needs it), the weight K x N, rank R.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

K, N, R = 24, 16, 4
SCALE = 2.0  # peft's lora_alpha / r
DTYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}
FLOAT32 = np.dtype(np.float32)


@dataclass
class LowRank:
    """A model, feeds for all of its inputs, and its runtime-constant input names."""

    model: ModelProto
    feeds: dict[str, np.ndarray]
    runtime: list[str]


class _Graph:
    """Nodes, inputs and initializers being collected, with seeded arrays."""

    def __init__(self, dtype: np.dtype, seed: int = 0) -> None:
        self.dtype = np.dtype(dtype)
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inputs: list = []
        self.inits: list = []
        self.feeds: dict[str, np.ndarray] = {}
        self.runtime: list[str] = []
        self.count = 0

    def array(self, shape: tuple[int, ...], scale: float = 0.3) -> np.ndarray:
        return np.asarray(self.rng.standard_normal(shape) * scale, self.dtype)

    def input(self, name: str, shape: tuple[int, ...], runtime: bool = True,
              dims: list | None = None, scale: float = 0.3) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, DTYPES[self.dtype],
                                                         dims or list(shape)))
        self.feeds[name] = self.array(shape, scale)
        if runtime:
            self.runtime.append(name)
        return name

    def weight(self, name: str, shape: tuple[int, ...]) -> str:
        self.inits.append(numpy_helper.from_array(self.array(shape), name))
        return name

    def scalar(self, name: str, value: float) -> str:
        self.inits.append(numpy_helper.from_array(np.array(value, self.dtype), name))
        return name

    def node(self, op: str, *inputs: str, **attrs) -> str:
        self.count += 1
        out = f"{op.lower()}_{self.count}"
        self.nodes.append(helper.make_node(op, list(inputs), [out], **attrs))
        return out

    def model(self, out: str, out_dims: list, opset: int = 17) -> LowRank:
        self.nodes[-1].output[0] = "y"
        graph = helper.make_graph(self.nodes, "low_rank", self.inputs,
                                  [helper.make_tensor_value_info("y", DTYPES[self.dtype],
                                                                 out_dims)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        return LowRank(model, self.feeds, self.runtime)


def _x(g: _Graph, two_d: bool = False) -> str:
    shape = (5, K) if two_d else (2, 5, K)
    return g.input("x", shape, runtime=False, dims=["seq", K] if two_d else ["batch", "seq", K])


def _out(two_d: bool = False) -> list:
    return ["seq", N] if two_d else ["batch", "seq", N]


def _branch(g: _Graph, x: str, tag: str = "", scale: str | None = None) -> str:
    """peft's ``lora_B(lora_A(x)) * scaling`` with Linear layouts: ``x @ A^T @ B^T * s``."""
    a = g.node("Transpose", g.input(f"lora_A{tag}", (R, K)), perm=[1, 0])
    b = g.node("Transpose", g.input(f"lora_B{tag}", (N, R)), perm=[1, 0])
    h = g.node("MatMul", g.node("MatMul", x, a), b)
    return g.node("Mul", h, scale or g.scalar(f"scaling{tag}", SCALE))


def scale_after(dtype: np.dtype = FLOAT32) -> LowRank:
    """``x @ W + (x @ A^T) @ B^T * s``: peft's form, dynamo's layout."""
    g = _Graph(dtype)
    x = _x(g)
    g.node("Add", g.node("MatMul", x, g.weight("W", (K, N))), _branch(g, x))
    return g.model("y", _out())


def scale_before(dtype: np.dtype = FLOAT32) -> LowRank:
    """``x @ W + ((x * s) @ A) @ B``: the scaling on the branch's input."""
    g = _Graph(dtype)
    x = _x(g)
    scaled = g.node("Mul", x, g.scalar("scaling", SCALE))
    h = g.node("MatMul", g.node("MatMul", scaled, g.input("lora_A", (K, R))),
               g.input("lora_B", (R, N)))
    g.node("Add", g.node("MatMul", x, g.weight("W", (K, N))), h)
    return g.model("y", _out())


def scale_between(dtype: np.dtype = FLOAT32) -> LowRank:
    """``x @ W + ((x @ A) * s) @ B``, s itself a runtime constant (fed)."""
    g = _Graph(dtype)
    x = _x(g)
    s = g.input("lora_scale", (), scale=1.0)
    h = g.node("MatMul", g.node("Mul", g.node("MatMul", x, g.input("lora_A", (K, R))), s),
               g.input("lora_B", (R, N)))
    g.node("Add", g.node("MatMul", x, g.weight("W", (K, N))), h)
    return g.model("y", _out())


def gemm_branch(dtype: np.dtype = FLOAT32) -> LowRank:
    """2-D x (TorchScript's Linear): the branch is ``Gemm(Gemm(x, A, transB=1), B, transB=1,
    alpha=s)``, the base a MatMul, the sum in the other order."""
    g = _Graph(dtype)
    x = _x(g, two_d=True)
    h = g.node("Gemm", g.node("Gemm", x, g.input("lora_A", (R, K)), transB=1),
               g.input("lora_B", (N, R)), transB=1, alpha=SCALE)
    g.node("Add", h, g.node("MatMul", x, g.weight("W", (K, N))))
    return g.model("y", _out(True))


def gemm_base(dtype: np.dtype = FLOAT32) -> LowRank:
    """A base ``Gemm(x, W, C, transB=1, alpha, beta)`` (weight [N, K]) with a branch."""
    g = _Graph(dtype)
    x = _x(g, two_d=True)
    base = g.node("Gemm", x, g.weight("W", (N, K)), g.weight("C", (N,)), transB=1,
                  alpha=0.5, beta=2.0)
    g.node("Add", base, _branch(g, x))
    return g.model("y", _out(True))


def bias_and_dropout(dtype: np.dtype = FLOAT32) -> LowRank:
    """``(x @ W + b) + lora(Dropout(Identity(x)))``: the base's bias inside the sum, the
    branch's input through an eval-mode Identity and an inference Dropout."""
    g = _Graph(dtype)
    x = _x(g)
    dropped = g.node("Dropout", g.node("Identity", x), g.scalar("ratio", 0.1))
    biased = g.node("Add", g.node("MatMul", x, g.weight("W", (K, N))), g.weight("b", (N,)))
    g.node("Add", biased, _branch(g, dropped))
    return g.model("y", _out())


def two_adapters(dtype: np.dtype = FLOAT32) -> LowRank:
    """Two adapters on one weight, one Add each: ``(x @ W + lora1(x)) + lora2(x)``."""
    g = _Graph(dtype)
    x = _x(g)
    first = g.node("Add", g.node("MatMul", x, g.weight("W", (K, N))), _branch(g, x, "1"))
    g.node("Add", first, _branch(g, x, "2"))
    return g.model("y", _out())


def adapters_summed_first(dtype: np.dtype = FLOAT32) -> LowRank:
    """Two adapters added together, then to the base: ``x @ W + (lora1(x) + lora2(x))``."""
    g = _Graph(dtype)
    x = _x(g)
    both = g.node("Add", _branch(g, x, "1"), _branch(g, x, "2"))
    g.node("Add", g.node("MatMul", x, g.weight("W", (K, N))), both)
    return g.model("y", _out())


def conv_adapter(dtype: np.dtype = FLOAT32, kernel: int = 3) -> LowRank:
    """peft's Conv2d LoRA: ``Conv(x, W) + Conv(Conv(x, A), B_1x1) * s``, A with the base's
    kernel, pads and strides."""
    g = _Graph(dtype)
    c, o = 6, 8
    x = g.input("x", (2, c, 9, 9), runtime=False, dims=["batch", c, "h", "w"])
    pads = [kernel // 2] * 4
    layout = {"pads": pads, "strides": [2, 2], "kernel_shape": [kernel, kernel]}
    base = g.node("Conv", x, g.weight("W", (o, c, kernel, kernel)), g.weight("bias", (o,)),
                  **layout)
    a = g.node("Conv", x, g.input("lora_A", (R, c, kernel, kernel)), **layout)
    b = g.node("Conv", a, g.input("lora_B", (o, R, 1, 1)), kernel_shape=[1, 1])
    g.node("Add", base, g.node("Mul", b, g.scalar("scaling", SCALE)))
    return g.model("y", ["batch", o, "h2", "w2"])


def quantized_base(dtype: np.dtype = FLOAT32) -> LowRank:
    """A base weight ``DequantizeLinear(Wq)`` (int8): its branch stays."""
    g = _Graph(dtype)
    x = _x(g)
    g.inits += [numpy_helper.from_array(g.rng.integers(-100, 100, (K, N)).astype(np.int8), "Wq"),
                numpy_helper.from_array(np.array(0.01, dtype), "w_scale")]
    w = g.node("DequantizeLinear", "Wq", "w_scale")
    g.node("Add", g.node("MatMul", x, w), _branch(g, x))
    return g.model("y", _out())


FORMS: dict[str, Callable[[np.dtype], LowRank]] = {
    "scale_after": scale_after, "scale_before": scale_before, "scale_between": scale_between,
    "gemm_branch": gemm_branch, "gemm_base": gemm_base, "bias_and_dropout": bias_and_dropout,
    "two_adapters": two_adapters, "adapters_summed_first": adapters_summed_first,
    "conv_adapter": conv_adapter, "conv_1x1_adapter": lambda d: conv_adapter(d, kernel=1),
}


def stacked(layers: int = 8, width: int = 512, rank: int = 8, seed: int = 0) -> LowRank:
    """``layers`` layers of ``x @ W_i + lora_i(x)`` one after another (width x width weights),
    for tests of what a set of merged weights costs: each set is ``layers * width^2 * 4`` B."""
    g = _Graph(np.dtype(np.float32), seed)
    h = g.input("x", (1, width), runtime=False, dims=["batch", width])
    for i in range(layers):
        a = g.input(f"lora_A{i}", (width, rank), scale=0.05)
        b = g.input(f"lora_B{i}", (rank, width), scale=0.05)
        g.inits.append(numpy_helper.from_array(g.array((width, width), 0.04), f"W{i}"))
        branch = g.node("MatMul", g.node("MatMul", h, a), b)
        h = g.node("Add", g.node("MatMul", h, f"W{i}"), branch)
    return g.model("y", ["batch", width])


def adapter(case: LowRank, seed: int) -> dict[str, np.ndarray]:
    """Another adapter for ``case``: its runtime constants drawn from ``seed``."""
    rng = np.random.default_rng(1000 + seed)
    return {n: np.asarray(rng.standard_normal(case.feeds[n].shape) * 0.05,
                          case.feeds[n].dtype) for n in case.runtime}


def write_adapter(arrays: dict[str, np.ndarray], path) -> None:
    """``arrays`` as an onnxruntime adapter file (what ``onnxruntime.LoraAdapter`` reads)."""
    import onnxruntime as ort

    written = ort.AdapterFormat()
    written.set_adapter_version(1)
    written.set_model_version(1)
    written.set_parameters({n: ort.OrtValue.ortvalue_from_numpy(a) for n, a in arrays.items()})
    written.export_adapter(str(path))


def with_default_adapter(case: LowRank) -> ModelProto:
    """``case``'s model with an initializer for each adapter input (zeros): the inputs stay
    overridable, as onnxruntime's multi-LoRA needs them (its Python API checks that every
    input without a default is fed before the active adapter supplies it)."""
    model = ModelProto()
    model.CopyFrom(case.model)
    for name in case.runtime:
        model.graph.initializer.append(
            numpy_helper.from_array(np.zeros_like(case.feeds[name]), name))
    return model
