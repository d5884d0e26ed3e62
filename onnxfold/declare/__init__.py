"""The rule API: the one module ``rules/`` (installed as ``onnxfold.rules``) imports besides
``onnxfold.ir``, and exactly what its rules use.

Folders (:func:`folder`, :class:`OpFact`, :class:`Decline`); patterns (:class:`P`,
:class:`Var`, :func:`pattern`; a check asks the :class:`GraphView` and answers :class:`Match`
or :class:`Reject`; a rewrite builds with the :class:`OpBuilder` and returns the new values or
a :class:`Replacement`; what the engine must know of a rule, its tags), size rules
(:func:`output_bytes`), shape steps (:func:`shape_value`, :func:`shape_dims`) and the dim
algebra they compute with (:class:`Known`, :func:`arith`, ...); what an op computes
(:class:`OpCost`, the report's FLOPs). The catalogue that collects what the rules declare is
the engine's (``onnxfold.declare.catalogue``).
"""

from onnxfold.analysis.declines import Decline, DeclineKind
from onnxfold.analysis.dim_algebra import (
    MAX_ELEMENTS,
    Dim,
    Dims,
    Known,
    arith,
    broadcast_dims,
    broadcast_elements,
    expression,
    has_factor,
    nonnegative,
    normalize_index,
    positive,
    quotient,
    slice_elements,
    small_ints,
)
from onnxfold.analysis.step_inputs import DimsInputs, StepInputs, dim_symbols
from onnxfold.declare.builder import OpBuilder, Out, Replacement
from onnxfold.declare.costs import OpCost
from onnxfold.declare.pattern_rules import (
    KEEPS_QDQ_UNITS,
    REWRITES_CONSTANTS,
    SHAPE_FOLDING,
    pattern,
)
from onnxfold.declare.patterns import P, Var
from onnxfold.declare.registry import OpFact, folder, shape_dims, shape_value
from onnxfold.declare.sizes import output_bytes
from onnxfold.declare.verdicts import Match, Reject
from onnxfold.declare.view import GraphView

__all__ = [
    "KEEPS_QDQ_UNITS",
    "MAX_ELEMENTS",
    "REWRITES_CONSTANTS",
    "SHAPE_FOLDING",
    "Decline",
    "DeclineKind",
    "Dim",
    "Dims",
    "DimsInputs",
    "GraphView",
    "Known",
    "Match",
    "OpBuilder",
    "OpCost",
    "OpFact",
    "Out",
    "P",
    "Reject",
    "Replacement",
    "StepInputs",
    "Var",
    "arith",
    "broadcast_dims",
    "broadcast_elements",
    "dim_symbols",
    "expression",
    "folder",
    "has_factor",
    "nonnegative",
    "normalize_index",
    "output_bytes",
    "pattern",
    "positive",
    "quotient",
    "shape_dims",
    "shape_value",
    "slice_elements",
    "small_ints",
]
