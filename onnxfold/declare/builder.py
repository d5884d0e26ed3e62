"""What a pattern rule's rewrite builds and returns: :class:`OpBuilder` and :class:`Replacement`.

A rewrite receives an :class:`OpBuilder` (``op``) and the match, and returns the new values::

    return op.Transpose(x, perm=perm)          # in place of the matched node's output

``op.<OpType>(*inputs, **attributes)`` makes a one-output node of the default domain
(attributes as Python values or ``ir.Attr``; ``_attributes`` another node's to copy;
``_domain``, ``_name``, ``_dtype`` and ``_shape`` set the domain, the base of the output's
name and its type), ``op.node(op_type, ...)`` the same for an op type held in a variable,
``op.constant(array, name)`` a new initializer, ``op.outputs(...)`` a node of several
outputs, ``op.inline(graph)`` a subgraph's nodes moved into the matched graph. Each is named
as it is built (a fresh name, never one the model uses), and nothing is in the graph yet: the
driver puts what was built before the matched node, in the order it was built, and routes the
readers of each replaced value to its replacement.

The rewrite returns a value (the replacement of the matched node's only output, or its first),
a tuple of values (of each of its outputs), or a :class:`Replacement` for the rest: values
replaced anywhere in the graph, nodes that keep their place but read other inputs, and where
the new nodes go. A new value that replaces an output takes that output's type and shape
unless ``_dtype`` or ``_shape`` said otherwise. The driver then removes the replaced values'
producers and the nodes of the match this left without readers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import onnx_ir as ir


class _Unset:
    """The type of :data:`UNSET`."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()  # a dtype or shape the rewrite left to the driver
_NONE: Mapping[str, Any] = MappingProxyType({})  # no attributes


@dataclass(frozen=True)
class Out:
    """One output of a node made with :meth:`OpBuilder.outputs`: the base of its name (None:
    the matched node's output name), its dtype and its shape (:data:`UNSET`: taken from the
    value it replaces, if any)."""

    name: str | None = None
    dtype: ir.DataType | _Unset | None = UNSET
    shape: ir.Shape | _Unset | None = UNSET


@dataclass(frozen=True)
class Replacement:
    """What a rewrite changes, in the terms of values (for what a value or a tuple of values
    cannot say).

    ``values``: each old value's readers read the new one (old graph outputs keep their
    names); ``inputs``: existing nodes that stay where they are and read these inputs from
    now on (a shorter list drops trailing inputs); ``shapes``: existing values whose shape
    changes with them; ``before``: where the new nodes go (default: before the matched node);
    ``moved``: existing nodes of this graph moved there first, in order (what computes a
    value the new nodes read, found after ``before``)."""

    values: Mapping[ir.Value, ir.Value] = field(default_factory=dict)
    inputs: Mapping[ir.Node, Sequence[ir.Value | None]] = field(default_factory=dict)
    shapes: Mapping[ir.Value, ir.Shape | None] = field(default_factory=dict)
    before: ir.Node | None = None
    moved: Sequence[ir.Node] = ()


Replaced = ir.Value | Sequence[ir.Value] | Replacement  # what a rewrite returns


@dataclass(frozen=True)
class BuiltConstant:
    """A new initializer (registered by the driver)."""

    value: ir.Value


@dataclass(frozen=True)
class BuiltNode:
    """A new node and, per output, whether the rewrite left its dtype and its shape unset."""

    node: ir.Node
    untyped: tuple[tuple[bool, bool], ...]


@dataclass(frozen=True)
class Inlined:
    """A subgraph whose nodes and initializers move into the matched graph (its outputs then
    are outputs of it no more)."""

    graph: ir.Graph
    initializers: tuple[ir.Value, ...]
    nodes: tuple[ir.Node, ...]


Built = BuiltConstant | BuiltNode | Inlined


class OpBuilder:
    """Builds a rewrite's new nodes and constants, names them (fresh names, never one the
    model uses) and records them in order (:attr:`built`) for the driver.

    ``fresh``: the model's name allocator; ``replaced_name``: the default base of a new
    output's name (the matched node's output name); ``opset``: the model's default-domain
    opset (which form of an op to build)."""

    def __init__(self, fresh: Callable[[str], str], replaced_name: str | None,
                 opset: int) -> None:
        self.fresh, self.replaced_name, self.opset = fresh, replaced_name, opset
        self.built: list[Built] = []

    def __getattr__(self, op_type: str) -> Callable[..., ir.Value]:
        if not op_type[:1].isupper():  # dunders and typos are no op types
            raise AttributeError(op_type)
        return functools.partial(self.node, op_type)

    def node(self, op_type: str, *inputs: ir.Value | None, _domain: str = "",
             _name: str | None = None, _dtype: ir.DataType | _Unset | None = UNSET,
             _shape: ir.Shape | _Unset | None = UNSET, _attributes: Mapping[str, Any] = _NONE,
             **attributes: Any) -> ir.Value:
        """A node of ``op_type`` reading ``inputs`` (``None``: an omitted optional input),
        with ``_attributes`` (another node's, say) and then ``attributes``; its only output,
        named after ``_name`` (default: the matched node's output)."""
        return self.outputs(op_type, *inputs, _domain=_domain, _attributes=_attributes,
                            _outputs=[Out(_name, _dtype, _shape)], **attributes)[0]

    def outputs(self, op_type: str, *inputs: ir.Value | None, _outputs: Sequence[Out],
                _domain: str = "", _attributes: Mapping[str, Any] = _NONE,
                **attributes: Any) -> tuple[ir.Value, ...]:
        """A node of ``op_type`` with one output per ``_outputs`` entry; its outputs."""
        converted = [ir.convenience.convert_attribute(name, value)
                     for name, value in (*_attributes.items(), *attributes.items())]
        node = ir.Node(_domain, op_type, inputs, attributes=converted,
                       num_outputs=len(_outputs), name=self.fresh(op_type))
        for value, out in zip(node.outputs, _outputs):
            value.name = self.fresh(out.name or self.replaced_name or op_type)
            if out.dtype is not None and not isinstance(out.dtype, _Unset):
                value.dtype = out.dtype  # unknown stays unknown: TensorType(None) cannot save
            if not isinstance(out.shape, _Unset):
                value.shape = out.shape
        self.built.append(BuiltNode(node, tuple(
            (isinstance(out.dtype, _Unset), isinstance(out.shape, _Unset))
            for out in _outputs)))
        return tuple(node.outputs)

    def constant(self, array: np.ndarray, name: str) -> ir.Value:
        """A new initializer holding ``array``, named after ``name``."""
        fresh = self.fresh(name)
        value = ir.Value(name=fresh, shape=ir.Shape(array.shape),
                         type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                         const_value=ir.Tensor(array, name=fresh))
        self.built.append(BuiltConstant(value))
        return value

    def inline(self, graph: ir.Graph) -> tuple[ir.Value, ...]:
        """``graph``'s outputs, its nodes and initializers to move into the matched graph (the
        driver moves them, renaming the initializers, when it puts the rewrite in; until then
        ``graph`` is as it was)."""
        self.built.append(Inlined(graph, tuple(graph.initializers.values()), tuple(graph)))
        return tuple(graph.outputs)
