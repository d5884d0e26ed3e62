"""The report's signature of a model before and after a run: opset and IR version, each input
and output (dtype, shape with its symbolic dims named), the parameters and their bytes, the
file's size, and the compute per op type (``onnxfold.analysis.cost``) at the shapes of the
check's first input set: the check's own where ``--check`` ran, else those it would use (its
feed plan, ``onnxfold.check.running.feeds``, over the original's declared inputs). What it
needs of the input is read as the input is loaded (:func:`read_original`).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import onnx
import onnx_ir as ir

from onnxfold.analysis.cost import Compute, compute, compute_light, texts_aside
from onnxfold.analysis.expansion import inference_expands_functions
from onnxfold.analysis.shapes import serialize_light
from onnxfold.app.html_parts import esc, mib, table
from onnxfold.check.running.dim_relations import left_as_found
from onnxfold.errors import InputError
from onnxfold.host.heap import release
from onnxfold.host.logs import quiet
from onnxfold.host.terminal import printable
from onnxfold.ir.graph import is_static_dim
from onnxfold.pipeline.collector import process_goes_on

if TYPE_CHECKING:
    from onnxfold.analysis.step_inputs import ShapeSteps
    from onnxfold.check.result import CompareResult
    from onnxfold.check.running.options import CompareOptions
    from onnxfold.declare.catalogue import Catalogue


@dataclass(frozen=True)
class Original:
    """What the signature needs of the input, read once it is loaded, before any pass changes
    it: its facts (opset, inputs, ..., file bytes), its inputs as onnxruntime lists them (for
    the check's plan) and its graph as a proto without its weights and texts
    (``serialize_light``): the input is not read a second time."""

    facts: dict[str, Any]
    declared: list[SimpleNamespace]
    light: onnx.ModelProto
    expands: bool  # whether shape inference may expand its functions
    planned: FirstSet | InputError | None = None  # the check's first set, planned as it was read


FirstSet = tuple[dict[str, list[int]], dict[str, int], str]  # shapes, dims, whose set
WOULD_USE = "the first input set --check would use"


def read_original(model: ir.Model, light: onnx.ModelProto | None = None,
                  plan: tuple[CompareOptions, ShapeSteps] | None = None) -> Original:
    """The :class:`Original` of ``model``, just loaded; ``light``: the reader's proto of it
    as ``serialize_light`` gives it (copied: the fold's first inference takes it), else it is
    serialized here (with each node's metadata: 1.8 KiB a node of a dynamo export).

    ``plan``: the check's options and shape steps, where no check will run and nothing pins
    an input's dim (``--input-shape``): the first input set the check would use is planned
    now, on ``model`` itself, which is left exactly as it was found (every value's type,
    shape and marks), instead of on a second copy of the input read once the fold is done
    (1 s of 3.5 for a 16k-node graph, and a collection of it)."""
    from onnxfold.io.writer import input_files

    sizes = {(info.st_dev, info.st_ino): info.st_size for info in
             (os.stat(p) for p in input_files(model) if os.path.isfile(p))}
    declared = [SimpleNamespace(name=v.name, type=f"tensor({_dtype(v)})" if isinstance(
        v.type, ir.TensorType) else _dtype(v), shape=[
            d if isinstance(d, int) else getattr(d, "value", None) for d in v.shape or ()])
        for v in model.graph.inputs if v.name not in model.graph.initializers]
    if light is not None:
        light = _copy(light)
    else:
        with texts_aside(model):
            light = serialize_light(model)
    original = Original({**{key: fn(model) for key, fn in _FACTS},
                         "file_bytes": sum(sizes.values())}, declared, light,
                        inference_expands_functions(model))
    if plan is None:
        return original
    try:
        if _declared_set(original, plan[0]) is not None:
            return original  # (a set the declared shapes give needs no plan)
        with left_as_found(model):  # the output will fix the dims the input fixes: unpinned
            planned: FirstSet | InputError = _planned(original, model, *plan, _fixed(model))
    except InputError as e:  # the signature says why, once it is made
        planned = e
    except Exception:  # never the fold's end: planned once it is done, as it was before
        return original
    return dataclasses.replace(original, planned=planned)


def _fixed(model: ir.Model) -> dict[str, dict[int, int]]:
    """The static dims of ``model``'s inputs, by input and axis (``FeedPlan``'s ``pinned``)."""
    return {str(v.name): {axis: d for axis, d in enumerate(v.shape or ()) if isinstance(d, int)}
            for v in model.graph.inputs}


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy


def signature(original: Original, folded: ir.Model, written: int | None,
              check: CompareResult | None, options: CompareOptions, catalogue: Catalogue
              ) -> dict[str, Any]:
    """The signature of the input (``original``) and of ``folded`` (``written`` bytes; None:
    a dry run), with the compute at the check's first input set (``check``, or the one
    ``options`` would give)."""
    found: dict[str, Any] = {key: [original.facts[key], fn(folded)] for key, fn in _FACTS}
    found["file_bytes"] = [original.facts["file_bytes"], written]
    try:
        shapes, dims, where = _first_set(original, folded, check, options, catalogue)
    except InputError as e:  # a model the check cannot feed either (a sequence input, ...)
        found["compute"] = {"reason": str(e)}
        return found
    if process_goes_on():  # else the exit frees them (a full collection: 0.5 s at 16k nodes)
        release()  # the plan's graph, before the computes' protos
    after = compute(folded, shapes, catalogue.costs)
    release()
    known = _pinned_types(folded, shapes, catalogue) if dims and after.uncounted else None
    if known is not None:
        after = compute(folded, shapes, catalogue.costs, known)
        release()
    before = compute_light(_copy(original.light),  # a copy is bound to the shapes
                           original.expands, shapes, catalogue.costs, {**(known or {}),
                                                                       **after.types})
    found["compute"] = {"dims": dims, "inputs": shapes, "from": where,
                        "before": _totals(before), "after": _totals(after)}
    return found


def _pinned_types(folded: ir.Model, shapes: dict[str, list[int]], catalogue: Catalogue
                  ) -> dict[str, onnx.TypeProto] | None:
    """The static types of ``folded``'s values with its inputs fixed at ``shapes``: its graph
    without its weights (typed inputs instead) folded again with those shapes. A fold that
    keeps the dims dynamic leaves a TorchScript export's MatMul shapes to Shape, Gather and
    Concat chains that no inference follows (a dynamic BERT: 28 FLOPs); fixed, they fold.
    None where that fold fails, however (the counts stay what inference found, and say what
    they left uncounted)."""
    from onnxfold.pipeline.optimizer import optimize

    with texts_aside(folded):
        light = serialize_light(folded)
    with quiet("onnx_ir"):
        graph = ir.serde.deserialize_model(light)
    del light
    try:
        pinned = optimize(graph, check=False, catalogue=catalogue, input_shapes=shapes)
    except Exception:  # a refinement of a count: never the end of a run that wrote its output
        return None
    types = {name: onnx.helper.make_tensor_type_proto(tensor.dtype.value, tensor.shape.numpy())
             for name, tensor in ((name, value.const_value) for name, value in
                                  pinned.model.graph.initializers.items())  # steps folded
             if tensor is not None}
    return {**types, **compute(pinned.model, shapes, catalogue.costs).types}


def _opset(model: ir.Model) -> int | None:
    return model.opset_imports.get("", model.opset_imports.get("ai.onnx"))


def _dtype(value: ir.Value) -> str:
    """``float``, ``int64``: as onnxruntime names a tensor's element type; another type
    (a sequence, an optional) as onnx-ir names it."""
    if value.type is not None and not isinstance(value.type, ir.TensorType):
        return str(value.type)
    return value.dtype.name.lower() if value.dtype is not None else "?"


def _value(value: ir.Value) -> dict[str, Any]:
    """``{name, dtype, shape}`` (``float32``, as the check names it): a dim an int, its
    name, or ``?``."""
    try:
        dtype = str(value.dtype.numpy()) if isinstance(value.type, ir.TensorType) and \
            value.dtype is not None else _dtype(value)
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


_FACTS: tuple[tuple[str, Callable[[ir.Model], Any]], ...] = (
    ("opset", _opset), ("ir_version", lambda m: m.ir_version), ("inputs", _inputs),
    ("outputs", lambda m: [_value(v) for v in m.graph.outputs]), ("parameters", _params))


def _first_set(original: Original, folded: ir.Model,
               check: CompareResult | None, options: CompareOptions, catalogue: Catalogue
               ) -> tuple[dict[str, list[int]], dict[str, int], str]:
    """Each input's shape in the check's first input set, its named dims, and whose set (the
    dims ``folded`` fixes, ``--input-shape``'s, held as the check holds them). The plan reads
    the input's graph (weights as typed inputs): made here only where no check ran."""
    if check is not None:
        return ({i.name: list(i.shape) for i in check.inputs}, dict(check.dims),
                "the check's first input set")
    declared = _declared_set(original, options)
    if declared is not None:
        return declared
    if isinstance(original.planned, InputError):
        raise original.planned
    if original.planned is not None:
        return original.planned  # (the dims ``folded`` fixes are the input's: no pin)
    with quiet("onnx_ir"):  # what it says of the input it said as the input was read
        graph = ir.serde.deserialize_model(original.light)
    return _planned(original, graph, options, catalogue.shape_steps, _fixed(folded))


def _declared_set(original: Original, options: CompareOptions) -> FirstSet | None:
    """The first input set where the declared shapes give it (every dim static, no ``--dim``
    or ``--int-range`` to check against the model): the plan binds no dim then, whatever the
    graph relates. None where the plan is needed."""
    from onnxfold.check.running.models import numpy_type

    if options.dims or options.int_ranges or not all(
            all(map(is_static_dim, i.shape)) for i in original.declared):
        return None
    for i in original.declared:  # what the plan refuses first (a sequence input)
        numpy_type(i.type, "the original", i.name)
    return {i.name: list(i.shape) for i in original.declared}, {}, WOULD_USE


def _planned(original: Original, graph: ir.Model, options: CompareOptions, steps: ShapeSteps,
             fixed: dict[str, dict[int, int]]) -> FirstSet:
    """The check's plan of its first input set (``onnxfold.check.running.feeds``) over
    ``graph``, the input as read (``fixed``: the dims the output fixes, held as the check
    holds them). Its inference takes ``original.light``, which may lose there the functions
    inference may not expand, as ``compute_light`` takes them out of its copy."""
    from onnxfold.check.running.feeds import FeedPlan

    plan = FeedPlan(SimpleNamespace(get_inputs=lambda: original.declared), "the original",
                    graph, {}, options.dims, options.int_ranges, steps, fixed,
                    light=original.light)
    return ({name: list(plan.shape(shape)) for name, _, shape in plan.specs}, plan.dims,
            WOULD_USE)


def _totals(found: Compute) -> dict[str, Any]:
    return {"flops": sum(row[1] for row in found.ops.values()),
            "macs": sum(row[2] for row in found.ops.values()),
            "ops": {op: {"nodes": n, "flops": f, "macs": m}
                    for op, (n, f, m) in sorted(found.ops.items(), key=lambda kv: -kv[1][1])},
            "not_counted": found.uncounted}


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


_NUMBER = re.compile(r"\d+")
FAMILY = 3  # names of one pattern and one shape shown as one row from this many


def _families(rows: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """``rows`` with those whose names differ only in their numbers and whose shapes are the
    same as one row where they are ``FAMILY`` or more: a decoder's 64 KV-cache inputs
    (``past_key_values.0.key`` ... ``past_key_values.31.value``) as two rows,
    ``past_key_values.{0..31}.key (32)``, not a screen of identical ones. The JSON keeps
    every input."""
    families: dict[tuple[str, str, str], list[str]] = {}
    for name, a, b in rows:
        families.setdefault((_NUMBER.sub("#", name), a, b), []).append(name)
    out = []
    for (pattern, a, b), names in families.items():
        if len(names) < FAMILY:
            out += [(name, a, b) for name in names]
            continue
        numbers = [_NUMBER.findall(name) for name in names]
        pieces = pattern.split("#")
        shown = [pieces[0]]
        for i, piece in enumerate(pieces[1:]):
            values = sorted({int(found[i]) for found in numbers})
            shown.append(numbers[0][i] if len(values) == 1 else
                         f"{{{values[0]}..{values[-1]}}}"
                         if values == list(range(values[0], values[-1] + 1)) else
                         f"{{{','.join(map(str, values))}}}" if len(values) <= FAMILY + 1
                         else "*")
            shown.append(piece)
        out.append(("".join(shown) + f" ({len(names)})", a, b))
    return out


def _at(compute: dict[str, Any]) -> str:
    """At which dims (or input shapes) the compute was counted, and whose input set."""
    at = ", ".join(f"{k}={v}" for k, v in compute["dims"].items()) or ", ".join(
        f"{name} [{','.join(map(str, shape))}]" for name, shape in compute["inputs"].items())
    return f"{at} ({compute['from']})"


def lines(found: dict[str, Any]) -> list[str]:
    """The summary's signature block, names escaped (``host.terminal.printable``: a name
    holding a newline stays on its line)."""
    return [printable(line) for line in _lines(found)]


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
        return [printable(line) for line in [*out, f"compute      not counted: "
                                                   f"{compute['reason']}"]]
    counted = compute["before"]
    ops = ", ".join(f"{op} {si(row['flops'])}" for op, row in list(counted["ops"].items())[:3])
    uncounted = ", ".join(counted["not_counted"])
    out.append(f"compute      {si(counted['flops'], 'FLOPs')} ({si(counted['macs'])} MACs) at "
               f"{_at(compute)}"
               + (f"; {ops}" if ops else "") + (f"; not counted: {uncounted}" if uncounted
                                                 else ""))
    return [printable(line) for line in out]


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
