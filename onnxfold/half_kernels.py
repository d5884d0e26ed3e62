"""Float16 and bfloat16 folds that onnxruntime would not round: ops it has no kernel of that
type for.

onnxruntime's CPU provider has float16 kernels for a few ops only (Cast, Transpose, Gather,
Slice, Sign, ...: its registry, ``get_all_opkernel_def``). Any other op on float16 runs in
float32 between Casts it inserts, and the Casts between two such ops cancel out, a user's Cast
included: a chain of them computes in float32 throughout and rounds once, where its value meets
an op with a float16 kernel or leaves the graph. Folding one of them into a float16 initializer
rounds its result there: exact where onnxruntime rounds too, not where the value flows on into
another op without a kernel (fuzz seeds 45513, 48969, 55680: a folded Gemm, a Reciprocal
summed with cancellation, 1-30 float16 ulps off). Those folds are declined; onnxruntime's own
constant folding declines every op without a kernel. (A Cast to float16 has a kernel, and
onnxruntime's optimizer folds it as onnxfold does; only with every optimization off does it
merge that Cast with the one it inserts before such an op, so its rounding goes: seed 77782.)
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import onnx_ir as ir

from onnxfold.analysis import DEFAULT_DOMAINS, subgraphs
from onnxfold.declines import DeclineKind, Reason

_HALF_TYPES = {ir.DataType.FLOAT16: "tensor(float16)", ir.DataType.BFLOAT16: "tensor(bfloat16)"}
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


def _rounds(reader: ir.Node, dtype: ir.DataType, opset: int) -> bool:
    """Whether onnxruntime rounds a value to ``dtype`` before ``reader`` reads it."""
    if reader.op_type == "Cast" or subgraphs(reader):
        return False  # a Cast pair cancels out; a subgraph: not followed, assumed not
    return has_kernel(reader, dtype, opset)


def refuse_unrounded(foldable: Iterable[ir.Node], planned: set[ir.Node], graph: ir.Graph,
                     opset: int) -> list[tuple[ir.Node, Reason]]:
    """Remove from ``planned`` the float16/bfloat16 folds onnxruntime would not round (see the
    module doc); say why."""
    refused = []
    for node in foldable:
        if node not in planned:
            continue
        for out in node.outputs:
            dtype = out.dtype
            if dtype not in _HALF_TYPES or has_kernel(node, dtype, opset):
                continue
            reader = next((u.node for u in out.uses() if not _rounds(u.node, dtype, opset)),
                          None)
            if reader is not None:
                refused.append((node, Reason(
                    DeclineKind.HALF_PRECISION,
                    f"onnxruntime computes {node.op_type} on {dtype.name.lower()} in float32 and "
                    f"passes it to {reader.op_type} unrounded")))
                planned.discard(node)
                break
    return refused
