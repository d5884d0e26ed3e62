"""Symbolic shape values: what the shape scaffolding of a graph computes, element by element.

onnx's shape inference gives every value a shape whose dims are ints or names; it does not
expose what the *values* of shape tensors are (``Shape(x)``, ``Gather`` of it, ``Concat`` of
that with constants...), which is what folding the scaffolding of a model with dynamic axes
needs. :func:`shape_values` follows those small integer tensors through the ops that build
shapes, element by element: each element is an int, or a :class:`Sym` (a dynamic dim, or an
expression of them). A value whose elements are all ints is a constant for every value of the
dynamic dims; one that keeps a ``Sym`` names the dim that blocks it.

What each op does is declared per op in ``rules/shape_steps.py`` (``@shape_value``,
``@shape_dims``) and reaches this module as a :class:`ShapeSteps` value (the catalogue's
``shape_steps``); this module keeps the dim algebra and the walk over the graph.

Two dims are the same symbol when they are the same axis of the same value, or carry the same
name from shape inference (a graph input's ``dim_param``, or the name inference gave a dim it
proved equal to it) - unless the inputs use that name more than once: onnxruntime does not
check that such dims agree, so they prove nothing, except under the user's
``--assume-named-dims-equal`` (:func:`shared_dim_names`' ``assume_equal``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import numpy as np
import onnx_ir as ir

from onnxfold.analysis.dim_algebra import MAX_ELEMENTS, Dim, Dims, Known, Sym
from onnxfold.analysis.step_inputs import (
    REFINED_KEY,
    Arrays,
    DimsInputs,
    KnownMapping,
    ShapeSteps,
    describe_dim,
    input_dims,
    known_constant,
    output_dims,
    shared_dim_names,
    value_step,
)
from onnxfold.ir.graph import DEFAULT_DOMAINS, all_graphs, is_static_dim

__all__ = ["Completing", "KnownValues", "ShapeWalk", "blocked_scaffolding", "shape_values"]

# which shapeless values a walk gives a shape (``shape_values``' ``complete``); None: none
Completing = Callable[[ir.Value], bool] | None


def _fits(known: Known) -> bool:
    """Whether every static element is representable in the value's dtype (onnxruntime wraps
    what is not: such a value is left to it)."""
    if known.dtype == np.bool_:
        return True
    info = np.iinfo(known.dtype)
    return all(info.min <= e <= info.max for e in known.elements if isinstance(e, int))


def _of_inputs(d: Dim | None, inputs: frozenset[int], inputs_dims: frozenset[str]) -> bool:
    """Whether ``d`` is an int or made of the graph inputs' dims only."""
    if isinstance(d, int):
        return True
    if not isinstance(d, Sym):
        return False
    expr = d.expr
    if expr[0] == "dim":  # an atom itself (most dims): no list of atoms made
        return expr[1] in inputs_dims
    if expr[0] == "axis":
        return expr[1] in inputs
    return all((a.expr[0] == "dim" and a.expr[1] in inputs_dims) or
               (a.expr[0] == "axis" and a.expr[1] in inputs) for a in d.atoms())


def _all_static(values: Sequence[ir.Value | None], complete: Completing) -> bool:
    """Whether no value has a dynamic dim: nothing to refine. A value without a shape has
    none, unless ``complete`` takes it (the walk gives it one where its op's step derives its
    dims)."""
    for value in values:
        if value is None:
            continue
        shape = value.shape
        if shape is None:
            if complete is not None and complete(value) and \
                    isinstance(value.type, ir.TensorType):
                return False
        elif not all(map(is_static_dim, shape.dims)):
            return False  # (Paddle's -1: a dim of any size)
    return True


def _completed(out: ir.Value, derived: Dims | None) -> bool:
    """Give ``out``, a tensor value shape inference left without a shape, the rank and dims
    its op's step derived (``derived``); whether it got one. A static dim is that int, a
    named dim (``("dim", name)``) that name, as inference would have named it; any other is
    left unnamed, and :func:`_refined_dims` records it where it is an expression of the
    graph inputs' dims (a symbol of another value's axis would not outlive the walk).

    onnx infers no rank for ``Reshape(x, Concat(Shape(y)))`` before Reshape-14 (an opset-13
    export's attention mask), and every value downstream of it is then shapeless: no
    broadcast, and no neutral ``+ 0`` after it, could be proved."""
    if derived is None or not isinstance(out.type, ir.TensorType):
        return False
    out.shape = ir.Shape([_completed_dim(d) for d in derived])
    return True


def _completed_dim(d: Dim | None) -> int | str | None:
    """A derived dim as :func:`_completed` writes it in a shape."""
    if isinstance(d, int):
        return d if d >= 0 else None
    return d.expr[1] if d is not None and d.expr[0] == "dim" else None


def _refine(node: ir.Node, known: dict[ir.Value, Known], arrays: Arrays,
            ambiguous: frozenset[str], inputs: frozenset[int], inputs_dims: frozenset[str],
            placeholders: dict[str, Dim], steps: ShapeSteps, complete: Completing = None
            ) -> None:
    """Record in ``REFINED_KEY`` the dims of ``node``'s outputs that shape inference left as a
    name of its own, an ambiguous name or none, and the node's semantics prove an int or an
    expression of the graph inputs' dims; ``complete``: the outputs inference left without a
    shape to give the one their op's step derives (:func:`_completed`)."""
    def dims(v: ir.Value | None) -> Dims | None:
        return input_dims(v, ambiguous)

    if _all_static(node.outputs, complete):  # nothing to refine (most nodes, at once)
        for out in node.outputs:
            if out is not None and out.shape is not None:
                meta = out.meta
                if REFINED_KEY in meta:
                    del meta[REFINED_KEY]
        return
    def of_inputs(d: Dim) -> bool:
        return _of_inputs(d, inputs, inputs_dims)

    every_output = steps.every_output_dims.get(node.op_type)
    if every_output is not None:
        derived_all = every_output(DimsInputs(node, dims, known, arrays, of_inputs))
    else:
        derived_all = [output_dims(node, dims, known, arrays, steps, of_inputs)]
    for k, out in enumerate(node.outputs):
        if out is None:
            continue
        derived = derived_all[k] if k < len(derived_all) else None
        if out.shape is None and not (
                complete is not None and complete(out) and _completed(out, derived)):
            continue
        assert out.shape is not None  # (given by _completed)
        rank = len(out.shape)
        if derived is not None and len(derived) != rank:
            derived = None
        refined = _refined_dims(out.shape.dims, derived, ambiguous, inputs, inputs_dims,
                                placeholders)
        if any(d is not None for d in refined):
            out.meta[REFINED_KEY] = tuple(refined)
        elif REFINED_KEY in out.meta:
            del out.meta[REFINED_KEY]


def _refined_dims(declared: Sequence[int | ir.SymbolicDim], derived: Dims | None,
                  ambiguous: frozenset[str], inputs: frozenset[int],
                  inputs_dims: frozenset[str], placeholders: dict[str, Dim]
                  ) -> list[Dim | None]:
    """The refinement of an output's dims, axis by axis: the derived dim (``derived``) where
    it is made of the graph inputs' dims and the declared one (``declared``, as
    :func:`_declared_dim` reads it) is not; a name seen before keeps the symbol it got then.

    The declared dim is never made a symbol: an int or a graph input's name is of the inputs
    (nothing to refine); any other name is a dim of its own, as is a dim without a usable name
    (a symbol of this output's own axis, never a graph input's)."""
    refined: list[Dim | None] = []
    for axis, dim in enumerate(declared):
        if is_static_dim(dim):
            refined.append(None)
            continue
        name = None if isinstance(dim, int) else dim.value  # (Paddle's -1: no size, no name)
        named = isinstance(name, str) and bool(name) and name not in ambiguous
        if named:
            if name in inputs_dims:
                refined.append(None)
                continue
            if name in placeholders:  # the same name is the same dim: one symbol for it
                refined.append(placeholders[name])
                continue
        found = derived[axis] if derived is not None else None
        if not _of_inputs(found, inputs, inputs_dims):
            refined.append(None)
            continue
        if named and found is not None:
            placeholders[cast(str, name)] = found
        refined.append(found)
    return refined


class KnownValues(KnownMapping):
    """Known elements by value; a constant's are read the first time they are asked for
    (most constants of a graph are weights no shape computation reads)."""

    def __init__(self, arrays: Arrays) -> None:
        super().__init__()
        self.arrays: Arrays | None = arrays  # None: kept past its walk (``reading``)
        self.not_constant: set[ir.Value] = set()
        self.placeholders: dict[str, Dim] | None = None  # the walk's (``updated_shape_values``)

    def reading(self, arrays: Arrays | None) -> None:
        """Read constants' data through ``arrays`` from now on; None: read none until told
        again, and forget which values were found no constants. What keeps shape values past
        their sweep (the rewrite driver, between its calls) sets None: the sweep's arrays are
        its view's, which holds every constant of the graph, and the weights a fold replaces
        would live on through them."""
        self.arrays = arrays
        self.not_constant = set()

    def get(self, value: ir.Value, default: Known | None = None  # type: ignore[override]
            ) -> Known | None:
        """``value``'s known elements: computed by the walk, or a constant's, read now."""
        found = super().get(value)
        if found is None and self.arrays is not None and value not in self.not_constant:
            found = known_constant(value, self.arrays)
            if found is None:
                self.not_constant.add(value)
            else:
                self[value] = found
        return found if found is not None else default


def shape_values(graph: ir.Graph, arrays: Arrays, ambiguous: frozenset[str] = frozenset(),
                 *, steps: ShapeSteps, complete: Completing = None
                 ) -> dict[ir.Value, Known]:
    """The known elements of every small integer tensor of ``graph`` that builds a shape.

    ``arrays(value)`` gives the data of constants (initializers, Constant outputs);
    ``ambiguous``: :func:`shared_dim_names`; ``steps``: what each op does (the catalogue's
    ``shape_steps``); ``complete``: which values shape inference left without a shape to give
    the rank and dims their op's step derives (set on the value: what every rule, the fold
    and the next inference read; None: none), walking in graph order so that they carry
    downstream."""
    known = KnownValues(arrays)
    walk = ShapeWalk(graph, known, arrays, ambiguous, steps, complete)
    for node in graph:
        if node.domain in DEFAULT_DOMAINS:
            walk.visit(node)
    known.placeholders = walk.placeholders
    return known


class ShapeWalk:
    """One walk of a graph in order for :func:`shape_values`: each node's refined dims and the
    shape value of its output."""

    def __init__(self, graph: ir.Graph, known: KnownValues, arrays: Arrays,
                 ambiguous: frozenset[str], steps: ShapeSteps, complete: Completing) -> None:
        self.known, self.arrays, self.ambiguous, self.steps = known, arrays, ambiguous, steps
        self.complete = complete  # the shapeless values to give a shape (shape_values)
        self.inputs_dims = frozenset(
            name for value in graph.inputs for dim in value.shape or ()
            if isinstance(name := getattr(dim, "value", None), str) and name
            and name not in ambiguous)
        self.inputs = frozenset(id(value) for value in graph.inputs)
        self.placeholders: dict[str, Dim] = {}

    def visit(self, node: ir.Node) -> None:
        """Refine ``node``'s output dims and follow its output's shape value."""
        known = self.known
        _refine(node, known, self.arrays, self.ambiguous, self.inputs, self.inputs_dims,
                self.placeholders, self.steps, self.complete)
        if len(node.outputs) != 1:
            return
        found = value_step(node, known, self.arrays, self.ambiguous, self.steps)
        if found is not None and len(found.elements) <= MAX_ELEMENTS and _fits(found):
            known[node.outputs[0]] = found

    def keep(self, node: ir.Node, previous: dict[ir.Value, Known]) -> None:
        """What ``node`` gave before: its output's shape value, and the placeholder symbols
        its refined dims recorded (the first node naming a dim records it)."""
        for out in node.outputs:
            value = dict.get(previous, out)
            if value is not None:
                self.known[out] = value
            refined = out.meta.data.get(REFINED_KEY)
            if refined is None or out.shape is None or len(refined) != len(out.shape):
                continue
            for dim, found in zip(out.shape, refined):
                name = getattr(dim, "value", None)
                if found is not None and isinstance(name, str) and name and \
                        name not in self.placeholders and name not in self.inputs_dims \
                        and name not in self.ambiguous:
                    self.placeholders[name] = found


def blocked_scaffolding(model: ir.Model, arrays: Arrays, steps: ShapeSteps,
                        named_dims_equal: bool = False) -> list[tuple[ir.Node, list[str]]]:
    """Nodes that compute shape values still dynamic, with the dims that block each
    (``named_dims_equal``: see :func:`shared_dim_names`)."""
    found = []
    ambiguous = shared_dim_names(model, named_dims_equal)
    for graph in all_graphs(model):
        values = shape_values(graph, arrays, ambiguous, steps=steps)
        for node in graph:
            known = values.get(node.outputs[0]) if len(node.outputs) == 1 else None
            if known is not None and not known.is_constant and node.op_type != "Constant":
                found.append((node, [describe_dim(a, model) for a in known.blocking()]))
    return found
