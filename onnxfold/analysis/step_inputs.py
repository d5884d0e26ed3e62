"""What a shape step reads: a value's dims as symbols, and the inputs of an op's step.

The per-op steps (``@shape_value``, ``@shape_dims`` in ``rules/shape_steps.py``) reach the walk
(:mod:`onnxfold.analysis.symbolic`) as a :class:`ShapeSteps` value (the catalogue's
``shape_steps``); each step reads its node through a :class:`StepInputs` (shape values) or a
:class:`DimsInputs` (output dims). A value's dims read as :func:`dim_symbol` gives them: an
int, a dim the walk proved better (``REFINED_KEY``), or a symbol.

Two dims are the same symbol when they are the same axis of the same value, or carry the same
name from shape inference (a graph input's ``dim_param``, or the name inference gave a dim it
proved equal to it) - unless the inputs use that name more than once: onnxruntime does not
check that such dims agree, so they prove nothing, except under the user's
``--assume-named-dims-equal`` (:func:`shared_dim_names`' ``assume_equal``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxfold.analysis.dim_algebra import MAX_ELEMENTS, Dim, Dims, Known, Sym, small_ints
from onnxfold.ir.graph import is_static_dim, tensor_of

REFINED_KEY = "onnxfold.symbolic.dims"  # Value.meta: dims proved better than the declared ones


def shared_dim_names(model: ir.Model, assume_equal: bool = False) -> frozenset[str]:
    """Dim names the model's inputs use more than once. onnxruntime does not check that dims
    of one name agree, so such a name proves nothing: its dims are told apart by axis. None
    when the user assumes them equal (``assume_equal``, ``--assume-named-dims-equal``): one
    name, one symbol."""
    if assume_equal:
        return frozenset()
    seen: dict[str, int] = {}
    for value in model.graph.inputs:
        for dim in value.shape or ():
            name = getattr(dim, "value", None)
            if isinstance(name, str) and name:
                seen[name] = seen.get(name, 0) + 1
    return frozenset(n for n, count in seen.items() if count > 1)


def dim_symbol(value: ir.Value, axis: int, ambiguous: frozenset[str] = frozenset()
               ) -> Dim | None:
    """Axis ``axis`` of ``value``'s shape as an int or a symbol; None if its rank is unknown.

    A dim :func:`shape_values` proved to be an int or a graph input's dim (``REFINED_KEY``)
    is that; a named dim is the symbol of its name unless the name is ``ambiguous``; any other
    dynamic dim is a symbol of this very axis of this very value (by identity: names change)."""
    shape = value.shape
    if shape is None or axis >= len(shape):
        return None
    return _axis_dim(value, shape[axis], axis, _refined(value, len(shape)), ambiguous)


def dim_symbols(value: ir.Value, ambiguous: frozenset[str] = frozenset()
                ) -> tuple[Dim, ...] | None:
    """Every axis of ``value``'s shape as :func:`dim_symbol` gives it (the shape and the
    refinement read once, not once an axis); None if its rank is unknown."""
    shape = value.shape
    if shape is None:
        return None
    dims = shape.dims
    refined = _refined(value, len(dims))
    return tuple(_axis_dim(value, d, axis, refined, ambiguous) for axis, d in enumerate(dims))


def _axis_dim(value: ir.Value, dim: int | ir.SymbolicDim, axis: int,
              refined: tuple[Dim | None, ...] | None, ambiguous: frozenset[str]) -> Dim:
    """:func:`dim_symbol` of axis ``axis``, from its declared ``dim`` and ``value``'s
    :func:`_refined` dims (read once by a caller asking for every axis)."""
    if is_static_dim(dim):  # (Paddle writes -1 for "any size": no size)
        return dim
    found = refined[axis] if refined is not None else None
    return found if found is not None else _declared_dim(value, dim, axis, ambiguous)


def _refined(value: ir.Value, rank: int) -> tuple[Dim | None, ...] | None:
    """``value``'s refined dims (``REFINED_KEY``) if recorded for its rank ``rank``.

    Read from the store's plain dict: the ``MetadataStore`` (a ``UserDict``) answers a missing
    key through a raised ``KeyError``, and this is asked for every dim of every value."""
    refined = value.meta.data.get(REFINED_KEY)
    return refined if refined is not None and len(refined) == rank else None


def _declared_dim(value: ir.Value, dim: int | ir.SymbolicDim, axis: int,
                  ambiguous: frozenset[str]) -> Sym:
    """``dim``, the dynamic axis ``axis`` of ``value``'s declared shape (a name, none, or a
    negative int), as a symbol."""
    name = None if isinstance(dim, int) else dim.value
    if isinstance(name, str) and name and name not in ambiguous:
        return Sym(("dim", name))
    return Sym(("axis", id(value), value.name or "?", axis))


Arrays = Callable[[ir.Value], np.ndarray | None]


@dataclass(frozen=True)
class StepInputs:
    """What a shape-value step (``@shape_value`` in ``rules/``) reads of its node: the node,
    the shape values known so far, constants' data and the ambiguous dim names."""

    node: ir.Node
    known: dict[ir.Value, Known]
    arrays: Arrays
    ambiguous: frozenset[str]

    def value(self, i: int) -> ir.Value | None:
        """Input ``i`` (None when omitted or absent)."""
        inputs = self.node.inputs
        return inputs[i] if i < len(inputs) else None

    def get(self, i: int) -> Known | None:
        """The shape value of input ``i``, if known."""
        v = self.value(i)
        return None if v is None else self.known.get(v)

    def array(self, i: int) -> np.ndarray | None:
        """The constant data of input ``i``, if it is a constant."""
        v = self.value(i)
        return None if v is None else self.arrays(v)

    def ints(self, i: int) -> list[int] | None:
        """Input ``i``'s elements when it is a small constant integer tensor
        (:func:`static_ints`)."""
        v = self.value(i)
        return None if v is None else static_ints(v, self.arrays, self.known)


def static_ints(value: ir.Value, arrays: Arrays, known: Mapping[ir.Value, Known]
                ) -> list[int] | None:
    """``value``'s elements when it is a small integer tensor of one value for every input: a
    constant's data, or a shape value the walk found static (a 0-D or 1-D value computed from
    constants that the fold has not made one yet: ``Reshape(Cast(Constant))`` as a Slice's
    axes). Reading only constants' data left such a step unrefined until after the first fold,
    and every reader downstream was then tried again by the next rewrite call."""
    found = small_ints(arrays(value))
    if found is not None:
        return found
    shape = value.shape
    elements = known.get(value)
    if elements is None or shape is None or len(shape) > 1:
        return None
    ints = [e for e in elements.elements if isinstance(e, int)]
    return ints if len(ints) == len(elements.elements) else None  # (else a dim is dynamic)


def value_step(node: ir.Node, known: dict[ir.Value, Known], arrays: Arrays,
          ambiguous: frozenset[str], steps: ShapeSteps) -> Known | None:
    """The value of ``node``'s first output, if it is a shape tensor an op's step follows."""
    step = steps.values.get(node.op_type)
    return None if step is None else step(StepInputs(node, known, arrays, ambiguous))


class DimsInputs:
    """What an output-dims step (``@shape_dims`` in ``rules/``) reads of its node: its inputs'
    dims (``dims``), shape values (``known``) and constants' data (``arrays``), and which dims
    are made of the graph inputs' (``of_inputs``: the walk knows them; else only ints)."""

    def __init__(self, node: ir.Node, dims: Callable[[ir.Value | None], Dims | None],
                 known: dict[ir.Value, Known], arrays: Arrays,
                 of_inputs: Callable[[Dim], bool] | None = None) -> None:
        self.node = node
        self.dims = dims
        self.known = known
        self.arrays = arrays
        self.of_inputs = of_inputs or _static
        inputs = node.inputs
        self.first: Dims | None = dims(inputs[0]) if inputs else None  # input 0's dims

    def value(self, i: int) -> ir.Value | None:
        """Input ``i`` (None when omitted or absent)."""
        inputs = self.node.inputs
        return inputs[i] if i < len(inputs) else None

    def known_at(self, i: int) -> Known | None:
        """The shape value of input ``i``, if known."""
        v = self.value(i)
        return None if v is None else self.known.get(v)

    def scalar(self, i: int) -> Dim | None:
        """The one element of input ``i``'s shape value, if it has exactly one."""
        k = self.known_at(i)
        return k.elements[0] if k is not None and len(k.elements) == 1 else None

    def ints(self, i: int) -> list[int] | None:
        """Input ``i``'s elements when it is a small constant integer tensor
        (:func:`static_ints`)."""
        v = self.value(i)
        return None if v is None else static_ints(v, self.arrays, self.known)


ValueStep = Callable[[StepInputs], Known | None]
DimsStep = Callable[[DimsInputs], Dims | None]
EveryOutputDimsStep = Callable[[DimsInputs], list[Dims | None]]


@dataclass(frozen=True)
class ShapeSteps:
    """The per-op steps this module follows, by op type (the catalogue's ``shape_steps``):
    shape values (``values``), first-output dims (``dims``), every output's dims
    (``every_output_dims``, Split)."""

    values: Mapping[str, ValueStep]
    dims: Mapping[str, DimsStep]
    every_output_dims: Mapping[str, EveryOutputDimsStep]


def output_dims(node: ir.Node, dims: Callable[[ir.Value | None], Dims | None],
                 known: dict[ir.Value, Known], arrays: Arrays, steps: ShapeSteps,
                 of_inputs: Callable[[Dim], bool] | None = None) -> Dims | None:
    """The dims of ``node``'s first output from its inputs' (None: not derived here)."""
    step = steps.dims.get(node.op_type)
    return None if step is None else step(DimsInputs(node, dims, known, arrays, of_inputs))


def _static(d: Dim) -> bool:
    return isinstance(d, int)


class KnownMapping(dict):
    """Known elements by value as the ``known`` mapping of :func:`output_dims` reads them:
    what a subclass's ``get`` finds is ``in`` it and its ``[value]``."""

    def __contains__(self, value: object) -> bool:
        return isinstance(value, ir.Value) and self.get(value) is not None

    def __missing__(self, value: ir.Value) -> Known:
        found = self.get(value)
        if found is None:
            raise KeyError(value)
        return found


class _KnownBy(KnownMapping):
    """Known elements asked of a function (``GraphView.shape_value``)."""

    def __init__(self, of: Callable[[ir.Value], Known | None]) -> None:
        super().__init__()
        self.of = of

    def get(self, value: ir.Value, default: Known | None = None  # type: ignore[override]
            ) -> Known | None:
        found = self.of(value) if isinstance(value, ir.Value) else None
        return found if found is not None else default


def derived_dims(node: ir.Node, values: Callable[[ir.Value], Known | None], arrays: Arrays,
                 ambiguous: frozenset[str] = frozenset(), *, steps: ShapeSteps
                 ) -> Dims | None:
    """The dims of ``node``'s first output that its op's shape semantics (``steps``) give from
    its inputs' dims (:func:`dim_symbol`) and shape values (``values``); None where not
    derived."""
    return output_dims(node, lambda v: input_dims(v, ambiguous), _KnownBy(values), arrays,
                       steps)


def input_dims(value: ir.Value | None, ambiguous: frozenset[str] = frozenset()
               ) -> Dims | None:
    """``value``'s dims as :func:`dim_symbol` gives them (a constant's: ints); None for an
    absent value or an unknown rank."""
    if value is None:
        return None
    tensor = value.const_value
    producer = value.producer()
    if tensor is None and producer is not None and producer.op_type == "Constant" and \
            "value" in producer.attributes:
        tensor = tensor_of(producer.attributes["value"])
    if tensor is not None:
        return tuple(int(d) for d in tensor.shape.numpy())
    return dim_symbols(value, ambiguous)


_SHAPE_DTYPES = frozenset({ir.DataType.INT64, ir.DataType.INT32})


def _may_be_shape(value: ir.Value) -> bool:
    """Whether ``value`` can be a small integer tensor, from its declared type and shape (no
    data read): an integer of at most one dim and ``MAX_ELEMENTS`` elements."""
    tensor = value.const_value
    dtype = tensor.dtype if tensor is not None else value.dtype
    shape = tensor.shape if tensor is not None else value.shape
    if dtype is not None and dtype not in _SHAPE_DTYPES:
        return False
    if shape is None:
        return dtype is not None  # a Constant node's output may have no declared shape
    return len(shape) <= 1 and all(isinstance(d, int) and d <= MAX_ELEMENTS for d in shape)


def known_constant(value: ir.Value, arrays: Arrays) -> Known | None:
    """The elements of ``value`` when it is a small integer constant (no graph walk)."""
    if not _may_be_shape(value):
        return None  # not a constant's data worth reading (the cheap test, first)
    arr = arrays(value)
    ints = small_ints(arr)
    if ints is None or arr is None:
        return None
    return Known(tuple(ints), arr.ndim == 0, arr.dtype)


def describe_dim(atom: Sym, model: ir.Model) -> str:
    """``N`` of input ``x``: a dim named with the graph inputs that declare it."""
    if atom.expr[0] == "axis":
        value = next((v for v in model.graph.inputs if id(v) == atom.expr[1]), None)
        shape = value.shape if value is not None else None
        dim = shape[atom.expr[3]] if shape is not None and atom.expr[3] < len(shape) else None
        name = getattr(dim, "value", None)
        if value is not None and isinstance(name, str) and name:
            return f"`{name}` of input {value.name} (axis {atom.expr[3]})"
    if atom.expr[0] != "dim":
        return f"`{atom}`"
    owners = [v.name or "" for v in model.graph.inputs if v.shape is not None and any(
        getattr(d, "value", None) == atom.expr[1] for d in v.shape)]
    return f"`{atom}` of input {', '.join(owners)}" if owners else f"`{atom}`"
