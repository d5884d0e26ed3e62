"""``--target-opset N``: the model converted to opset N of the default domain before folding.

onnx's version converter (``onnx.version_converter``) does the conversion: its adapters turn
each op into its form at the target opset (an attribute that became an input, an op that was
split or renamed) and fail where an op has no form there. It works on a ``ModelProto``; the
weights do not go through it as bytes: onnx-ir serializes a memory-mapped weight as a reference
to its file, the converter passes references through, and after it each initializer that kept
its name, dtype and shape gets its original tensor object back (the checked, memory-mapped
view), so a multi-GB model converts in about the memory of its graph.

A failure is one line naming the opsets and the converter's reason (:class:`InputError`): the
conversion is what the user asked for, not a step to skip.
"""

from __future__ import annotations

import re

import onnx
import onnx.version_converter
import onnx_ir as ir

from onnxfold.errors import InputError
from onnxfold.ir.graph import all_graphs

DEFAULT_DOMAINS = ("", "ai.onnx")


def default_opset(model: ir.Model) -> int | None:
    """The model's opset of the default domain (None: it imports none)."""
    for domain in DEFAULT_DOMAINS:
        if domain in model.opset_imports:
            return model.opset_imports[domain]
    return None


def convert_opset(model: ir.Model, target: int, label: str = "model") -> ir.Model:
    """``model`` at opset ``target`` of the default domain: itself when it is there already,
    else a new ``ir.Model`` converted by onnx's version converter, its weights the original
    tensor objects. InputError where the converter cannot convert it."""
    current = default_opset(model)
    newest = onnx.defs.onnx_opset_version()
    if not 1 <= target <= newest:
        raise InputError(f"--target-opset {target}: onnx {onnx.__version__} knows opsets 1 to "
                         f"{newest}")
    if current is None:
        raise InputError(f"--target-opset {target}: {label} imports no opset of the default "
                         "domain, so there is nothing to convert")
    if current == target:
        return model
    proto = ir.serde.serialize_model(model)
    try:
        converted = onnx.version_converter.convert_version(proto, target)
        _check_nodes(converted)
    except Exception as e:  # the converter's C++ assertions arrive as RuntimeError
        raise InputError(f"--target-opset {target}: onnx's version converter cannot convert "
                         f"{label} from opset {current}: {_reason(e)}") from None
    del proto
    result = ir.serde.deserialize_model(converted)
    _reattach_weights(model, result)
    result.meta.update(model.meta)
    return result


def _check_nodes(model: onnx.ModelProto) -> None:
    """Every node of the main graph against its schema at the converted opsets (the converter
    can leave an attribute the target opset does not have: ReduceMean 18 -> 17 kept
    ``noop_with_empty_axes``). Node by node: the whole checker would look for the weights'
    files, which the proto only references."""
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = model.ir_version
    ctx.opset_imports = {o.domain: o.version for o in model.opset_import}
    for node in model.graph.node:
        # (a node with a subgraph is left out: checked alone, the subgraph's reads of outer
        # values look undefined)
        if node.domain in DEFAULT_DOMAINS and not any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                for a in node.attribute):
            onnx.checker.check_node(node, ctx)


def _reason(error: Exception) -> str:
    """The converter's message without its C++ source location, on one line."""
    text = " ".join(str(error).split()) or type(error).__name__
    text = re.sub(r"^\S*\.(?:h|cc|cpp):\d+: (?:\w+: )?", "", text)
    text = re.sub(r"^Assertion `[^`]*` failed: ", "", text)
    if "No initializer or constant input" in text:
        text += (" (the converter needs that input as a constant, and the graph computes it: "
                 "fold first, `onnxfold optimize IN -o FOLDED`, then convert the folded model)")
    return text[:400]


def _reattach_weights(original: ir.Model, converted: ir.Model) -> None:
    """Give each initializer of ``converted`` the tensor object of the initializer of
    ``original`` with the same name (unique in the model), where dtype and shape agree: the
    converter copied references, and the original objects are the checked, memory-mapped
    views."""
    by_name: dict[str, ir.TensorProtocol | None] = {}
    for graph in all_graphs(original):
        for name, value in graph.initializers.items():
            by_name[name] = None if name in by_name else value.const_value  # ambiguous: none
    for graph in all_graphs(converted):
        for name, value in graph.initializers.items():
            old, new = by_name.get(name), value.const_value
            if old is not None and new is not None and old.dtype == new.dtype and \
                    tuple(old.shape) == tuple(new.shape):
                value.const_value = old
