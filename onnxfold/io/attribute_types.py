"""Each attribute of a default-domain node of the type its op's schema gives it, even where
onnx's checker is off (``--skip-check``, ``check=False``).

The fold, the rules and the check read an attribute as its schema types it (a ``Constant``'s
``value`` as a tensor, a ``ConstantOfShape``'s fill, a ``Cast``'s ``to``); a model whose
``Constant`` carried ``value`` as an int ended in an internal error there. onnx's checker
refuses such a model, and so does onnxruntime for every op but ``Constant`` (whose value it
reads by the attribute's type, whatever its name): refused here in one line, with or without
the checker. Unknown ops and attributes are not this check's (others judge those), nor are a
function body's references to its caller's attributes (typed by the call).
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
    """InputError naming the first attribute of a default-domain node in ``graphs`` whose
    type is not the one its op's schema at ``opset`` gives it. An opset the installed onnx
    does not know (newer, or below 1) is not judged: its ops may mean something else."""
    if opset is None or not 1 <= opset <= onnx.defs.onnx_opset_version():
        return
    schemas: dict[str, _Types] = {}
    for graph in graphs:
        for node in graph:
            attributes = node.attributes
            if not attributes or not is_default_op(node):
                continue
            op = node.op_type
            types = schemas[op] if op in schemas else schemas.setdefault(op, _types(op, opset))
            if types is None:
                continue
            for name, attr in attributes.items():
                wanted = types.get(name)
                if wanted is not None and attr.type != wanted and not attr.is_ref():
                    raise InputError(
                        f"{path}: node '{printable(node_label(node))}' ({op}): attribute {name} is "
                        f"{attr.type.name}, the op's schema types it {wanted.name} (onnx's "
                        "checker refuses the model)")


def _types(op: str, opset: int) -> _Types:
    try:
        schema = onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return None
    return {name: _SCHEMA_TYPES[attr.type] for name, attr in schema.attributes.items()}
