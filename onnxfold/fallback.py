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
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import cast

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold import address_space
from onnxfold.analysis import captured_values, external_inputs, static_shape
from onnxfold.arrays import c_contiguous
from onnxfold.declines import Decline, DeclineKind, Reason

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


class FallbackError(Exception):
    """onnxruntime could not build or run the batch (message: its first line)."""

    def __init__(self, detail: str, kind: DeclineKind = DeclineKind.RUNTIME_ERROR) -> None:
        super().__init__(detail)
        self.reason = Reason(kind, detail)


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def _to_ort(arr: np.ndarray):
    import onnxruntime as ort

    from onnxfold.dtypes import onnx_type

    if arr.dtype.kind == "V" or "bfloat16" in arr.dtype.name or "float8" in arr.dtype.name:
        raw = c_contiguous(arr).view(np.dtype(f"u{arr.dtype.itemsize}"))
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, onnx_type(arr.dtype))
    return ort.OrtValue.ortvalue_from_numpy(c_contiguous(arr))



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
        packed = [v.name for v in wanted if v.dtype is not None and v.dtype.bitwidth < 8]
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
              stored: Collection[ir.Value] = ()) -> list[np.ndarray]:
    """Run ``nodes`` in onnxruntime on ``feeds``; return the arrays of ``wanted``.

    ``stored`` feeds are initializers of the batch model (see the module docstring), the
    others inputs, except small ones that no prepacking kernel reads (embedded: onnxruntime's
    shape inference then sees their values).

    A run longer than ``timeout`` seconds is terminated (onnxruntime's ``RunOptions``) and
    raises FallbackError; so does a batch whose outputs, as onnxruntime declares them once the
    session exists, would take more than ``room`` bytes (see ``_check_declared_sizes``), or
    whose outputs take more than ``room`` bytes once computed. Outputs onnxruntime cannot size
    before the run (some contrib ops') are computed under an address-space bound of ``room``
    (``onnxfold.address_space``): a result too big for it fails to allocate, not the machine.
    """
    import onnxruntime as ort

    from onnxfold.dtypes import onnx_type

    graph = onnx.GraphProto(name="onnxfold_fallback")
    graph.node.extend(ir.serde.serialize_node(n) for n in nodes)
    members = set(nodes)
    embedded = {v for v, arr in feeds.items() if arr.nbytes <= EMBED_BYTES and not _raw_only(v)
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
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    handed_values = [_to_ort(feeds[v]) for v in handed]  # alive as long as the session
    if handed:
        options.add_external_initializers([v.name for v in handed], handed_values)
    try:
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        unsized = room is not None and not _check_declared_sizes(session, nodes, room, wanted)
        feed = {v.name: _to_ort(a) for v, a in feeds.items()
                if v not in embedded and v not in handed}
        run_options = ort.RunOptions()
        run_options.log_severity_level = 4
        timer = None
        if timeout is not None:
            timer = threading.Timer(timeout, setattr, (run_options, "terminate", True))
            timer.daemon = True
            timer.start()
        try:
            if any(_raw_only(v) for v in wanted):
                return _run_into_buffers(session, feed, wanted, run_options)
            if unsized:
                results = _run_bounded(session, feed, wanted, run_options, cast(int, room))
            else:
                results = session.run_with_ort_values([v.name for v in wanted], feed,
                                                      run_options)
        finally:
            if timer is not None:
                timer.cancel()
        if run_options.terminate:
            raise FallbackError(f"stopped after {timeout:g} s (--fold-timeout)", DeclineKind.SIZE)
    except FallbackError:
        raise
    except Exception as e:  # onnxruntime raises several unrelated exception types
        if timeout is not None and "terminate" in str(e).lower():
            raise FallbackError(f"stopped after {timeout:g} s (--fold-timeout)",
                                DeclineKind.SIZE) from None
        raise FallbackError(_first_line(e)) from None
    if room is not None:
        _check_computed_sizes(results, room)
    out = []
    for value, res in zip(wanted, results):
        if not res.is_tensor():
            raise FallbackError(f"output {value.name} is not a tensor",
                                DeclineKind.UNSUPPORTED_TYPE)
        out.append(_from_ort(res))
    return out


def _external_placeholder(name: str | None, arr: np.ndarray) -> onnx.TensorProto:
    """An initializer without data whose bytes the session options hand over."""
    from onnxfold.dtypes import onnx_type

    tensor = onnx.TensorProto(name=name, data_type=onnx_type(arr.dtype), dims=arr.shape,
                              data_location=onnx.TensorProto.EXTERNAL)
    tensor.external_data.add(key="location", value=f"onnxfold-handed-{name}")
    return tensor


def _check_declared_sizes(session, nodes: Sequence[ir.Node], room: int,
                          wanted: Sequence[ir.Value]) -> bool:
    """FallbackError (size) unless the outputs onnxruntime's session declares fit ``room``
    bytes; return whether every output is sized. Outputs of unknown size count as sized for
    default-domain ops (onnx's inference sized them before, when it could) but not for other
    domains' ops (contrib ops), which nothing else sizes: those run under a bound. onnxruntime
    declares an output it cannot shape with no dims, as a scalar: only a value known to be a
    scalar is counted as one."""
    total, unknown = 0, False
    for out, value in zip(session.get_outputs(), wanted):
        dims = out.shape
        itemsize = _ORT_ITEMSIZE.get(out.type)
        if dims == [] and static_shape(value) != ():
            unknown = True
            continue
        if itemsize is None or dims is None or not all(isinstance(d, int) for d in dims):
            unknown = True
            continue
        total += math.prod(dims) * itemsize
    if total > room:
        raise FallbackError(f"outputs of {total} B would exceed the pool budget's {room} B left",
                            DeclineKind.SIZE)
    return not (unknown and any(n.domain not in ("", "ai.onnx") for n in nodes))


def _run_bounded(session, feed: dict, wanted: Sequence[ir.Value], run_options, room: int
                 ) -> list:
    """``session.run_with_ort_values`` with the address space bounded to ``room`` bytes more
    (and ``address_space.RUN_ALLOWANCE``); FallbackError (size) if it cannot be bounded or an
    allocation fails under the bound."""
    with address_space.bounded(room) as in_place:
        if not in_place:
            raise FallbackError("a contrib op's output size is unknown before it runs",
                                DeclineKind.SIZE)
        try:
            return session.run_with_ort_values([v.name for v in wanted], feed, run_options)
        except Exception as e:  # onnxruntime's Fail, or MemoryError
            text = str(e)
            if isinstance(e, MemoryError) or "allocate" in text or "bad_alloc" in text or \
                    "bad allocation" in text:
                raise FallbackError(f"outputs of unknown size exceeded the pool budget's {room} B "
                                    "left while running", DeclineKind.SIZE) from None
            raise


def _check_computed_sizes(results: Sequence, room: int) -> None:
    """FallbackError (size) if the computed outputs (OrtValues, or arrays) take more than
    ``room`` bytes; checked before they are copied out of onnxruntime."""
    total = 0
    for res in results:
        if isinstance(res, np.ndarray):
            total += res.nbytes
        elif res.is_tensor():
            total += math.prod(res.shape()) * _ORT_ITEMSIZE.get(res.data_type(), 1)
    if total > room:
        raise FallbackError(f"outputs of {total} B exceed the pool budget's {room} B left",
                            DeclineKind.SIZE)


_ORT_ITEMSIZE = {f"tensor({name})": size for name, size in (
    ("float", 4), ("double", 8), ("float16", 2), ("bfloat16", 2), ("int8", 1), ("uint8", 1),
    ("int16", 2), ("uint16", 2), ("int32", 4), ("uint32", 4), ("int64", 8), ("uint64", 8),
    ("bool", 1), ("float8e4m3fn", 1), ("float8e4m3fnuz", 1), ("float8e5m2", 1),
    ("float8e5m2fnuz", 1))}


def _raw_only(value: ir.Value) -> bool:
    """onnxruntime's Python API cannot hand these (bfloat16, float8) over as numpy arrays."""
    if value.dtype is None or value.dtype in (ir.DataType.STRING,):
        return False
    dtype = value.dtype.numpy()
    return dtype.kind == "V" or "bfloat16" in dtype.name or "float8" in dtype.name


def _run_into_buffers(session, feed: dict, wanted: Sequence[ir.Value], run_options
                      ) -> list[np.ndarray]:
    """Run with every output bound to a numpy buffer of its statically known shape."""
    import onnxruntime as ort

    binding = session.io_binding()
    for name, value in feed.items():
        binding.bind_ortvalue_input(name, value)
    out = []
    for value in wanted:
        elem_type = cast(ir.DataType, value.dtype)  # unchecked: can be None (see #15)
        shape = static_shape(value)
        if shape is None:
            raise FallbackError(f"{elem_type.name} output {value.name} of unknown shape",
                                DeclineKind.UNSUPPORTED_TYPE)
        dtype = elem_type.numpy()
        buffer = np.empty(shape, np.dtype(f"u{dtype.itemsize}"))
        binding.bind_ortvalue_output(value.name, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            buffer, int(elem_type)))
        out.append(buffer.view(dtype))
    session.run_with_iobinding(binding, run_options)
    return out


def _from_ort(res) -> np.ndarray:
    try:
        return res.numpy()
    except Exception as e:
        raise FallbackError(f"cannot read an onnxruntime result: {_first_line(e)}") from None
