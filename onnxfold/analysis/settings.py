"""The user's settings of one run that analysis, passes and rules read, as one value.

``optimize``, the low-rank merge and the split build a :class:`RunSettings` from their
``FoldOptions`` (``FoldOptions.run_settings``, with what the reader found in the model or the
runtime constants) and hand it to the passes; the rewrite driver puts it in each
:class:`~onnxfold.declare.GraphView`. Passing it keeps these
settings out of ``model.meta``, where any function holding the model could read them and a
model reused after ``optimize`` would still carry them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunSettings:
    """What the user asked of this run, for the code below the pipeline.

    ``keep``: op types and node names never folded, rewritten or removed (``--keep``);
    ``named_dims_equal``: dims of one name on several inputs are one symbol
    (``--assume-named-dims-equal``; see ``symbolic.shared_dim_names``); ``unknown_ops``:
    default-domain op types the installed onnx does not know (plugins), which may draw random
    numbers or keep state, so no cleanup merges two of them; ``runtime_inputs``: the main
    graph's inputs constant at run time (the runtime constants of a split or a ``Session``):
    rules that pay only across them (``rules/low_rank.py``) apply where they are set;
    ``nondeterministic_ops``: the op types that may draw random numbers, an op fact of the run's
    catalogue (``Catalogue.nondeterministic``), set by ``build_pipeline`` for the cleanups, so
    that a cleanup reads no global catalogue.
    """

    keep: frozenset[str] = frozenset()
    named_dims_equal: bool = False
    unknown_ops: frozenset[str] = frozenset()
    runtime_inputs: frozenset[str] = frozenset()
    nondeterministic_ops: frozenset[str] = frozenset()


DEFAULTS = RunSettings()  # a run with no option set (what a caller of the driver gets)
