"""The report's signature of a model before and after a run, rendered: the run's data
(``OptimizeResult.signature``, ``onnxfold.signature``: opset and IR version, each input and
output, the parameters and their bytes) with the file's size as written, and the compute per
op type at the shapes of the check's first input set: the check's own where ``--check`` ran,
else the check's guesses planned on the optimized graph (its feed plan,
``onnxfold.check.inputs.feeds``, over the types and dims the fold already knows: no shape
inference of its own).

The compute is the run's profiles evaluated at those shapes (``onnxfold.signature``: the
dims the fold's walk proved, where they leave one unknown at those shapes the same walk over
a weightless copy with the inputs fixed at them); what no walk sizes is said not counted.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import onnx_ir as ir

from onnxfold.app.html_parts import esc, mib, table
from onnxfold.errors import InputError
from onnxfold.host.terminal import families, printable, wrapped
from onnxfold.ir.graph import is_static_dim
from onnxfold.signature import Signature
from onnxfold.signature.facts import ort_type

if TYPE_CHECKING:
    from onnxfold.check.result import CompareResult
    from onnxfold.check.running.options import CompareOptions

FirstSet = tuple[dict[str, list[int]], dict[str, int], str]  # shapes, dims, whose set
WOULD_USE = "the first input set --check would use"
PLANNED = "planned as --check plans it, on the optimized graph"
KEYS = ("opset", "ir_version", "inputs", "outputs", "parameters")


def signature(data: Signature, written: int | None, check: CompareResult | None,
              options: CompareOptions) -> dict[str, Any]:
    """The signature of the input and the optimized model (``data``, the run's; ``written``
    bytes, None: a dry run), with the compute at the check's first input set (``check``, or
    the one ``options`` would give)."""
    assert data.after is not None and data.model is not None
    found: dict[str, Any] = {key: [data.before[key], data.after[key]] for key in KEYS}
    found["file_bytes"] = [data.before["file_bytes"], written]
    if data.before_profile is None:  # (never, but where reading it failed)
        found["compute"] = {"reason": f"the input's compute was not read: {data.unread}"}
        return found
    try:
        shapes, dims, where = _first_set(data.model, check, options)
    except InputError as e:  # a model the check cannot feed either (a sequence input, ...)
        found["compute"] = {"reason": str(e)}
        return found
    before, after = data.compute(shapes)
    found["compute"] = {"dims": dims, "inputs": shapes, "from": where,
                        "before": before.totals(), "after": after.totals()}
    return found


def _first_set(folded: ir.Model, check: CompareResult | None, options: CompareOptions
               ) -> FirstSet:
    """Each input's shape in the check's first input set, its named dims, and whose set: the
    check's where it ran, the declared shapes where every dim is static and no ``--dim`` or
    ``--int-range`` is to be checked against the model, else the check's plan of its first
    set over ``folded``'s inputs, its relations read from the types the fold left on the
    graph (no inference again) by the planner's own walk of the dims."""
    from onnxfold.check.inputs.feeds import FeedPlan
    from onnxfold.check.running.models import numpy_type

    if check is not None:
        return ({i.name: list(i.shape) for i in check.inputs}, dict(check.dims),
                "the check's first input set")
    declared = [SimpleNamespace(name=v.name, type=f"tensor({ort_type(v)})" if isinstance(
        v.type, ir.TensorType) else ort_type(v), shape=[
            d if is_static_dim(d) else None if isinstance(d, int) else getattr(d, "value", None)
            for d in v.shape or ()])  # (Paddle's -1: any size)
        for v in folded.graph.inputs if v.name not in folded.graph.initializers]
    for i in declared:  # what the plan refuses first (a sequence input)
        numpy_type(i.type, "the original", i.name)
    if not options.dims and not options.int_ranges and all(
            all(map(is_static_dim, i.shape)) for i in declared):
        return {i.name: list(i.shape) for i in declared}, {}, WOULD_USE
    fixed = {str(v.name): {axis: d for axis, d in enumerate(v.shape or ()) if is_static_dim(d)}
             for v in folded.graph.inputs}
    interface = SimpleNamespace(get_inputs=lambda: declared,  # (a runner's, read without one)
                                get_overridable_initializers=list)
    plan = FeedPlan(interface, "the original", folded, {}, options.dims, options.int_ranges,
                    fixed, analysed=True)
    return ({name: list(plan.shape(shape)) for name, _, shape in plan.specs}, plan.dims,
            PLANNED)


def si(n: float, unit: str = "") -> str:
    """``2.33 MFLOPs``, ``1.1 G``: three significant digits."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g} {prefix}{unit}"
    return f"{n:.0f} {unit}".rstrip()


def _shape(value: dict[str, Any] | None) -> str:
    if value is None:
        return "-"
    dims = "?" if value["shape"] is None else ",".join(map(str, value["shape"]))
    return f"{value['dtype']}[{dims}]"


def _facts(found: dict[str, Any], arrow: str) -> str:
    """Opset, IR version, parameters and file size, before ``arrow`` after."""
    (p0, p1), (a, b) = found["parameters"], found["file_bytes"]
    opset, version = (f" {arrow} ".join(dict.fromkeys(map(str, found[key])))  # 17, 20 -> 18
                      for key in ("opset", "ir_version"))
    return (f"opset {opset}, IR {version}; parameters {si(p0['count'])} "
            f"in {mib(p0['bytes'])} {arrow} {si(p1['count'])} in {mib(p1['bytes'])}; file "
            f"{mib(a)} {arrow} {mib(b) if b is not None else 'not written (dry run)'}")


def _io(found: dict[str, Any], key: str) -> list[tuple[str, str, str]]:
    """(name, shape before, shape after) of each input or output (``key``), a family of them
    as one row (:func:`_families`)."""
    before = {v["name"]: v for v in found[key][0]}
    return _families([(v["name"], _shape(before.get(v["name"])), _shape(v))
                      for v in found[key][1]])


def _families(rows: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """``rows`` (name, shape before, shape after) with a family of names of one shape as one
    (``host.terminal.families``). The JSON keeps every input."""
    return [(name, *key) for name, key, _ in families([(n, (a, b)) for n, a, b in rows])]


def _at(compute: dict[str, Any]) -> str:
    """At which dims (or input shapes) the compute was counted, and whose input set."""
    at = ", ".join(f"{k}={v}" for k, v in compute["dims"].items()) or ", ".join(
        f"{name} [{','.join(map(str, shape))}]" for name, shape in compute["inputs"].items())
    return f"{at} ({compute['from']})"


def lines(found: dict[str, Any]) -> list[str]:
    """The summary's signature block, names escaped (``host.terminal.printable``: a name
    holding a newline stays on its line), each entry wrapped under its label."""
    return _fitted(_lines(found))


def _fitted(entries: list[str]) -> list[str]:
    """Each of ``entries`` (a 13-character label, then its text) escaped and wrapped."""
    return [line for entry in entries
            for line in wrapped(entry[:13], printable(entry[13:]))]


def _lines(found: dict[str, Any]) -> list[str]:
    out = [f"signature    {_facts(found, '->')}"] + [
        f"{key:13}" + ", ".join(f"{name} {a}" + (f" -> {b}" if a != b else "")
                                for name, a, b in _io(found, key))
        for key in ("inputs", "outputs")]
    compute = found["compute"]
    if "reason" in compute:
        return [*out, f"compute      not counted: {compute['reason']}"]
    a, b = compute["before"], compute["after"]
    ops = ", ".join(f"{op} {si(a['ops'].get(op, {}).get('flops', 0))} -> {si(row['flops'])}"
                    for op, row in list(b["ops"].items())[:3])
    uncounted = {**a["not_counted"], **b["not_counted"]}
    return [*out, f"compute      {si(a['flops'], 'FLOPs')} ({si(a['macs'])} MACs) -> "
            f"{si(b['flops'], 'FLOPs')} ({si(b['macs'])} MACs) at {_at(compute)}"
            + (f"; {ops}" if ops else "")
            + (f"; not counted: {', '.join(uncounted)}" if uncounted else "")]


def one_model_lines(found: dict[str, Any]) -> list[str]:
    """``inspect``'s signature block: one model's facts, inputs, outputs and compute (the
    side of :func:`signature` its first model is), names escaped."""
    (params, _), (size, _) = found["parameters"], found["file_bytes"]
    out = [f"signature    opset {found['opset'][0]}, IR {found['ir_version'][0]}; parameters "
           f"{si(params['count'])} in {mib(params['bytes'])}; file {mib(size)}"]
    out += [f"{key:13}" + ", ".join(f"{name} {shape}" for name, shape, _ in _families(
        [(v["name"], _shape(v), "") for v in found[key][0]])) for key in ("inputs", "outputs")]
    compute = found["compute"]
    if "reason" in compute:
        return _fitted([*out, f"compute      not counted: {compute['reason']}"])
    counted = compute["before"]
    ops = ", ".join(f"{op} {si(row['flops'])}" for op, row in list(counted["ops"].items())[:3])
    uncounted = ", ".join(counted["not_counted"])
    out.append(f"compute      {si(counted['flops'], 'FLOPs')} ({si(counted['macs'])} MACs) at "
               f"{_at(compute)}"
               + (f"; {ops}" if ops else "") + (f"; not counted: {uncounted}" if uncounted
                                                 else ""))
    return _fitted(out)


def html(found: dict[str, Any] | None) -> str:
    """The HTML report's signature section ("" for a report without one): the facts, each
    input and output, and FLOPs and MACs per op type before and after."""
    if found is None:
        return ""
    rows = [(key[:-1], *row) for key in ("inputs", "outputs") for row in _io(found, key)]
    head = (f"<p>{esc(_facts(found, chr(0x2192)))}</p>" +
            table(["", "name", "before", "after"], rows, set(), "signature"))
    compute = found["compute"]
    if "reason" in compute:
        return head + f'<p class="muted">compute not counted: {esc(compute["reason"])}</p>'
    a, b = compute["before"], compute["after"]
    empty = {"nodes": 0, "flops": 0, "macs": 0}
    pairs = [(op, a["ops"].get(op, empty), b["ops"].get(op, empty))
             for op in dict.fromkeys([*b["ops"], *a["ops"]])]
    counted = [(op, x["nodes"], y["nodes"], si(x["flops"]), si(y["flops"]), si(x["macs"]),
                si(y["macs"])) for op, x, y in pairs if x["flops"] or y["flops"]]
    total = ("total", "", "", si(a["flops"]), si(b["flops"]), si(a["macs"]), si(b["macs"]))
    missing = ", ".join({**a["not_counted"], **b["not_counted"]})
    return (head + f"<h3>Compute</h3><p>at {esc(_at(compute))}: {si(a['flops'], 'FLOPs')} "
            f"\u2192 {si(b['flops'], 'FLOPs')}, a MAC (multiply and add) counting 2; ops that "
            "only move data count none and are not listed</p>" +
            table(["op", "nodes before", "after", "FLOPs before", "after", "MACs before",
                   "after"], counted, {1, 2, 3, 4, 5, 6}, "compute", total) +
            (f'<p class="muted">not counted (no declared cost, or shapes not static): '
             f"{esc(missing)}</p>" if missing else ""))
