"""The rule API: what ``rules/`` (installed as ``onnxfold.rules``) imports besides ``onnxfold.ir``.

Folders (:func:`folder`, :class:`OpFact`), patterns (:class:`P`, :class:`Var`, :class:`Reject`,
:func:`pattern`, the :class:`RewriteContext` a pattern's check and rewrite receive), cleanups
(:func:`cleanup`), size rules (:func:`output_bytes`), declines, and the few analysis facts a
rule asks about (what the user keeps, symbolic dims, mapped weights). The catalogue
(:func:`load_catalogue`) collects what the rules declare.
"""

from onnxfold.analysis.constness import UNKNOWN_OPS_KEY, kept, kept_in
from onnxfold.analysis.declines import Decline, DeclineKind
from onnxfold.analysis.symbolic import derived_dims, describe_dim, input_dims, shared_dim_names
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
from onnxfold.declare.registry import OpFact, folder
from onnxfold.io.mapped import MappedTensor, drop_resident_pages

__all__ = [
    "UNKNOWN_OPS_KEY", "Catalogue", "Check", "Decline", "DeclineKind", "MappedTensor", "OpFact",
    "P", "Reject", "RewriteContext", "Var", "cleanup", "derived_dims", "describe_dim",
    "drop_resident_pages", "folder", "input_dims", "kept", "kept_in", "load_catalogue",
    "output_bytes", "pattern", "shared_dim_names",
]
