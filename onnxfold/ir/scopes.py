"""The module path an exporter recorded for a node: where in the PyTorch model it came from.

The dynamo exporter records it in the node's ``metadata_props`` (``pkg.torch.onnx.name_scopes``,
a list of module paths ending with the op's own name; ``namespace``, ``path: class`` pairs
joined by ``/``), the TorchScript exporter in the node's name
(``/model/layers.3/self_attn/Reshape_2``). Reports group what folded and what stayed by it.
"""

from __future__ import annotations

import ast
import re
import warnings

import onnx_ir as ir

NAME_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
NAMESPACE_KEY = "namespace"
# a list of quoted strings of printable ASCII without a quote or backslash, as the exporter
# writes it: such a literal means exactly its characters, so a regular expression reads it
# (ast.literal_eval's parse costs ~40 us a node); any other text is parsed as a literal
_ITEM = r"'([ -&(-\[\]-~]*)'"
_PLAIN_LIST = re.compile(rf"\[{_ITEM}(?:, {_ITEM})*\]")
_PLAIN_ITEM = re.compile(_ITEM)


def module_path(node: ir.Node) -> str:
    """The module path of ``node`` (``layers.3.self_attn``), or "" when none was recorded."""
    scopes = node.metadata_props.get(NAME_SCOPES_KEY)
    if scopes:
        parsed = _string_list(scopes)
        if isinstance(parsed, list) and len(parsed) > 1 and \
                all(isinstance(s, str) for s in parsed):
            return _innermost_module(parsed[:-1])
    namespace = node.metadata_props.get(NAMESPACE_KEY)
    if namespace and "/" in namespace:
        paths = [part.split(":", 1)[0].strip() for part in namespace.split("/")[:-1]]
        return _innermost_module(paths)
    return path_of_name(node.name or "")


def _string_list(text: str) -> object:
    """``text`` read as a Python literal (None: it is not one)."""
    if _PLAIN_LIST.fullmatch(text):
        return _PLAIN_ITEM.findall(text)
    try:
        with warnings.catch_warnings():  # an invalid escape ('\d') warns on Python 3.12+
            warnings.simplefilter("ignore")
            return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None  # not a literal, or one no literal parse survives ({[]}: TypeError)


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


# tensor.meta of a folded initializer: the module path of the node that computed it (kept in
# memory for the report, not written: the nodes are gone once the fold is materialized)
FOLDED_MODULE_KEY = "onnxfold.folded_module"
