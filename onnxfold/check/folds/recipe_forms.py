"""Which recipes a file may carry: the original's computation, or a rewrite's parameter built
from the original's tensors with the ops rules build parameters with.

A recipe a file carries is the file's own claim (``verification``). Re-run, it shows that its
tensor is what the recipe computes; it shows nothing about the tensor if the recipe itself may
be anything: three Transposes, a Concat and an ``Add`` of a constant held in the recipe compute
a merged weight moved by 40 ulps as well as the true recipe computes the true one. So a recipe
counts only where each of its nodes is a node of the original (the same name, op,
attributes, inputs and outputs) or an op rules build parameters with (:data:`PARAMETER_OPS`:
a recipe joins the recipes of the constants it reads, which other rules may have made), and
each constant it holds itself is an integer one (axes, shapes, sizes; never cast to a
float), a value the re-run
takes from a model, or a number the original holds (a float attribute: a
BatchNormalization's epsilon, a ConstantOfShape's value; or a one-element tensor).

The set is the check's own, by op: no rule is named here, nor what a rule declares in
``rules/`` read (a wrong declaration must not loosen the check, and a file's word for which
rule made a tensor proves nothing). What this cannot rule out: arithmetic of the original's
own tensors composing another value; a tensor that passes is a parameter judged with the
file's windows on the input sets (``check/rewrites/in_files.py``), as the verdict says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.check.folds.recipe_runs import reads_itself
from onnxfold.check.judging.verdicts import STRUCTURE_ELEMENTS
from onnxfold.ir.recipes import Recipe

# the ops rules compute their parameters with, over the original's tensors: a recipe joins
# the recipes of the constants it reads, which other rules may have made (a CastLike made a
# Cast, then the product's scale folded), so the set is the rules' union
PARAMETER_OPS = frozenset({
    "Concat",  # merge_shared_input_matmuls
    "Mul",  # merge_constant_factors, scale_the_product_once, postpone_expand, fuse_mul_...
    "Cast",  # cast_like_of_a_constant, transpose_before_widening
    "Transpose",  # transpose_before_widening
    "Expand",  # postpone_expand, constant_of_shape_as_expand
    "Reshape", "Add", "Sub", "Neg", "Div", "Sqrt",  # fuse_{mul,add,batch_norm}_into_conv/gemm
})


def foreign(name: str, recipe: Recipe, original: ir.Model,
            resolved: Callable[[str], bool] = lambda leaf: False) -> str | None:
    """Why ``recipe`` (of the tensor ``name``) is not the original's computation of a
    rewrite's parameter, or None when it is. ``resolved``:
    whether a leaf's name is a value the re-run takes from the original (its initializer, or
    a value the check computes from it), whatever the recipe holds under that name."""
    if reads_itself(name, recipe):
        return "its recipe reads the tensor it makes"
    nodes = None
    for node in recipe.nodes:
        if node.domain in ("", "ai.onnx") and node.op_type in PARAMETER_OPS:
            continue
        nodes = nodes if nodes is not None else _original_nodes(original)
        if _comparable(node) not in nodes.get(node.name, ()):
            return (f"its recipe computes with {node.op_type} (node {node.name or '?'}), "
                    "neither a node of the original nor an op a rule builds parameters with")
    widened = _own_integers_widened(recipe, resolved)
    if widened is not None:
        return (f"its recipe casts integers of its own ({widened}) to a float: a number of "
                "its own making, not the original's")
    numbers: set[bytes] | None = None
    for leaf in recipe.leaves:
        if leaf.value is None or resolved(leaf.name):
            continue
        value = np.asarray(leaf.value)
        if value.dtype.kind in "iub" and value.size <= STRUCTURE_ELEMENTS:
            continue
        numbers = numbers if numbers is not None else _numbers(original)
        if value.size != 1 or value.dtype.kind != "f" or _key(value) not in numbers:
            return (f"its recipe holds a constant {leaf.name} of {value.size} "
                    f"{value.dtype} value(s) that the original does not hold")
    return None


_FLOATS = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                     onnx.TensorProto.BFLOAT16})


def _own_integers_widened(recipe: Recipe, resolved: Callable[[str], bool]) -> str | None:
    """The first constant the recipe holds itself (a value the re-run does not take from a
    model) that reaches a Cast to a float type: integers are allowed a recipe as axes, shapes
    and sizes, and ``Cast(2**23 + 40) / Cast(2**23)`` would make them any float factor."""
    own = {leaf.name for leaf in recipe.leaves
           if leaf.value is not None and not resolved(leaf.name)}
    origin = {name: name for name in own}
    for node in recipe.nodes:
        source = next((origin[i] for i in node.input if i in origin), None)
        if source is None:
            continue
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        if node.op_type == "Cast" and to in _FLOATS:
            return source
        origin.update({o: source for o in node.output if o})
    return None


def _comparable(node: onnx.NodeProto) -> bytes:
    """A node as compared with the original's: its proto without doc string or metadata."""
    bare = onnx.NodeProto()
    bare.CopyFrom(node)
    bare.ClearField("doc_string")
    bare.ClearField("metadata_props")
    return bare.SerializeToString(deterministic=True)


def _original_nodes(original: ir.Model) -> dict[str, set[bytes]]:
    """The original's main-graph nodes by name, each as :func:`_comparable` sees it."""
    found: dict[str, set[bytes]] = {}
    for node in original.graph:
        proto = ir.serde.serialize_node(node)
        found.setdefault(proto.name, set()).add(_comparable(proto))
    return found


def _defaults(node: ir.Node, opset: int) -> Iterator[object]:
    """The float defaults of ``node``'s op (ONNX's schema) that the node leaves unset."""
    if node.domain not in ("", "ai.onnx"):
        return
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if name not in node.attributes and default.type == onnx.AttributeProto.FLOAT:
            yield np.float32(default.f)


def _key(value: np.ndarray) -> bytes:
    """A one-element float as float64 bytes (a float32 epsilon held as float32 or float64)."""
    return np.asarray(value, np.float64).reshape(-1)[:1].tobytes()


def _numbers(original: ir.Model) -> set[bytes]:
    """The one-element floats the original holds: float attributes, one-element tensor
    attributes (a ConstantOfShape's value), one-element initializers."""
    keys: set[bytes] = set()
    for value in _held(original):
        array = np.asarray(value)
        if array.size == 1 and array.dtype.kind == "f":
            keys.add(_key(array))
    return keys


def _held(original: ir.Model) -> Iterator[object]:
    """Every number the original holds: its nodes' attributes, those left at their
    defaults included (a BatchNormalization's epsilon unset is 1e-5), and its initializers."""
    opset = original.opset_imports.get("", original.opset_imports.get("ai.onnx", 1))
    for node in original.graph:
        yield from _defaults(node, opset)
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.FLOAT:
                yield np.float32(attr.as_float())
            elif attr.type == ir.AttributeType.TENSOR and attr.as_tensor().size == 1:
                yield attr.as_tensor().numpy()
    for value in original.graph.initializers.values():
        tensor = value.const_value
        if tensor is not None and tensor.size == 1:
            yield tensor.numpy()
