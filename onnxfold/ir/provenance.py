"""The metadata onnxfold writes on what it makes, so that a check can tell how it was made.

Every key starts with ``onnxfold.``. On a tensor (``metadata_props``, saved with the model):

- :data:`FOLDED_FROM`: the nodes of the original a folded initializer was computed from; an
  initializer keeps the name of the value it replaces, so the original says how to compute it
  again (``onnxfold.check.folds.verification``).
- :data:`ROUNDING`: a native folder that is not bitwise computed it (within a few ulps of
  onnxruntime, ``docs/exactness.md``).
- :data:`STANDS_FOR`: a constant a rewrite put in place of a value (a shape value it proved, a
  merged weight's slice): the name of the value of the original it stands for, which the check
  re-derives and compares with it.
- :data:`RECIPE`: how a folded tensor that no value of the original names was computed: the
  nodes a rewrite built and the fold evaluated, back to tensors the original holds or computes
  (``onnxfold.ir.recipes``).

- :data:`MADE_BY`: on a constant a rewrite built, the rule (a parameter of its replacement:
  merged axes, split sizes); in memory (``Value.meta``) on every value a rewrite built, so that
  the fold keeps a recipe for each one it stores.
- :data:`REWIRED`: a value that keeps its name while a rewrite changed what computes it (a kept
  node rewired to other inputs: an elementwise chain moved between Reshapes computes the
  flattened values): its name no longer means the original's value of that name. On the value
  in memory, and on its tensor where the fold stores it (then judged by its recipe).

On the model (``metadata_props``), :data:`RUN`: the run that wrote it (onnxfold's version and
the options it was given that differ from the defaults), on every output, even one where
nothing was folded: a weight under a name of the original that holds other bytes is then a
difference, never another tool's edit (``onnxfold.check.folds.verification``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import onnx_ir as ir

from onnxfold.ir.graph import all_graphs

FOLDED_FROM = "onnxfold.folded_from"
ROUNDING = "onnxfold.rounding"
STANDS_FOR = "onnxfold.stands_for"
RECIPE = "onnxfold.recipe"
MADE_BY = "onnxfold.made_by"
REWIRED = "onnxfold.rewired"
# in memory only: a folded constant that equal plain folds read in their place
# (fold/materialize.py), each of its readers once holding a copy of its own
SHARED = "onnxfold.shared"

TENSOR_KEYS = (FOLDED_FROM, ROUNDING, STANDS_FOR, RECIPE, MADE_BY, REWIRED)
RUN = "onnxfold.run"


def run_record(version: str, options: Mapping[str, Any]) -> str:
    """The model-level record of a run: the version and ``options`` (JSON values, those that
    differ from the defaults), as one JSON text with sorted keys."""
    return json.dumps({"tool": "onnxfold", "version": version, "options": dict(options)},
                      sort_keys=True, separators=(",", ":"))


def recorded_options(model: ir.Model) -> dict[str, Any] | None:
    """The options ``model``'s run record (:func:`run_record`) says its run was given, None
    where it carries no record, or one that is not what :func:`run_record` writes."""
    try:
        record = json.loads(model.metadata_props.get(RUN, ""))
    except ValueError:
        return None
    options = record.get("options") if isinstance(record, dict) and \
        record.get("tool") == "onnxfold" else None
    return options if isinstance(options, dict) else None


def written_by_onnxfold(model: ir.Model) -> bool:
    """Whether ``model`` says a run of onnxfold wrote it: its model-level record, or (files
    written before that record) a tensor of any of its graphs with onnxfold's provenance."""
    return RUN in model.metadata_props or any(
        key.startswith("onnxfold.") for graph in all_graphs(model)
        for v in graph.initializers.values() if v.const_value is not None
        for key in v.const_value.metadata_props)


def stands_for(value: ir.Value) -> str | None:
    """The name of the value of the original that ``value`` stands for: the one a rewrite put
    it in place of (through any chain of rewrites), None when it is no such replacement."""
    tensor = value.const_value
    if tensor is not None and STANDS_FOR in tensor.metadata_props:
        return tensor.metadata_props[STANDS_FOR]
    found = value.meta.get(STANDS_FOR)
    return found if isinstance(found, str) else None


def rewired(value: ir.Value) -> bool:
    """Whether a rewrite changed what computes ``value`` while it kept its name."""
    return REWIRED in value.meta


def mark_rewired(value: ir.Value, rule: str) -> None:
    """Record that ``rule`` rewired the node computing ``value`` (it keeps its name)."""
    value.meta[REWIRED] = rule
    value.meta[MADE_BY] = rule
    value.meta.pop(STANDS_FOR, None)


def mark_replacement(old: ir.Value, new: ir.Value, rule: str) -> None:
    """Record that a rewrite (``rule``) put ``new``, a value it built, in place of ``old``:
    ``new`` stands for what ``old`` stood for (its own name, unless it was a replacement
    itself), on its tensor when it is a constant, else in memory until the fold stores it."""
    name = stands_for(old) or old.name
    new.meta[MADE_BY] = rule
    if not name or name == new.name:
        return
    new.meta[STANDS_FOR] = name
    if new.const_value is not None:
        new.const_value.metadata_props[STANDS_FOR] = name
