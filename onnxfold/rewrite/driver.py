"""The rewrite driver: sweeps of the catalogue's patterns until nothing changes, and the cleanups.

Each sweep plans every graph's constants, then tries the patterns of each node's op type at
every node (a rule that raises is contained: ``StepFailed`` with its name unless not strict).
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

import onnx_ir as ir

from onnxfold.analysis.constness import plan_graph
from onnxfold.analysis.settings import DEFAULTS, RunSettings
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.declare.patterns import PatternRule, Reject, RewriteContext
from onnxfold.ir.graph import all_graphs
from onnxfold.rewrite.steps import contained

MAX_ITERATIONS = 10


def rewrite(model: ir.Model, catalogue: Catalogue, rejected: Counter | None = None,
            inputs_are_constant: bool = False, constant_inputs: bool = False,
            strict: bool = True, rejected_at: dict[ir.Node, str] | None = None,
            settings: RunSettings = DEFAULTS) -> Rewritten:
    """Apply the catalogue's patterns everywhere until nothing changes.

    ``constant_inputs``: the main graph's inputs count as constants (see ``plan_graph``). A
    rule that raises raises ``StepFailed`` with its name (unless ``strict``).
    ``rejected_at`` receives each node a pattern declined, with the rule and its reason (the
    report groups them by module). ``settings``: the run's, for the patterns (``ctx.settings``).
    """

    hits: Counter = Counter()
    rejected = rejected if rejected is not None else Counter()
    by_op = catalogue.patterns_by_op()
    facts = load_catalogue()  # every rule's op facts, whatever ``catalogue`` leaves out
    for sweeps in range(1, MAX_ITERATIONS + 1):
        changed = False
        for graph in all_graphs(model):
            plan = plan_graph(graph, model.ir_version, inputs_are_constant=inputs_are_constant,
                              constant_inputs=constant_inputs and graph is model.graph,
                              facts=facts)
            ctx = RewriteContext(graph, model, plan.constant, facts, rejected, rejected_at,
                                 shape_steps=catalogue.shape_steps, settings=settings)
            trying = _Trying()
            changed |= contained(trying, strict,
                                 functools.partial(_sweep, ctx, by_op, hits, trying))
        if not changed:
            return Rewritten(hits, converged=True, sweeps=sweeps)
    return Rewritten(hits, converged=False, sweeps=MAX_ITERATIONS)


@dataclass
class Rewritten:
    """What ``rewrite`` did: hits per rule, and whether its last sweep changed nothing (then
    a next call finds nothing either, unless something else changed the model meanwhile)."""

    hits: Counter
    converged: bool
    sweeps: int = 0  # over every graph; the last one found nothing if converged

    def __bool__(self) -> bool:
        return bool(self.hits)


class _Trying:
    """The rule a sweep is applying (what a failure is reported as)."""

    name = "rewrite"

    def __str__(self) -> str:
        return self.name

RETRIES_PER_NODE = 4  # patterns tried again at a node one of them rewrote, per sweep


def _sweep(ctx: RewriteContext, by_op: dict[str, list[PatternRule]], hits: Counter,
           trying: _Trying) -> bool:
    """Try the patterns once at every node of ``ctx.graph``; whether anything changed."""
    graph, rejected, changed = ctx.graph, ctx.rejected, False
    for node in list(graph):
        for _ in range(RETRIES_PER_NODE):  # a rewritten node may match another pattern now
            if node.graph is not graph:
                break  # removed by a rewrite in this sweep
            hit = False
            for rule in by_op.get(node.op_type, ()):
                trying.name = rule.name
                outcome = rule.apply(node, ctx)
                if outcome is True:
                    hits[rule.name] += 1
                    changed = hit = True
                    break
                if isinstance(outcome, Reject):
                    rejected[f"{rule.name}: {outcome.reason}"] += 1
                    if ctx.rejected_at is not None:
                        ctx.rejected_at[node] = f"{rule.name}: {outcome.reason}"
            if not hit:
                break
    return changed


def run_cleanups(model: ir.Model, catalogue: Catalogue, strict: bool = True,
                 settings: RunSettings = DEFAULTS) -> Counter:
    """Run each cleanup of ``catalogue`` once, given the run's ``settings``; hits per rule."""

    hits: Counter = Counter()
    for rule in catalogue.cleanups:
        n = contained(rule.name, strict, functools.partial(rule.fn, model, settings))
        if n:
            hits[rule.name] += n
    return hits
