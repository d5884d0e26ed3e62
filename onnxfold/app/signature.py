"""The report's signature of a model before and after a run: opset and IR version, each input
and output (dtype, shape with its symbolic dims named), the parameters and their bytes, the
file's size, and the compute per op type (``onnxfold.analysis.cost``) at the shapes of the
check's first input set: the check's own where ``--check`` ran, else those it would use (its
feed plan, ``onnxfold.check.running.feeds``, over the original's declared inputs).
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import onnx_ir as ir

from onnxfold.analysis.cost import Compute, compute
from onnxfold.errors import InputError

if TYPE_CHECKING:
    from onnxfold.check.result import CompareResult
    from onnxfold.check.running.options import CompareOptions
    from onnxfold.declare.catalogue import Catalogue


def signature(source: str, folded: ir.Model, written: int | None, check: CompareResult | None,
              options: CompareOptions, catalogue: Catalogue) -> dict[str, Any]:
    """The signature of ``source`` (read again) and of ``folded`` (``written`` bytes; None: a
    dry run), with the compute at the check's first input set (``check``, or the one
    ``options`` would give)."""
    from onnxfold.io import load_model
    from onnxfold.io.writer import input_files

    original = load_model(source, check=False)
    sizes = {os.stat(p).st_ino: os.stat(p).st_size for p in input_files(original)
             if os.path.isfile(p)}
    found: dict[str, Any] = {key: [fn(original), fn(folded)] for key, fn in (
        ("opset", _opset), ("ir_version", lambda m: m.ir_version), ("inputs", _inputs),
        ("outputs", lambda m: [_value(v) for v in m.graph.outputs]), ("parameters", _params))}
    found["file_bytes"] = [sum(sizes.values()), written]
    try:
        shapes, dims, where = _first_set(original, check, options, catalogue)
    except InputError as e:  # a model the check cannot feed either (a sequence input, ...)
        found["compute"] = {"reason": str(e)}
        return found
    after = compute(folded, shapes, catalogue.costs)
    before = compute(original, shapes, catalogue.costs, after.types)
    found["compute"] = {"dims": dims, "inputs": shapes, "from": where,
                        "before": _totals(before), "after": _totals(after)}
    return found


def _opset(model: ir.Model) -> int | None:
    return model.opset_imports.get("", model.opset_imports.get("ai.onnx"))


def _dtype(value: ir.Value) -> str:
    """``float``, ``int64``: as onnxruntime names a tensor's element type."""
    return value.dtype.name.lower() if value.dtype is not None else "?"


def _value(value: ir.Value) -> dict[str, Any]:
    """``{name, dtype, shape}`` (``float32``, as the check names it): a dim an int, its
    name, or ``?``."""
    try:
        dtype = str(value.dtype.numpy()) if value.dtype is not None else "?"
    except TypeError:  # a type numpy has no name for (a 4-bit integer)
        dtype = _dtype(value)
    return {"name": value.name, "dtype": dtype, "shape": None if value.shape is None else [
        d if isinstance(d, int) else getattr(d, "value", None) or "?" for d in value.shape]}


def _inputs(model: ir.Model) -> list[dict[str, Any]]:
    return [_value(v) for v in model.graph.inputs if v.name not in model.graph.initializers]


def _params(model: ir.Model) -> dict[str, int]:
    """The initializers' elements and bytes (strings not counted)."""
    tensors = [v.const_value for v in model.graph.initializers.values()
               if v.const_value is not None and v.const_value.dtype != ir.DataType.STRING]
    return {"count": sum(t.size for t in tensors), "bytes": sum(t.nbytes for t in tensors)}


def _first_set(original: ir.Model, check: CompareResult | None, options: CompareOptions,
               catalogue: Catalogue) -> tuple[dict[str, list[int]], dict[str, int], str]:
    """Each input's shape in the check's first input set, its named dims, and whose set."""
    if check is not None:
        return ({i.name: list(i.shape) for i in check.inputs}, dict(check.dims),
                "the check's first input set")
    from onnxfold.check.running.feeds import FeedPlan

    declared = [SimpleNamespace(name=v.name, type=f"tensor({_dtype(v)})",
                                shape=[d if isinstance(d, int) else getattr(d, "value", None)
                                       for d in v.shape or ()])
                for v in original.graph.inputs if v.name not in original.graph.initializers]
    plan = FeedPlan(SimpleNamespace(get_inputs=lambda: declared), "the original", original,
                    {}, options.dims, options.int_ranges, catalogue.shape_steps)
    return ({name: list(plan.shape(shape)) for name, _, shape in plan.specs}, plan.dims,
            "the first input set --check would use")


def _totals(found: Compute) -> dict[str, Any]:
    return {"flops": found.flops, "macs": found.macs,
            "ops": {op: {"nodes": n, "flops": f, "macs": m}
                    for op, (n, f, m) in sorted(found.ops.items(), key=lambda kv: -kv[1][1])},
            "not_counted": found.uncounted}


def _si(n: float, unit: str = "") -> str:
    """``2.33 MFLOPs``, ``1.1 G``: three significant digits."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g} {prefix}{unit}"
    return f"{n:.0f} {unit}".rstrip()


def _mib(n: int | None) -> str:
    return "not written (dry run)" if n is None else f"{n / 2**20:.1f} MiB"


def _shape(value: dict[str, Any]) -> str:
    dims = value["shape"]
    return value["dtype"] + ("[?]" if dims is None else "[" + ",".join(map(str, dims)) + "]")


def _pair(before: str, after: str) -> str:
    return before if before == after else f"{before} -> {after}"


def lines(found: dict[str, Any]) -> list[str]:
    """The summary's signature block."""
    (p0, p1), (o0, o1) = found["parameters"], found["opset"]
    out = [f"signature    opset {_pair(str(o0), str(o1))}, IR "
           f"{_pair(*map(str, found['ir_version']))}; parameters {_si(p0['count'])} in "
           f"{_mib(p0['bytes'])} -> {_si(p1['count'])} in {_mib(p1['bytes'])}; file "
           f"{_mib(found['file_bytes'][0])} -> {_mib(found['file_bytes'][1])}"]
    for key in ("inputs", "outputs"):
        before = {v["name"]: _shape(v) for v in found[key][0]}
        out.append(f"{key:13}" + ", ".join(
            f"{v['name']} " + _pair(before.get(v["name"], "?"), _shape(v))
            for v in found[key][1]))
    compute = found["compute"]
    if "reason" in compute:
        return [*out, f"compute      not counted: {compute['reason']}"]
    a, b = compute["before"], compute["after"]
    dims = ", ".join(f"{k}={v}" for k, v in compute["dims"].items()) or "static input shapes"
    ops = ", ".join(f"{op} {_si(a['ops'].get(op, {}).get('flops', 0))} -> {_si(row['flops'])}"
                    for op, row in list(b["ops"].items())[:3])
    uncounted = {**a["not_counted"], **b["not_counted"]}
    return [*out, f"compute      {_si(a['flops'], 'FLOPs')} ({_si(a['macs'])} MACs) -> "
            f"{_si(b['flops'], 'FLOPs')} ({_si(b['macs'])} MACs) at {dims} "
            f"({compute['from']})"
            f"; {ops}" + (f"; not counted: {', '.join(uncounted)}" if uncounted else "")]
