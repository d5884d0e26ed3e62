"""What stayed (and what folded), grouped by the module path the exporter recorded.

PyTorch exporters record where each node came from: the dynamo exporter in the node's
``metadata_props`` (``pkg.torch.onnx.name_scopes``, a list of module paths ending with the
op's own name; ``namespace``, ``path: class`` pairs joined by ``/``), the TorchScript exporter
in the node's name (``/model/layers.3/self_attn/Reshape_2``). Layer indices become ``*`` so
that the 32 layers of a decoder are one line: ``layers.*.self_attn (x32): Reshape x4``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping

import onnx_ir as ir

from onnxfold.ir.graph import all_graphs, node_label
from onnxfold.ir.provenance import FOLDED_FROM
from onnxfold.ir.scopes import FOLDED_MODULE_KEY, module_path, path_of_name

TOP_LEVEL = "(top level)"
_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")
EXAMPLES = 3  # reasons shown per group
_DIM_NAME = re.compile(r"^`([^`]*)`")  # "`batch` of input x (axis 0)" -> batch


def pattern(path: str) -> str:
    """``layers.3.self_attn`` -> ``layers.*.self_attn``; "" -> :data:`TOP_LEVEL`."""
    return _INDEX.sub("*", path) if path else TOP_LEVEL


def group_leftovers(model: ir.Model, declined: Iterable[Mapping[str, str]],
                    blocked: Iterable[Mapping[str, str]],
                    rejected: Mapping[ir.Node, str] | None = None) -> list[dict]:
    """What stayed, one entry per module pattern, most nodes first: the pattern, how many
    module instances it covers, the op counts of the nodes that stayed, why they stayed (at
    most :data:`EXAMPLES` distinct reasons, and the dynamic dims that block them; ``dims``:
    those dims' names) and, apart (``rewrites_declined``: nodes not counted among them), the
    rewrites declined in that module. ``declined``/``blocked``: the report's
    ``declined_nodes`` (key ``reason``) and ``dynamic_shapes`` (key ``blocked_by``).
    ``rejected``: nodes a rewrite declined (``rule: reason``), named where something stayed in
    that module (a rewrite declined elsewhere, a MatMul not fused, is no leftover)."""
    nodes = {node_label(n): n for graph in all_graphs(model) for n in graph}
    groups: dict[str, dict] = {}

    def group_of(item: Mapping[str, str]) -> dict:
        node = nodes.get(item["node"])
        path = module_path(node) if node is not None else path_of_name(item["node"])
        group = groups.setdefault(pattern(path), {"instances": set(), "ops": Counter(),
                                                  "reasons": Counter(), "dims": {}})
        group["instances"].add(path)
        group["ops"][item["op"]] += 1
        return group

    for item in declined:
        group_of(item)["reasons"][item["reason"]] += 1
    for item in blocked:
        group = group_of(item)
        group["dims"].update(dict.fromkeys(item["blocked_by"].split("; ")))
    declines: dict[str, Counter] = {}
    for node, why in (rejected or {}).items():
        name = pattern(module_path(node))
        if node.graph is not None and name in groups:
            declines.setdefault(name, Counter())[(node.op_type, why)] += 1
            groups[name]["instances"].add(module_path(node))
    out = []
    for name, group in groups.items():
        reasons = [r for r, _ in group["reasons"].most_common(EXAMPLES)]
        if group["dims"]:
            reasons.append("blocked by dynamic dims: " + ", ".join(group["dims"]))
        rewrites = []
        for (op, why), n in declines.get(name, Counter()).most_common(EXAMPLES):
            rule, _, because = why.partition(": ")
            rewrites.append(f"{rule} not applied to {op} x{n}: {because}")
        out.append({
            "module": name, "instances": len(group["instances"]),
            "nodes": sum(group["ops"].values()), "ops": dict(group["ops"].most_common()),
            "reasons": reasons, "dims": [_DIM_NAME.sub(r"\1", d).split(" ")[0]
                                         for d in group["dims"]],
            "rewrites_declined": rewrites,
        })
    out.sort(key=lambda g: (-g["nodes"], g["module"]))
    return out


def leftover_lines(groups: Iterable[Mapping], short: bool = False,
                   inputs: Collection[str] | None = None) -> list[str]:
    """``layers.*.self_attn (x2): Reshape x4, Concat x2; blocked by ...`` per group, then the
    rewrites declined there; ``short``: the reasons' kinds and the dims' names only
    (``...: Reshape x4 (dynamic dims batch, seq)``), of them those of ``inputs`` (the graph
    inputs' dims, which ``--input-shape`` fixes) where given, the others (an inferred
    ``unk__3``, a value's ``/model/Gather_output_0[0]``: nothing a user sets) counted."""
    lines = []
    for group in groups:
        times = f" (x{group['instances']})" if group["instances"] > 1 else ""
        ops = ", ".join(f"{op} x{n}" for op, n in group["ops"].items())
        head = f"{group['module']}{times}: {ops}"
        if short:
            kinds = dict.fromkeys(r.split(":")[0] for r in group["reasons"]
                                  if not r.startswith("blocked by dynamic dims"))
            dims = list(dict.fromkeys(group.get("dims") or ()))
            if dims:
                kinds[_dims_said(dims, inputs)] = None
            lines.append(f"{head} ({'; '.join(kinds)})")
            continue
        rewrites = group.get("rewrites_declined") or []
        lines.append(f"{head}; {'; '.join(group['reasons'])}" + (
            f"; rewrites declined there: {'; '.join(rewrites)}" if rewrites else ""))
    return lines


def _dims_said(dims: list[str], inputs: Collection[str] | None) -> str:
    """``dynamic dims batch, seq`` (and how many others, the values' own, where ``inputs``
    tells the graph inputs' dims apart)."""
    if inputs is None:
        return "dynamic dims " + ", ".join(dims)
    named = [d for d in dims if d in inputs]
    others = len(dims) - len(named)
    internal = f"{others} more of values the graph computes (--explain)" if others else ""
    if not named:
        return f"dynamic dims: {internal}"
    return f"dynamic dims {', '.join(named)}" + (f" and {internal}" if internal else "")


def folded_regions(model: ir.Model) -> list[dict]:
    """The folded initializers (``onnxfold.folded_from``) grouped by the module pattern of the
    node that computed each (recorded by the fold), else of the nodes they replaced (their
    TorchScript names): pattern, initializers, nodes folded, bytes, a few node names."""
    groups: dict[str, dict] = {}
    for graph in all_graphs(model):
        for value in graph.initializers.values():
            tensor = value.const_value
            if tensor is None or FOLDED_FROM not in tensor.metadata_props:
                continue
            names = [n for n in tensor.metadata_props[FOLDED_FROM].split(",") if n]
            path = tensor.meta.get(FOLDED_MODULE_KEY)
            if not path:  # (no metadata: TorchScript names) the outermost scope it touches
                path = min({path_of_name(n) for n in names} or {""}, key=len)
            group = groups.setdefault(pattern(path), {"initializers": 0, "nodes": 0,
                                                      "bytes": 0, "examples": []})
            group["initializers"] += 1
            group["nodes"] += len(names)
            if tensor.dtype != ir.DataType.STRING:
                group["bytes"] += tensor.nbytes
            if len(group["examples"]) < EXAMPLES:
                group["examples"].append(value.name or "")
    out = [{"module": name, **group} for name, group in groups.items()]
    out.sort(key=lambda g: (-g["nodes"], g["module"]))
    return out
