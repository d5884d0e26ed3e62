"""The rule API: what ``rules/`` (installed as ``onnxfold.rules``) imports besides ``onnxfold.ir``.

Folders (:func:`folder`, :class:`OpFact`), patterns (:class:`P`, :class:`Var`, :class:`Reject`,
:func:`pattern`, the :class:`RewriteContext` a pattern's check and rewrite receive), cleanups
(:func:`cleanup`), size rules (:func:`output_bytes`), declines, and the few analysis facts a
rule asks about (the run's settings, such as what the user keeps; symbolic dims and the dim
algebra shape steps compute with; mapped weights). The catalogue (:func:`load_catalogue`)
collects what the rules declare.
"""

from onnxfold.analysis.constness import kept
from onnxfold.analysis.declines import Decline, DeclineKind
from onnxfold.analysis.settings import RunSettings
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
    "RunSettings",
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
