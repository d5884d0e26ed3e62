"""Each attribute of a default-domain node of the type its op's schema gives it, even where
onnx's checker is off (``--skip-check``, ``check=False``).

The fold, the rules and the check read an attribute as its schema types it (a ``Constant``'s
``value`` as a tensor, a ``ConstantOfShape``'s fill, a ``Cast``'s ``to``); a model whose
``Constant`` carried ``value`` as an int ended in an internal error there. onnx's checker
refuses such a model, and so does onnxruntime for every op but ``Constant`` (whose value it
reads by the attribute's type, whatever its name): refused here in one line, with or without
the checker. Unknown ops and attributes are not this check's (others judge those), nor are a
function body's references to its caller's attributes (typed by the call); a reference in a
model's own graphs, which have no caller, is refused (its value is nothing: it ended in an
internal error wherever a tensor was read).
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx
import onnx_ir as ir

from onnxfold.errors import InputError
from onnxfold.host.terminal import printable
from onnxfold.ir.graph import is_default_op, node_label

_Types = dict[str, ir.AttributeType] | None  # an op's attribute types (None: no schema)
# onnx's schema types by onnx-ir's (the same names: the AttributeProto's types)
_SCHEMA_TYPES = {getattr(onnx.defs.OpSchema.AttrType, kind.name): kind
                 for kind in ir.AttributeType if hasattr(onnx.defs.OpSchema.AttrType, kind.name)}


def refuse_mistyped_attributes(graphs: Iterable[ir.Graph], opset: int | None, path: str
                               ) -> None:
    """InputError naming the first attribute of a node in ``graphs`` (a model's, not a
    function body's) that refers to a caller's attribute (``ref_attr_name``: only a function
    body has a caller), or of a default-domain node whose type is not the one its op's schema
    at ``opset`` gives it. An opset the installed onnx does not know (newer, or below 1) types
    nothing: its ops may mean something else."""
    version = opset if opset is not None and 1 <= opset <= onnx.defs.onnx_opset_version() \
        else 0  # (0: none judged)
    schemas: dict[str, _Types] = {}
    for graph in graphs:
        for node in graph:
            attributes = node.attributes
            if not attributes:
                continue
            op = node.op_type
            types = None
            if version and is_default_op(node):
                if op not in schemas:
                    schemas[op] = _types(op, version)
                types = schemas[op]
            for name, attr in attributes.items():
                if attr.is_ref():
                    raise InputError(
                        f"{path}: node '{printable(node_label(node))}' ({op}): attribute "
                        f"{name} refers to an attribute of a function's caller "
                        f"('{printable(attr.ref_attr_name or '')}') outside any function")
                wanted = types.get(name) if types is not None else None
                if wanted is not None and attr.type != wanted:
                    raise InputError(
                        f"{path}: node '{printable(node_label(node))}' ({op}): attribute {name} is "
                        f"{attr.type.name}, the op's schema types it {wanted.name} (onnx's "
                        "checker refuses the model)")


def _types(op: str, opset: int) -> _Types:
    try:
        schema = onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return None
    return {name: kind for name, attr in schema.attributes.items()  # (a type onnx-ir does
            if (kind := _SCHEMA_TYPES.get(attr.type)) is not None}  # not know: not judged)
