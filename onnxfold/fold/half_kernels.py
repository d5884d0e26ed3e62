"""Float16 and bfloat16 folds that onnxruntime would not round: ops it has no kernel of that type
for.

onnxruntime's CPU provider has float16 kernels for a few ops only (Cast, Transpose, Gather,
Slice, Sign, ...: its registry, ``get_all_opkernel_def``). Any other op on float16 runs in
float32 between Casts it inserts, and the Casts between two such ops cancel out, a user's Cast
included: a chain of them computes in float32 throughout and rounds once, where its value meets
an op with a float16 kernel or leaves the graph. Folding one of them into a float16 initializer
rounds its result there: exact where onnxruntime rounds too, not where the value flows on into
another op without a kernel (a folded Gemm, or a Reciprocal summed with cancellation, ends 1-30
float16 ulps off), nor into an op with a kernel that sits between two without one, which
onnxruntime then runs in float32 as well (Add -> Reshape -> Add). So such a node folds only
where its value is the graph's output and nothing else reads it; onnxruntime's own constant
folding declines every op without a kernel. And where one does fold, its rule runs in float32
and rounds once, as onnxruntime does (a Sum of three, Sigmoid).

A Cast to float16 has a kernel, but onnxruntime merges it with the Cast it inserts before an op
without one, and its rounding (or overflow to inf) goes. Its optimizer folds a Cast of an
initializer first, rounding as onnxfold does (only with every optimization off does the merge
happen); a Cast of a value only onnxfold knows, such as ``Size(x)`` of a static shape, it merges
at every level (Size 2049 -> Cast -> Sub 2048 gives 1 in onnxruntime, 0 rounded in float16). So
a Cast to float16 of anything but an initializer or a Constant folds like an op without a
kernel.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import numpy as np
import onnx_ir as ir

from onnxfold.analysis.declines import DeclineKind, Reason
from onnxfold.ir.graph import DEFAULT_DOMAINS

_HALF_TYPES = {ir.DataType.FLOAT16: "tensor(float16)", ir.DataType.BFLOAT16: "tensor(bfloat16)"}
# the numpy scalar types of float16 and bfloat16 (ml_dtypes'), whatever the byte order
_HALF_SCALARS = {np.float16: ir.DataType.FLOAT16,
                 ir.DataType.BFLOAT16.numpy().type: ir.DataType.BFLOAT16}
KernelTable = dict[tuple[str, str], list[tuple[int, int, frozenset[str]]]]


@functools.cache
def _cpu_kernels() -> KernelTable | None:
    """onnxruntime's CPU kernels: (domain, op) -> [(first opset, last opset, types)]; None when
    this onnxruntime does not list them."""
    try:
        from onnxruntime.capi import _pybind_state
        defs = _pybind_state.get_all_opkernel_def()
    except (ImportError, AttributeError):
        return None
    table: KernelTable = {}
    for k in defs:
        if k.provider != "CPUExecutionProvider":
            continue
        first, last = k.version_range
        types = frozenset(t for allowed in k.type_constraints.values() for t in allowed)
        domain = "" if k.domain == "ai.onnx" else k.domain
        table.setdefault((domain, k.op_name), []).append((first, last, types))
    return table


def has_kernel(node: ir.Node, dtype: ir.DataType, opset: int) -> bool:
    """Whether onnxruntime runs ``node`` on ``dtype`` (float16/bfloat16) with a kernel of that
    type (True when it cannot tell: nothing is declined on a guess)."""
    table = _cpu_kernels()
    if table is None:
        return True
    domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
    version = node.version or opset
    return any(first <= version <= last and _HALF_TYPES[dtype] in types
               for first, last, types in table.get((domain, node.op_type), ()))


def in_float32_by_onnxruntime(node: ir.Node, args: list, opset: int) -> np.dtype | None:
    """The float16/bfloat16 numpy type of ``node``'s arguments when onnxruntime has no kernel
    of it for ``node`` (it runs the op in float32 and rounds its result once: a rule must
    too, where it would round at each step of a formula, as Sigmoid or a Sum of three do);
    None otherwise."""
    for arg in args:
        if isinstance(arg, np.ndarray):
            dtype = _HALF_SCALARS.get(arg.dtype.type)  # (numpy's dtype.name is a slow property)
            if dtype is not None:
                return None if has_kernel(node, dtype, opset) else arg.dtype
    return None


def _stored(value: ir.Value | None) -> bool:
    """Whether ``value`` is an initializer or a Constant's output: what onnxruntime's own
    constant folding folds a Cast of, rounding it as onnxfold does."""
    if value is None:
        return False
    producer = value.producer()
    return value.const_value is not None or (producer is not None and
        producer.op_type == "Constant" and producer.domain in DEFAULT_DOMAINS)


def _rounds_where_computed(node: ir.Node, dtype: ir.DataType, opset: int) -> bool:
    """Whether onnxruntime rounds ``node``'s result to ``dtype`` where it computes it: a
    kernel of that type, except a Cast of a value only onnxfold knows (merged away)."""
    if node.op_type == "Cast" and not _stored(node.inputs[0]):
        return False
    return has_kernel(node, dtype, opset)


def refuse_unrounded(foldable: Iterable[ir.Node], planned: set[ir.Node], opset: int
                     ) -> list[tuple[ir.Node, Reason]]:
    """Remove from ``planned`` the float16/bfloat16 folds onnxruntime would not round (see the
    module doc): a node without a kernel folds only where every reader of its value is the
    graph's output (a node with a float16 kernel between two without one runs in float32 too,
    so no reader is sure to round); say why."""
    refused = []
    for node in foldable:
        if node not in planned:
            continue
        for out in node.outputs:
            dtype = out.dtype
            if dtype not in _HALF_TYPES or _rounds_where_computed(node, dtype, opset):
                continue
            reader = next((u.node for u in out.uses()), None)
            if reader is not None:
                refused.append((node, Reason(
                    DeclineKind.HALF_PRECISION,
                    f"onnxruntime computes {node.op_type} on {dtype.name.lower()} in float32 and "
                    f"passes it to {reader.op_type} unrounded")))
                planned.discard(node)
                break
    return refused
