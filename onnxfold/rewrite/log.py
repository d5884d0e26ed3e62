"""What each rewrite replaced and with what, kept so that a check can validate every rewrite.

A rewrite claims that the values it puts in compute what the values they replace computed, for
every input of the model. When asked (``optimize(..., record_rewrites=True)``, as ``--check``
does), the driver records each rewrite as two small graphs: the *before* window, the nodes that
computed the replaced values (as they stood), and the *after* window, the nodes that compute
their replacements (as they stand once it is in). Both read *leaves*: values a check can
compute from the original model alone, because the original has a value of that name (a value
of the graph keeps the meaning of the original's value of its name: ``replace_value`` and the
fold give the name to what replaces it) or because a rewrite's constant stands for one
(``provenance.STANDS_FOR``), and constants (their arrays kept; a tensor held in a proto kept as
the tensor, read where the window runs: each read of a proto's tensor is a copy, and a check of
a proto held a copy of every weight a window read, 324 MiB on BERT-base). Where a window reads
a value that is neither (a value an earlier rewrite built), the window grows to that value's
producer, within :data:`MAX_WINDOW_NODES`; past that, or at a value of an enclosing graph, the
record says why it cannot be validated.

A kept node that a rewrite rewired (``Replacement.inputs``) counts as replaced by itself: its
outputs before and after are compared.

This module is the record's data only (the check reads it and imports nothing of the rewrite
driver); ``rewrite/recorder.py`` writes it as the driver rewrites.

``onnxfold.check.rewrites.validation`` runs both windows in onnxruntime on the values the
original computes for the leaves on the check's input sets (every binding of the dims it ran),
and compares them.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir

MAX_WINDOW_NODES = 64


@dataclass
class Window:
    """Nodes (in order) computing ``outputs`` from leaves: values the original computes
    (``originals``: the name the window reads -> the original's value of it) and constants
    (``constants``, by name)."""

    nodes: list[onnx.NodeProto] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    originals: dict[str, str] = field(default_factory=dict)
    constants: dict[str, np.ndarray | ir.TensorProtocol] = field(default_factory=dict)


@dataclass
class RewriteRecord:
    """One rewrite: its rule and node, the window it replaced and its replacement (their
    outputs pair up in order), or why it cannot be validated (``unresolved``); ``rounds``:
    its rule declares that it may round differently (``rounds_differently``: its bits are not
    asked for)."""

    rule: str
    node: str
    before: Window | None = None
    after: Window | None = None
    unresolved: str = ""
    rounds: bool = False


class RewriteLog:
    """The records of one optimization. ``original``: the value names of the original model's
    main graph, read before any pass changed it."""

    def __init__(self, model: ir.Model, original: Collection[str]) -> None:
        self.model = model
        self.original = frozenset(original)
        self.records: list[RewriteRecord] = []

    @property
    def main(self) -> ir.Graph:
        """The model's main graph now (``--target-opset``'s conversion puts in a new one
        before any rewrite: its rewrites are the main graph's too)."""
        return self.model.graph

    @property
    def opsets(self) -> dict[str, int]:
        """The opsets the recorded windows are written in (the converted ones, where
        ``--target-opset`` converted the model)."""
        return dict(self.model.opset_imports)


__all__ = ["MAX_WINDOW_NODES", "RewriteLog", "RewriteRecord", "Window"]
