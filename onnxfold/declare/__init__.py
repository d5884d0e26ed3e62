"""The rule API: what ``rules/`` (installed as ``onnxfold.rules``) imports besides ``onnxfold.ir``.

Folders (:func:`folder`, :class:`OpFact`), patterns (:class:`P`, :class:`Var`, :class:`Reject`,
:func:`pattern`, the :class:`RewriteContext` a pattern's check and rewrite receive), cleanups
(:func:`cleanup`), size rules (:func:`output_bytes`), declines, and the few analysis facts a
rule asks about (what the user keeps, symbolic dims and the dim algebra shape steps compute
with, mapped weights). The catalogue
(:func:`load_catalogue`) collects what the rules declare.
"""

from onnxfold.analysis.constness import UNKNOWN_OPS_KEY, kept, kept_in
from onnxfold.analysis.declines import Decline, DeclineKind
from onnxfold.analysis.symbolic import (
    MAX_ELEMENTS,
    Dim,
    Dims,
    DimsInputs,
    Known,
    StepInputs,
    Sym,
    arith,
    broadcast_dims,
    broadcast_elements,
    derived_dims,
    describe_dim,
    dim_symbol,
    has_factor,
    input_dims,
    nonnegative,
    normalize_index,
    positive,
    quotient,
    shared_dim_names,
    slice_elements,
    small_ints,
)
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.declare.patterns import (
    Check,
    P,
    Reject,
    RewriteContext,
    Var,
    cleanup,
    output_bytes,
    pattern,
)
from onnxfold.declare.registry import OpFact, folder, shape_dims, shape_value
from onnxfold.io.mapped import MappedTensor, drop_resident_pages

__all__ = [
    "MAX_ELEMENTS",
    "UNKNOWN_OPS_KEY",
    "Catalogue",
    "Check",
    "Decline",
    "DeclineKind",
    "Dim",
    "Dims",
    "DimsInputs",
    "Known",
    "MappedTensor",
    "OpFact",
    "P",
    "Reject",
    "RewriteContext",
    "StepInputs",
    "Sym",
    "Var",
    "arith",
    "broadcast_dims",
    "broadcast_elements",
    "cleanup",
    "derived_dims",
    "describe_dim",
    "dim_symbol",
    "drop_resident_pages",
    "folder",
    "has_factor",
    "input_dims",
    "kept",
    "kept_in",
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
