"""What convolutions, pools, Gemm and the quantized contractions do to dims, for the fold's
walk (``analysis.symbolic``) and so for the signature's count (``signature.compute``), which
reads the dims the walk proved: a Conv's spatial dims follow the input's as onnxruntime
computes them (``conv_attributes.h``, ``pool_attributes.h``)::

    explicit pads, VALID:    (in + pads - dilation * (kernel - 1) - 1 + stride) / stride
    SAME_UPPER, SAME_LOWER:  (in + stride - 1) / stride          (dilation 1)

with the division truncating as onnxruntime's cast of its float quotient does; a pool's as
``(in + pads - dilation * (kernel - 1) - 1) / stride + 1`` (a window that does not fit gives
what it gives there: ``tests/unit/test_window_dims.py`` holds both to onnxruntime's runs).
A pool's ``ceil_mode`` and a SAME pad with a dilation (onnxruntime's versions differ on it)
are not derived.
"""

from __future__ import annotations

from onnxfold.declare import Dim, Dims, DimsInputs, arith, normalize_index, shape_dims
from onnxfold.ir.graph import is_static_dim

from .shape_steps import matmul_of


def _strides_dilations_pads(step: DimsInputs, rank: int
                            ) -> tuple[list[int], list[int], list[int]]:
    """A window op's strides, dilations and pads over ``rank`` spatial axes, each its default
    where not given (pads 0 under ``VALID``)."""
    attrs = step.node.attributes
    pads = [0] * 2 * rank if attrs.get_string("auto_pad", "NOTSET") == "VALID" else \
        list(attrs.get_ints("pads", []) or [0] * 2 * rank)
    return (list(attrs.get_ints("strides", []) or [1] * rank),
            list(attrs.get_ints("dilations", []) or [1] * rank), pads)


def _spatial(step: DimsInputs, first: Dims, kernel: list[int], pool: bool
             ) -> list[Dim] | None:
    """The output's spatial dims of a window op over ``first`` (batch, channels, spatial...)
    with ``kernel`` (``pool``: a pool's rounding); None where its attributes are not derived
    here."""
    attrs, rank = step.node.attributes, len(first) - 2
    strides, dilations, pads = _strides_dilations_pads(step, rank)
    auto, ceil = attrs.get_string("auto_pad", "NOTSET"), attrs.get_int("ceil_mode", 0)
    sizes = [d for d in first[2:] if d is not None]
    if rank < 1 or len(sizes) != rank or {len(kernel), len(strides), len(dilations)} != {rank} \
            or len(pads) != 2 * rank or ceil or min(strides) < 1:
        return None
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return None if set(dilations) != {1} else [
            arith("Div", arith("Add", d, s - 1), s) for d, s in zip(sizes, strides)]
    if auto not in ("NOTSET", "VALID"):
        return None
    if pool:  # (x / stride) + 1: a window that does not fit gives 1 where a Conv's gives 0
        return [arith("Add", arith("Div", arith("Add", d, pads[i] + pads[i + rank] -
                                                dil * (k - 1) - 1), s), 1)
                for i, (d, k, s, dil) in enumerate(zip(sizes, kernel, strides, dilations))]
    return [arith("Div", arith("Add", d, pads[i] + pads[i + rank] - dil * (k - 1) - 1 + s), s)
            for i, (d, k, s, dil) in enumerate(zip(sizes, kernel, strides, dilations))]


def _kernel(step: DimsInputs, weights: int | None) -> list[int] | None:
    """The kernel's spatial dims: the attribute, else the weights' (input ``weights``)."""
    given = step.node.attributes.get_ints("kernel_shape", [])
    if given:
        return list(given)
    w = step.dims(step.value(weights)) if weights is not None else None
    return None if w is None or not all(isinstance(d, int) for d in w[2:]) else \
        [int(d) for d in w[2:]]  # type: ignore[arg-type]


def _windowed(step: DimsInputs, channels: Dim | None, weights: int | None) -> Dims | None:
    """The dims of a convolution (its ``weights`` input) or a pool (None) over input 0."""
    first = step.first
    kernel = _kernel(step, weights) if first is not None else None
    spatial = _spatial(step, first, kernel, weights is None) \
        if first is not None and kernel is not None else None
    return None if spatial is None or first is None else (first[0], channels, *spatial)


def _weights_dim(step: DimsInputs, weights: int, axis: int) -> Dim | None:
    w = step.dims(step.value(weights))
    return w[axis] if w is not None and len(w) > axis else None


@shape_dims("Conv", "ConvInteger")
def conv(step: DimsInputs) -> Dims | None:
    return _windowed(step, _weights_dim(step, 1, 0), 1)


@shape_dims("QLinearConv")
def qlinear_conv(step: DimsInputs) -> Dims | None:
    return _windowed(step, _weights_dim(step, 3, 0), 3)


@shape_dims("MaxPool", "AveragePool", "LpPool")
def pool(step: DimsInputs) -> Dims | None:
    return None if step.first is None or len(step.first) < 3 else \
        _windowed(step, step.first[1], None)


@shape_dims("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(step: DimsInputs) -> Dims | None:
    first = step.first
    return None if first is None or len(first) < 3 else (*first[:2], *[1] * (len(first) - 2))


@shape_dims("ConvTranspose")
def conv_transpose(step: DimsInputs) -> Dims | None:
    """Explicit pads, no ``output_shape``: ``stride * (in - 1) + output_padding +
    dilation * (kernel - 1) + 1 - pads`` per spatial axis."""
    attrs, first = step.node.attributes, step.first
    group = attrs.get_int("group", 1)
    kernel = _kernel(step, 1)
    per_group = _weights_dim(step, 1, 1)
    if first is None or kernel is None or per_group is None or "output_shape" in attrs or \
            attrs.get_string("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return None
    rank = len(first) - 2
    sizes = [d for d in first[2:] if d is not None]
    strides, dilations, pads = _strides_dilations_pads(step, rank)
    extra = list(attrs.get_ints("output_padding", []) or [0] * rank)
    if rank < 1 or len(sizes) != rank or len(pads) != 2 * rank or \
            {len(kernel), len(strides), len(dilations), len(extra)} != {rank}:
        return None
    return (first[0], arith("Mul", per_group, group), *[
        arith("Add", arith("Mul", arith("Sub", d, 1), s),
              e + dil * (k - 1) + 1 - pads[i] - pads[i + rank])
        for i, (d, k, s, dil, e) in enumerate(zip(sizes, kernel, strides, dilations, extra))])


@shape_dims("Gemm")
def gemm(step: DimsInputs) -> Dims | None:
    a, b = step.first, step.dims(step.value(1))
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return None
    attrs = step.node.attributes
    return (a[1] if attrs.get_int("transA", 0) else a[0],
            b[0] if attrs.get_int("transB", 0) else b[1])


@shape_dims("MatMulInteger", "QLinearMatMul")
def quantized_matmul(step: DimsInputs) -> Dims | None:
    return matmul_of(step.first, step.dims(step.value(
        3 if step.node.op_type == "QLinearMatMul" else 1)))


@shape_dims("QuantizeLinear", "DequantizeLinear")
def quantized(step: DimsInputs) -> Dims | None:
    return step.first


@shape_dims("Pad")
def pad(step: DimsInputs) -> Dims | None:
    """Each padded axis grows by its two pads (input 1, or the attribute before opset 11;
    ``axes``, input 3, from opset 18)."""
    first, node = step.first, step.node
    if first is None:
        return None
    pads = step.ints(1) if step.value(1) is not None else \
        list(node.attributes.get_ints("pads", []) or []) or None
    given = step.ints(3) if step.value(3) is not None else list(range(len(first)))
    if pads is None or given is None or len(pads) != 2 * len(given):
        return None
    axes = [normalize_index(a, len(first)) for a in given]
    out: list[Dim | None] = list(first)
    for i, axis in enumerate(axes):
        d = first[axis] if axis is not None else None
        if axis is None or d is None:
            return None
        out[axis] = arith("Add", d, pads[i] + pads[i + len(axes)])
    return tuple(out)


@shape_dims("LSTM", "GRU", "RNN", every_output=True)
def recurrent(step: DimsInputs) -> list[Dims | None]:
    """``Y`` [seq, directions, batch, hidden] and the last states [directions, batch,
    hidden] (``layout`` 0; ``layout`` 1 puts the batch first: not derived)."""
    attrs, first = step.node.attributes, step.first
    hidden, layout = attrs.get_int("hidden_size", 0), attrs.get_int("layout", 0)
    if first is None or len(first) != 3 or not hidden or layout:
        return []
    directions = 2 if attrs.get_string("direction", "forward") == "bidirectional" else 1
    state = (directions, first[1], hidden)
    return [(first[0], *state), state, state]


@shape_dims("If", every_output=True)
def taken_branch(step: DimsInputs) -> list[Dims | None]:
    """An If whose condition the walk knows: the static dims of the branch it takes (the
    branch's own symbols are not the graph's: only its ints are derived)."""
    cond = step.known_at(0)
    if cond is None or not cond.is_constant or len(cond.elements) != 1:
        return []
    branch = step.node.attributes.get_graph("then_branch" if cond.elements[0] else "else_branch")
    if branch is None:
        return []
    return [None if out.shape is None else tuple(
        d if is_static_dim(d) else None for d in out.shape.dims)
        for out in branch.outputs]
