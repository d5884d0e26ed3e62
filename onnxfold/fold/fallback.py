"""Executor fallback: evaluate nodes that have no native rule in one onnxruntime session.

Neighbouring fallback nodes are batched into a single model (inputs: the constant values they
read, outputs: the values needed outside the batch), so a chain costs one session, not one per
node. Graph optimizations are disabled: the session computes exactly what the nodes say.

The batch model sees the constants as the original model's session does: the model's
initializers (and Constant nodes, which onnxruntime turns into initializers) as initializers,
handed over without a copy (``add_external_initializers``), and values computed by folding as
inputs. It matters to the bits: onnxruntime prepacks a constant operand of a MatMul, Gemm or
Conv and its prepacked kernel sums in another order (a [128,768]x[768,768] MatMul differs in
86,862 of its 98,304 values, a few ulps each), so a fold is bitwise what the original computes
only if each operand is constant where, and only where, it is constant in the original.

``--fold-timeout`` bounds each session's run. onnxruntime stops a run only between kernels,
so a batch whose estimated cost (``onnxfold.fold.fold_cost``) could approach the timeout runs in a
child process that is killed at the timeout (``onnxfold.fold.fallback_child``); the others, the
common case, run here at no extra cost.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import cast

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.analysis.declines import Decline, DeclineKind, Reason
from onnxfold.fold.fallback_child import ChildUnavailable, run_in_child, worth_a_child
from onnxfold.fold.fallback_session import (
    FallbackError,
    Wanted,
    describe_output,
    first_line,
    raw_only,
    run_guarded,
    to_ort,
)
from onnxfold.fold.fold_cost import batch_flops
from onnxfold.host import interruptible
from onnxfold.host.ort_sessions import open_session, session_options
from onnxfold.ir.arrays import c_contiguous
from onnxfold.ir.dtypes import onnx_type
from onnxfold.ir.graph import captured_values, external_inputs, static_shape

__all__ = ["EMBED_BYTES", "PREPACKING_OPS", "FallbackError", "run_batch", "run_nodes"]

# Small feeds become initializers of the batch model: onnxruntime's shape inference then sees
# their values (a Scan body's Unsqueeze axes captured from the outer graph, a Reshape target),
# as it does in the original model; some kernels refuse subgraphs whose output shapes it cannot
# infer ("Subgraph must have the shape set for all outputs").
EMBED_BYTES = 4096
# Kernels that prepack a constant operand (their results depend on whether it is constant):
# a small computed value read by one of them is fed as an input, as in the original model.
PREPACKING_OPS = frozenset({
    "MatMul", "Gemm", "Conv", "ConvTranspose", "LSTM", "GRU", "RNN", "MatMulInteger",
    "QLinearConv", "QLinearMatMul", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
    "FusedMatMul", "FusedGemm", "FusedConv", "Attention", "QAttention", "MatMulNBits"})


Outcome = tuple[ir.Node, "dict[ir.Value, np.ndarray] | Reason | None", int]


def run_batch(batch: list[ir.Node], array: Callable[[ir.Value], np.ndarray | None],
              needed: Callable[[ir.Value], bool], opsets: dict[str, int], ir_version: int,
              timeout: float | None = None, room: int | None = None,
              stored: Callable[[ir.Value], bool] = lambda v: False) -> Iterator[Outcome]:
    """Evaluate ``batch`` (nodes in order) in one session; if that fails, node by node.

    ``array(v)`` is a constant input's data (None: not available), ``needed(v)`` whether an
    output is read outside the batch. Yields ``(node, results, sessions)`` per node, results
    being its output arrays, or the Reason it could not run, or None when an input it needs
    was not produced (its producer failed); ``sessions`` counts the successful sessions (1 on
    the first node a session computed). The caller stores each result before the next is
    asked for: a node run alone reads what the nodes before it produced. ``stored(v)``:
    whether ``v`` is an initializer (or Constant) of the model, not a computed value.
    """
    members = set(batch)
    wanted = [v for n in batch for v in n.outputs
              if v.name and (needed(v) or any(u not in members for u, _ in v.uses()))]
    try:
        packed = [v.name for v in wanted if v.dtype is not None and
                  v.dtype != ir.DataType.STRING and v.dtype.bitwidth < 8]  # (a string: none)
        if packed:  # onnxruntime's Python API hands 4-bit results back with wrong values
            raise FallbackError(f"{packed[0]}: sub-byte result", DeclineKind.UNSUPPORTED_TYPE)
        feeds = {v: array(v) for v in external_inputs(batch)}
        arrays = run_nodes(batch, cast("dict[ir.Value, np.ndarray]", feeds), wanted, opsets,
                           ir_version, timeout, room, {v for v in feeds if stored(v)})
    except (FallbackError, Decline) as e:
        if len(batch) == 1:
            yield batch[0], e.reason, 0
            return
        for node in batch:
            reads = [v for v in (*node.inputs, *captured_values(node)) if v is not None]
            if all(array(v) is not None for v in reads):
                yield from run_batch([node], array, needed, opsets, ir_version, timeout, room,
                                     stored)
            else:
                yield node, None, 0
        return
    outs = dict(zip(wanted, arrays))
    for k, node in enumerate(batch):
        yield node, {v: outs[v] for v in node.outputs if v in outs}, int(k == 0)


def run_nodes(nodes: Sequence[ir.Node], feeds: dict[ir.Value, np.ndarray],
              wanted: Sequence[ir.Value], opsets: dict[str, int], ir_version: int,
              timeout: float | None = None, room: int | None = None,
              stored: Collection[ir.Value] = (), libraries: Sequence[str] = ()
              ) -> list[np.ndarray]:
    """Run ``nodes`` in onnxruntime on ``feeds``; return the arrays of ``wanted``
    (``libraries``: custom-op libraries onnxruntime loads first, for a check's cones).

    ``stored`` feeds are initializers of the batch model (see the module docstring), the
    others inputs, except small ones that no prepacking kernel reads (embedded: onnxruntime's
    shape inference then sees their values).

    A run longer than ``timeout`` seconds is stopped and raises FallbackError: in the process
    by onnxruntime's ``RunOptions`` (read between kernels), or, for a batch whose estimated
    cost could approach the timeout (``onnxfold.fold.fold_cost``), by killing the child process it
    runs in (``onnxfold.fold.fallback_child``). So does a batch whose outputs, as onnxruntime
    declares them once the session exists, would take more than ``room`` bytes (see
    ``fallback_session.check_declared_sizes``), or take more than ``room`` bytes once computed.
    Outputs onnxruntime cannot size before the run (some contrib ops') are computed under an
    address-space bound of ``room`` (``onnxfold.host.address_space``): a result too big for it fails
    to allocate, not the machine.
    """
    model, embedded, handed = _batch_model(nodes, feeds, wanted, opsets, ir_version, stored)
    outputs = [describe_output(v, static_shape(v)) for v in wanted]
    contrib = any(n.domain not in ("", "ai.onnx") for n in nodes)
    inputs = {cast(str, v.name): a for v, a in feeds.items()
              if v not in embedded and v not in handed}
    handed_arrays = {cast(str, v.name): feeds[v] for v in handed}
    if timeout is not None and _to_child(nodes, feeds, wanted, timeout):
        with contextlib.suppress(ChildUnavailable):  # then here, stopped between kernels
            return run_in_child(model.SerializeToString(), handed_arrays, inputs, outputs,
                                room, contrib, timeout)
    return _run_here(model, handed_arrays, inputs, outputs, room, contrib, timeout, libraries)


def _to_child(nodes: Sequence[ir.Node], feeds: dict[ir.Value, np.ndarray],
              wanted: Sequence[ir.Value], timeout: float) -> bool:
    """Whether the batch runs in a child process: expensive enough, and no strings (which
    ``.npy`` files do not hold without pickling)."""
    if any(a.dtype.kind in "OSU" for a in feeds.values()) or any(
            v.dtype is None or v.dtype == ir.DataType.STRING for v in wanted):
        return False
    return worth_a_child(batch_flops(nodes, feeds), timeout)


def _batch_model(nodes: Sequence[ir.Node], feeds: dict[ir.Value, np.ndarray],
                 wanted: Sequence[ir.Value], opsets: dict[str, int], ir_version: int,
                 stored: Collection[ir.Value]
                 ) -> tuple[onnx.ModelProto, set[ir.Value], list[ir.Value]]:
    """The batch model, the feeds embedded in it and those handed over as initializers (the
    rest are its inputs)."""
    graph = onnx.GraphProto(name="onnxfold_fallback")
    graph.node.extend(ir.serde.serialize_node(n) for n in nodes)
    members = set(nodes)
    embedded = {v for v, arr in feeds.items() if arr.nbytes <= EMBED_BYTES and not raw_only(v)
                and arr.dtype.kind not in "OSUV" and (v in stored or not any(
                    u in members and u.op_type in PREPACKING_OPS for u, _ in v.uses()))}
    handed = [v for v in feeds if v in stored and v not in embedded and
              feeds[v].dtype.kind not in "OSU"]
    for value, arr in feeds.items():
        if value in embedded:
            graph.initializer.append(onnx.numpy_helper.from_array(c_contiguous(arr), value.name))
        elif value in handed:
            graph.initializer.append(_external_placeholder(value.name, arr))
        else:
            assert value.name is not None  # onnx_ir names every value of a graph
            graph.input.append(onnx.helper.make_tensor_value_info(
                value.name, onnx_type(arr.dtype), list(arr.shape)))
    graph.output.extend(onnx.ValueInfoProto(name=v.name) for v in wanted)
    model = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets.items()])
    model.ir_version = max(ir_version, 7)
    return model, embedded, handed


def _run_here(model: onnx.ModelProto, handed: dict[str, np.ndarray],
              inputs: dict[str, np.ndarray], outputs: Sequence[Wanted], room: int | None,
              contrib: bool, timeout: float | None, libraries: Sequence[str] = ()
              ) -> list[np.ndarray]:
    """Run the batch ``model`` in this process, stopped (between kernels) after ``timeout``
    seconds (None: the inference time limit, ``onnxfold.host.interruptible``) or by a signal
    (raised as such)."""
    # a check's custom ops (checked by the caller; the fold has none)
    options = session_options(optimized=False, libraries=libraries)
    try:
        # alive with the session; each an aligned copy (a weight of 2 GiB under a 6 GiB
        # address-space limit failed to allocate here, outside any handler: a raw MemoryError)
        handed_values = {name: to_ort(a) for name, a in handed.items()}
        session = open_session(model.SerializeToString(), options, handed=handed_values)
        feed = {name: to_ort(a) for name, a in inputs.items()}
        return interruptible.run(
            lambda run_options: run_guarded(session, feed, outputs, run_options, room, contrib),
            what="a fallback fold", finish_after_timeout=True,
            timeout=interruptible.CONTEXT_LIMIT if timeout is None else timeout)
    except FallbackError:
        raise
    except interruptible.InferenceTimeout as e:
        limit = f"--fold-timeout ({timeout:g} s)" if timeout is not None else \
            f"the inference time limit ({interruptible.limit() or 0:g} s)"
        raise FallbackError(f"exceeded {limit}: onnxruntime was stopped", DeclineKind.SIZE
                            ) from e
    except MemoryError as e:  # the machine's: this node is not folded, said so
        raise FallbackError(f"out of memory ({first_line(e)})", DeclineKind.SIZE) from None
    except Exception as e:  # onnxruntime raises several unrelated exception types
        raise FallbackError(first_line(e)) from None


def _external_placeholder(name: str | None, arr: np.ndarray) -> onnx.TensorProto:
    """An initializer without data whose bytes the session options hand over."""
    tensor = onnx.TensorProto(name=name, data_type=onnx_type(arr.dtype), dims=arr.shape,
                              data_location=onnx.TensorProto.EXTERNAL)
    tensor.external_data.add(key="location", value=f"onnxfold-handed-{name}")
    return tensor
