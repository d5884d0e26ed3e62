"""Folder rules: how to evaluate one ONNX op on constant numpy inputs.

A rule is a plain function declared with :func:`folder`. Inputs arrive as positional numpy
arrays (``None`` for an omitted optional input), ONNX attributes as keyword arguments whose
Python defaults are the ONNX defaults. It returns an array or a tuple of arrays. A rule that
cannot handle a case raises :class:`Decline`; the engine then tries the onnxruntime fallback.

Declaring a rule only marks the function; :mod:`onnxfold.declare.catalogue` collects the marks of
every module in ``onnxfold.rules`` into one immutable catalogue. The same holds for op facts
(:class:`OpFact`) and for the symbolic shape steps (:func:`shape_value`, :func:`shape_dims`:
what an op does to shape values and dims, followed by :mod:`onnxfold.analysis.symbolic`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import onnx_ir as ir

from onnxfold.analysis.declines import Decline, DeclineKind

__all__ = [
    "RULES_ATTR",
    "Decline",
    "DeclineKind",
    "FolderRule",
    "OpFact",
    "ShapeDimsRule",
    "ShapeValueRule",
    "folder",
    "shape_dims",
    "shape_value",
    "source_of",
]

RULES_ATTR = "__onnxfold_rules__"  # the rule declarations a decorator attached to a function


def source_of(fn: Callable) -> str:
    """``file:line`` of a function's definition (no source parsing)."""
    return f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"


def mark(fn: Callable, *rules: object) -> Callable:
    """Attach rule declarations to ``fn`` (a function may carry several)."""
    setattr(fn, RULES_ATTR, (*getattr(fn, RULES_ATTR, ()), *rules))
    return fn


@dataclass(frozen=True)
class FolderRule:
    """One op evaluated natively for a range of opset versions.

    ``shape_only`` rules receive the *shape* (a tuple) of their first input instead of its data,
    so they fold whenever the shape is statically known (Shape, Size). ``half_as_given``
    rules receive float16/bfloat16 inputs as they are, where onnxruntime has no kernel of that
    type: the rule itself follows what onnxruntime does (the engine otherwise hands them over
    in float32 and rounds the result once, as onnxruntime's inserted Casts do).
    """

    name: str
    domain: str
    op_type: str
    since: int
    until: int | None
    fn: Callable
    source: str
    shape_only: bool = False
    half_as_given: bool = False

    @property
    def op_types(self) -> tuple[str, ...]:
        """The op it folds, as a tuple (as other rules give theirs)."""
        return (self.op_type,)

    def without(self, off: frozenset[str]) -> FolderRule | None:
        """None if ``off`` names this rule or its op (``--disable-rule``), else this rule."""
        return None if self.name in off or self.op_type in off else self

    def covers(self, opset: int) -> bool:
        """Whether the rule folds the op at ``opset``."""
        return self.since <= opset and (self.until is None or opset <= self.until)


@dataclass(frozen=True)
class OpFact:
    """Something the engine must know about an op (``rules/facts.py``).

    ``draws_only_in_training`` (with ``nondeterministic``): it draws only in training mode,
    which its folder declines; it folds otherwise (Dropout).
    ``bitwise``: its native folder computes, on floating-point values too, bit for bit what
    onnxruntime's kernel computes (elementwise IEEE operations in one dtype, data movement).
    ``discontinuous``: a one-ulp change of a floating-point input can change its result by a
    whole step (a quantization, a comparison, a rounding); ``only_to_integers`` narrows that to
    nodes whose output is not floating point (a Cast to an integer type, not to float16).
    ``requantizes``: it quantizes its input 0 again, so a dequantization only it reads may
    fold (``onnxfold.fold.policy``: the quantized weight it gives is as small as the one kept).
    ``view``: its native folder returns a view of its input 0 where that input is laid out in
    C order (a transpose, a reshape): the fold allocates nothing, and a weight's transpose
    needs no room in the pool's budget.
    ``order_varies``: onnxruntime's own kernel adds (or multiplies) in an order that changes
    with where its input lies in memory (its alignment), so a node run anywhere but in the
    original's session need not give that session's bits, not even through onnxruntime: a
    fold of it is never expected bitwise (``docs/exactness.md``).
    ``runtime_op``: onnxruntime registers it in the default domain, where onnx has no schema
    of it (SimplifiedLayerNormalization, which genai's builder emits): no plugin, listed with
    the onnxruntime ops a model keeps.
    ``when``: the fact holds only at the nodes it accepts (BatchNormalization computes batch
    statistics only with ``training_mode=1``). Only ``order_varies`` may depend on a node's
    attributes or inputs; every other fact holds for every attribute and dtype (the catalogue
    refuses a ``when`` beside them).
    """

    op_type: str
    nondeterministic: bool = False
    kept_quantized: bool = False
    domain: str = ""
    draws_only_in_training: bool = False
    bitwise: bool = False
    discontinuous: bool = False
    only_to_integers: bool = False
    requantizes: bool = False
    view: bool = False
    order_varies: bool = False
    runtime_op: bool = False
    when: Callable[[ir.Node], bool] | None = None

    def holds_at(self, node: ir.Node) -> bool:
        """Whether the fact holds at ``node`` (always, without ``when``)."""
        return self.when is None or self.when(node)

    @property
    def name(self) -> str:
        """``fact.<op>``, for listings."""
        return f"fact.{self.op_type}"


def folder(
    op_types: str | Iterable[str],
    since: int = 1,
    until: int | None = None,
    domain: str = "",
    name: str | None = None,
    shape_only: bool = False,
    half_as_given: bool = False,
) -> Callable[[Callable], Callable]:
    """Declare ``fn`` the folder of ``op_types`` for opsets ``since..until``.

    ``since`` is read as "the op's schema in force at this opset": the catalogue moves it to
    that schema's first version (or the op's first, for ops newer than ``since``), so rule names
    and ranges always name opsets where the op exists.
    """
    ops = [op_types] if isinstance(op_types, str) else list(op_types)

    def register(fn: Callable) -> Callable:
        for op in ops:
            rule_name = f"{name}.{op}" if name and len(ops) > 1 else name
            mark(fn, FolderRule(rule_name or "", domain, op, since, until, fn, source_of(fn),
                                shape_only, half_as_given))
        return fn

    return register


@dataclass(frozen=True)
class ShapeValueRule:
    """How an op builds a shape value, element by element (``onnxfold.analysis.symbolic``):
    ``fn`` takes a :class:`onnxfold.analysis.step_inputs.StepInputs` and returns the
    :class:`onnxfold.analysis.dim_algebra.Known` elements of the node's output, or None where it
    does not follow the node."""

    op_type: str
    fn: Callable
    source: str

    @property
    def name(self) -> str:
        """``shape_value.<op>``, for listings."""
        return f"shape_value.{self.op_type}"


@dataclass(frozen=True)
class ShapeDimsRule:
    """How an op's output dims follow from its inputs' (``onnxfold.analysis.symbolic``): ``fn``
    takes a :class:`onnxfold.analysis.step_inputs.DimsInputs` and returns the dims of the first
    output, or None; with ``every_output``, a list of the dims of every output (Split)."""

    op_type: str
    fn: Callable
    source: str
    every_output: bool = False

    @property
    def name(self) -> str:
        """``shape_dims.<op>``, for listings."""
        return f"shape_dims.{self.op_type}"


def shape_value(*op_types: str) -> Callable[[Callable], Callable]:
    """Declare ``fn`` the symbolic shape-value step of ``op_types`` (default domain)."""

    def register(fn: Callable) -> Callable:
        return mark(fn, *(ShapeValueRule(op, fn, source_of(fn)) for op in op_types))

    return register


def shape_dims(*op_types: str, every_output: bool = False) -> Callable[[Callable], Callable]:
    """Declare ``fn`` the symbolic output-dims step of ``op_types`` (default domain)."""

    def register(fn: Callable) -> Callable:
        return mark(fn, *(ShapeDimsRule(op, fn, source_of(fn), every_output)
                          for op in op_types))

    return register
