"""Can anything tell ``-0.0`` from ``+0.0`` in a value? (What removing ``x + 0.0`` needs.)

``x + 0.0`` is ``x`` bit for bit except where ``x`` is ``-0.0`` (it gives ``+0.0``). The two
zeros compare equal (IEEE 754), so the difference matters only where an op gives a different
*value* for them: ``1 / -0.0`` is ``-inf``, ``1 / +0.0`` is ``+inf``. Each (op, input) is one
of three kinds:

- *absorbs*: the op's results are the same bits for either zero (``Exp``, comparisons,
  ``Abs``, ``Add`` of a constant without zeros, ``Pow``'s exponent, the quantizers to
  integers, ``Where``'s X: onnxruntime gives ``+0.0`` for a zero it selects from X...);
- *passes on*: its results may differ, but only in the sign of a zero (``Mul``, ``MatMul``,
  reshapes, ``Tanh``, ``Div``'s numerator...), so its results are asked the same question;
- anything else (``Div``'s divisor, ``Reciprocal``, ``Pow``'s base under a non-positive
  exponent, subgraphs, other domains, unknown ops) *observes* it.

A ``Resize`` (or ``Upsample``) passes its data's signs on: every output element is one input
element (``nearest``) or a sum of input elements times weights computed from the coordinates
alone (``linear``, ``cubic``, with ``antialias`` and ``exclude_outside`` too), or the
``extrapolation_value``. ``+``, ``-`` and ``*`` by a number give the same result for two
operands equal but for a zero's sign, but for that result's own sign when it is zero, so the
outputs differ at most in the signs of zeros. Its other inputs (``roi``, ``scales``,
``sizes``) place the coordinates: they observe. ``DFT`` and ``STFT`` are linear too: each output
is a sum of input elements (windowed, for ``STFT``: its window passes the signs of its zeros on
as well) times twiddle factors, so their signals' zeros pass on; their lengths, axes and steps
observe.

The quantizers, as onnxruntime computes them: ``QuantizeLinear`` to an integer type rounds
``x / scale`` and adds the zero point, and either zero rounds to the zero point (to a float8
type -0.0 stays -0.0: it observes); ``DynamicQuantizeLinear`` also takes the range of its input
with 0 in it (``min(min(x), 0)``, ``max(max(x), 0)``, the scale 1 where they are equal), so
neither its scale nor its zero point sees a zero's sign.

An output of the model's graph observes nothing: its consumer compares numbers, and the zeros
are equal. An output of a subgraph observes: it goes on to the enclosing graph (an ``If``'s
result, a ``Loop``'s next state) where anything may read it.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxfold.declare import GraphView
from onnxfold.ir.graph import is_default_op, subgraphs

ANY = -1  # every input of the op
_DATA_TYPES = frozenset(int(t) for t in ir.DataType)

ABSORBS: dict[str, int] = dict.fromkeys(
    ("Exp", "Cos", "Cosh", "Sigmoid", "Softmax", "Softplus", "Abs", "Log", "Shape", "Size",
     "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN", "IsInf", "ArgMax",
     "ArgMin", "NonZero", "ReduceL1", "ReduceL2", "ReduceSumSquare", "EyeLike",
     "DynamicQuantizeLinear"), ANY) | {
         "Pow": 1, "Where": 1}  # onnxruntime's Where gives +0.0 for a zero it selects from X

PASSES_ON: dict[str, tuple[int, ...] | int] = dict.fromkeys(
    ("Add", "Sub", "Mul", "Neg", "Sqrt", "Tanh", "Sin", "Tan", "Asin", "Atan", "Sinh",
     "Asinh", "Atanh", "Erf", "Floor", "Ceil", "Round", "Sign", "Relu", "LeakyRelu", "Elu",
     "Selu", "Celu", "Gelu", "HardSigmoid", "HardSwish", "Softsign", "Mish", "ThresholdedRelu",
     "PRelu", "Max", "Min", "Mean", "Sum", "Identity", "Dropout", "MatMul", "Gemm", "Einsum",
     "Conv", "ConvTranspose", "LayerNormalization", "BatchNormalization",
     "InstanceNormalization", "GroupNormalization", "Concat", "Transpose", "Squeeze",
     "Unsqueeze", "Flatten", "Reshape", "Expand", "Tile", "Slice", "Split", "Gather",
     "GatherElements", "GatherND", "DepthToSpace", "SpaceToDepth", "MaxPool", "AveragePool",
     "GlobalMaxPool", "GlobalAveragePool", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
     "ReduceProd", "ReduceLogSumExp", "CumSum", "LogSoftmax", "TopK", "Clip", "Pad"), ANY)
PASSES_ON.update({"Div": 0, "Where": 2, "Pow": 0, "Cast": 0, "Resize": 0, "Upsample": 0,
                  "DFT": 0, "STFT": (0, 2)})

def _has_no_zero(ctx: GraphView, value: ir.Value | None) -> bool:
    array = ctx.array(value)
    return array is not None and array.size > 0 and bool((array != 0).all())


def _positive(ctx: GraphView, value: ir.Value | None) -> bool:
    array = ctx.array(value)
    return array is not None and array.size > 0 and bool((array > 0).all())


def _to_integers(node: ir.Node) -> bool:
    """Whether a QuantizeLinear gives integers: its output's type, else its zero point's,
    else its ``output_dtype``, else uint8."""
    out = node.outputs[0].dtype if node.outputs else None
    zero_point = node.inputs[2] if len(node.inputs) > 2 else None
    if out is None and zero_point is not None:
        out = zero_point.dtype
    if out is None:
        given = node.attributes.get_int("output_dtype", 0) or int(ir.DataType.UINT8)
        out = ir.DataType(given) if given in _DATA_TYPES else None
    return out is not None and out.is_integer()


def _listed(table: dict, op: str, index: int) -> bool:
    where = table.get(op)
    return where is not None and (where == ANY or index == where or
                                  (isinstance(where, tuple) and index in where))


def _kind(ctx: GraphView, node: ir.Node, index: int) -> str:
    """``"absorbs"``, ``"passes"`` or ``"observes"``: what ``node`` does with a zero's sign in
    its input ``index``."""
    op = node.op_type
    # what to build: a reader in another graph observes a sign (not a question of removal)
    if not ctx.here(node) or not is_default_op(node) or subgraphs(node):
        return "observes"
    if op in ("Add", "Sub") and len(node.inputs) == 2 and _has_no_zero(ctx, node.inputs[1 - index]):
        return "absorbs"  # +-0 + c is c, whichever the zero
    if op == "Cast":
        to = node.attributes.get_int("to")
        if to is None or to == ir.DataType.STRING or to not in _DATA_TYPES:
            return "observes"  # a string says "-0" or "0"; an unknown type, who knows
        return "passes" if ir.DataType(to).is_floating_point() else "absorbs"
    if op == "QuantizeLinear":
        return "absorbs" if index == 0 and _to_integers(node) else "observes"
    if _listed(ABSORBS, op, index):
        return "absorbs"
    if op == "Pow" and not _positive(ctx, node.inputs[1] if len(node.inputs) > 1 else None):
        return "observes"  # (-0) ** -1 is -inf
    return "passes" if _listed(PASSES_ON, op, index) else "observes"


def zero_sign_observer(ctx: GraphView, value: ir.Value) -> str | None:
    """The first node found reading ``value`` (or what it passes the sign on to) that gives a
    different result for ``-0.0`` than for ``+0.0``, in words; None: none does. Remembered for
    the rewrite sweep until a rewrite builds a node (``GraphView.remembered``)."""
    memo: dict[ir.Value, str | None] = ctx.remembered("zero_sign_observer")
    returned = ctx.in_subgraph  # a subgraph's outputs go on to the enclosing graph
    stack: list[tuple[ir.Value, bool]] = [(value, False)]
    while stack:
        v, expanded = stack.pop()
        if v in memo:
            continue
        # what to build: an output of a subgraph is read by the enclosing graph
        if returned and ctx.is_graph_output(v):
            memo[v] = "the enclosing graph (an output of this subgraph)"
            continue
        passed_to: list[ir.Value] = []
        observer = None
        # what to build: whether any reader observes the sign of a zero
        for reader, index in ctx.readers(v):
            kind = _kind(ctx, reader, index)
            if kind == "observes":
                observer = f"{reader.op_type} {reader.name or reader.outputs[0].name}"
                break
            if kind == "passes":
                passed_to.extend(reader.outputs)
        if observer is not None:
            memo[v] = observer
            continue
        pending = [o for o in passed_to if o not in memo]
        if pending and not expanded:
            stack.append((v, True))
            stack.extend((o, False) for o in pending)
            continue
        memo[v] = next((memo.get(o, "a reader in a cycle") for o in passed_to
                        if memo.get(o, "a reader in a cycle") is not None), None)
    return memo[value]
