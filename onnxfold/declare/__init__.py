"""The rule API: the one module ``rules/`` (installed as ``onnxfold.rules``) imports besides
``onnxfold.ir``.

Folders (:func:`folder`, :class:`OpFact`, :class:`Decline`); patterns (:class:`P`,
:class:`Var`, :func:`pattern`; a check asks the :class:`GraphView` and answers :class:`Match`
or :class:`Reject`; a rewrite builds with the :class:`OpBuilder` and returns the new values or
a :class:`Replacement`); cleanups (:func:`cleanup`), size rules (:func:`output_bytes`), shape
steps (:func:`shape_value`, :func:`shape_dims`) and the dim algebra they compute with
(:class:`Known`, :class:`Sym`, :func:`arith`, ...); the few facts a rule asks about (the run's
settings, such as what the user keeps; mapped weights). The catalogue (:func:`load_catalogue`)
collects what the rules declare.
"""

from onnxfold.analysis.constness import kept
from onnxfold.analysis.declines import Decline, DeclineKind
from onnxfold.analysis.dim_algebra import (
    MAX_ELEMENTS,
    Dim,
    Dims,
    Known,
    Sym,
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
from onnxfold.analysis.settings import RunSettings
from onnxfold.analysis.step_inputs import (
    DimsInputs,
    StepInputs,
    derived_dims,
    describe_dim,
    dim_symbol,
    dim_symbols,
    input_dims,
    shared_dim_names,
)
from onnxfold.declare.builder import UNSET, OpBuilder, Out, Replaced, Replacement
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.declare.pattern_rules import (
    KEEPS_QDQ_UNITS,
    REWRITES_CONSTANTS,
    SHAPE_FOLDING,
    TAGS,
    PatternRule,
    pattern,
)
from onnxfold.declare.patterns import P, Var
from onnxfold.declare.registry import OpFact, folder, shape_dims, shape_value
from onnxfold.declare.sizes import SizeRule, output_bytes
from onnxfold.declare.verdicts import Check, Match, Reject, Verdict
from onnxfold.declare.view import GraphView
from onnxfold.io.mapped import MappedTensor, drop_resident_pages

__all__ = [
    "KEEPS_QDQ_UNITS",
    "MAX_ELEMENTS",
    "REWRITES_CONSTANTS",
    "SHAPE_FOLDING",
    "TAGS",
    "UNSET",
    "Catalogue",
    "Check",
    "Decline",
    "DeclineKind",
    "Dim",
    "Dims",
    "DimsInputs",
    "GraphView",
    "Known",
    "MappedTensor",
    "Match",
    "OpBuilder",
    "OpFact",
    "Out",
    "P",
    "PatternRule",
    "Reject",
    "Replaced",
    "Replacement",
    "RunSettings",
    "SizeRule",
    "StepInputs",
    "Sym",
    "Var",
    "Verdict",
    "arith",
    "broadcast_dims",
    "broadcast_elements",
    "derived_dims",
    "describe_dim",
    "dim_symbol",
    "dim_symbols",
    "drop_resident_pages",
    "expression",
    "folder",
    "has_factor",
    "input_dims",
    "kept",
    "load_catalogue",
    "nonnegative",
    "normalize_index",
    "output_bytes",
    "pattern",
    "positive",
    "quotient",
    "shape_dims",
    "shape_value",
    "shared_dim_names",
    "slice_elements",
    "small_ints",
]
