"""What stayed (and what folded), grouped by the module path the exporter recorded.

PyTorch exporters record where each node came from: the dynamo exporter in the node's
``metadata_props`` (``pkg.torch.onnx.name_scopes``, a list of module paths ending with the
op's own name; ``namespace``, ``path: class`` pairs joined by ``/``), the TorchScript exporter
in the node's name (``/model/layers.3/self_attn/Reshape_2``). Layer indices become ``*`` so
that the 32 layers of a decoder are one line: ``layers.*.self_attn (x32): Reshape x4``.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterable, Mapping

import onnx_ir as ir

from onnxfold.fold.materialize import PROVENANCE_KEY
from onnxfold.ir.graph import all_graphs, node_label

TOP_LEVEL = "(top level)"
NAME_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
NAMESPACE_KEY = "namespace"
_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")
EXAMPLES = 3  # reasons shown per group


def module_path(node: ir.Node) -> str:
    """The module path of ``node`` (``layers.3.self_attn``), or "" when none was recorded."""
    scopes = node.metadata_props.get(NAME_SCOPES_KEY)
    if scopes:
        try:
            parsed = ast.literal_eval(scopes)
        except (ValueError, SyntaxError):
            parsed = None
        if isinstance(parsed, list) and len(parsed) > 1 and \
                all(isinstance(s, str) for s in parsed):
            return _innermost_module(parsed[:-1])
    namespace = node.metadata_props.get(NAMESPACE_KEY)
    if namespace and "/" in namespace:
        paths = [part.split(":", 1)[0].strip() for part in namespace.split("/")[:-1]]
        return _innermost_module(paths)
    return path_of_name(node.name or "")


def _innermost_module(paths: list[str]) -> str:
    """The last path that names a module (dynamo's hooks are not modules: ``_empty...``)."""
    for path in reversed(paths):
        if path and not path.startswith("_"):
            return path
    return ""


def path_of_name(name: str) -> str:
    """The module path in a TorchScript node name: ``/m/layers.3/attn/Reshape_2`` ->
    ``m.layers.3.attn``; "" for a name without ``/`` scopes."""
    if not name.startswith("/"):
        return ""
    return ".".join(part for part in name.split("/")[1:-1] if part)


def pattern(path: str) -> str:
    """``layers.3.self_attn`` -> ``layers.*.self_attn``; "" -> :data:`TOP_LEVEL`."""
    return _INDEX.sub("*", path) if path else TOP_LEVEL


def group_leftovers(model: ir.Model, declined: Iterable[Mapping[str, str]],
                    blocked: Iterable[Mapping[str, str]],
                    rejected: Mapping[ir.Node, str] | None = None) -> list[dict]:
    """What stayed, one entry per module pattern, most nodes first: the pattern, how many
    module instances it covers, the op counts and the distinct reasons (at most
    :data:`EXAMPLES`). ``declined``/``blocked``: the report's ``declined_nodes`` (key
    ``reason``) and ``dynamic_shapes`` (key ``blocked_by``). ``rejected``: nodes a rewrite
    declined (``rule: reason``), named among a group's reasons where something stayed in that
    module (a rewrite declined elsewhere, a MatMul not fused, is no leftover)."""
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
        for (op, why), n in declines.get(name, Counter()).most_common(EXAMPLES):
            rule, _, because = why.partition(": ")
            reasons.append(f"{rule} not applied to {op} x{n}: {because}")
        out.append({
            "module": name, "instances": len(group["instances"]),
            "nodes": sum(group["ops"].values()), "ops": dict(group["ops"].most_common()),
            "reasons": reasons,
        })
    out.sort(key=lambda g: (-g["nodes"], g["module"]))
    return out


def leftover_lines(groups: Iterable[Mapping]) -> list[str]:
    """``layers.*.self_attn (x2): Reshape x4, Concat x2; blocked by ...`` per group."""
    lines = []
    for group in groups:
        times = f" (x{group['instances']})" if group["instances"] > 1 else ""
        ops = ", ".join(f"{op} x{n}" for op, n in group["ops"].items())
        lines.append(f"{group['module']}{times}: {ops}; {'; '.join(group['reasons'])}")
    return lines


def folded_regions(model: ir.Model) -> list[dict]:
    """The folded initializers (``onnxfold.folded_from``) grouped by the module pattern of the
    nodes they replaced: pattern, initializers, nodes folded, bytes, a few node names."""
    groups: dict[str, dict] = {}
    for graph in all_graphs(model):
        for value in graph.initializers.values():
            tensor = value.const_value
            if tensor is None or PROVENANCE_KEY not in tensor.metadata_props:
                continue
            names = [n for n in tensor.metadata_props[PROVENANCE_KEY].split(",") if n]
            paths = {path_of_name(n) for n in names} or {""}
            path = min(paths, key=len)  # the outermost scope the region touches
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
