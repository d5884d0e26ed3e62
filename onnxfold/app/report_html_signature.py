"""The HTML report's signature of the model before and after the run (``signature.py``):
opset, IR version, parameters and file size; each input and output with its dtype and shape;
the compute per op type, at the shapes of the check's first input set, said."""

from __future__ import annotations

from typing import Any

from onnxfold.app.html_parts import esc, mib, table

STEPS = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _si(n: int) -> str:
    return next((f"{n / scale:.3g} {unit}" for scale, unit in STEPS if n >= scale), str(n))


def _shape(value: dict[str, Any] | None) -> str:
    if value is None:
        return "-"
    dims = "?" if value["shape"] is None else ",".join(map(str, value["shape"]))
    return f"{value['dtype']}[{dims}]"


def section(found: dict[str, Any] | None) -> str:
    """The signature's section ("" for a report without one)."""
    if found is None:
        return ""
    (p0, p1), (o0, o1), (i0, i1) = found["parameters"], found["opset"], found["ir_version"]
    a, b = found["file_bytes"]
    facts = (f"opset {o0} \u2192 {o1}, IR {i0} \u2192 {i1}; parameters {_si(p0['count'])} in "
             f"{mib(p0['bytes'])} \u2192 {_si(p1['count'])} in {mib(p1['bytes'])}; file "
             f"{mib(a)} \u2192 {mib(b) if b is not None else 'not written (dry run)'}")
    rows = []
    for key in ("inputs", "outputs"):
        before = {v["name"]: v for v in found[key][0]}
        rows += [(key[:-1], v["name"], _shape(before.get(v["name"])), _shape(v))
                 for v in found[key][1]]
    io = table(["", "name", "before", "after"], rows, set(), "signature")
    return f"<p>{esc(facts)}</p>{io}{_compute(found['compute'])}"


def _compute(compute: dict[str, Any]) -> str:
    """FLOPs and MACs per op type, before and after, and at which dims."""
    if "reason" in compute:
        return f'<p class="muted">compute not counted: {esc(compute["reason"])}</p>'
    a, b = compute["before"], compute["after"]
    dims = ", ".join(f"{k}={v}" for k, v in compute["dims"].items()) or "static input shapes"
    empty = {"nodes": 0, "flops": 0, "macs": 0}
    ops = [op for op in dict.fromkeys([*b["ops"], *a["ops"]])
           if a["ops"].get(op, empty)["flops"] or b["ops"].get(op, empty)["flops"]]
    rows = [(op, a["ops"].get(op, empty)["nodes"], b["ops"].get(op, empty)["nodes"],
             _si(a["ops"].get(op, empty)["flops"]), _si(b["ops"].get(op, empty)["flops"]),
             _si(a["ops"].get(op, empty)["macs"]), _si(b["ops"].get(op, empty)["macs"]))
            for op in ops]
    total = ("total", "", "", _si(a["flops"]), _si(b["flops"]), _si(a["macs"]), _si(b["macs"]))
    missing = {**a["not_counted"], **b["not_counted"]}
    return (f"<h3>Compute</h3><p>at {esc(dims)} ({esc(compute['from'])}): "
            f"{esc(_si(a['flops']))}FLOPs \u2192 {esc(_si(b['flops']))}FLOPs, a MAC (multiply "
            "and add) counting 2; ops that only move data count none and are not listed</p>" +
            table(["op", "nodes before", "after", "FLOPs before", "after", "MACs before",
                   "after"], rows, {1, 2, 3, 4, 5, 6}, "compute", total) +
            (f'<p class="muted">not counted (no declared cost, or shapes not static): '
             f'{esc(", ".join(missing))}</p>' if missing else ""))
