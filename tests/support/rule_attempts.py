"""One attempt of one pattern rule at one node, as the rewrite driver makes it, and who
decided its outcome: the rule's check or the driver's judgement of the proposal.

The driver's refusals (``rewrite/judge.py``: a value the rewrite removes read outside the
match, a graph output, a node of a QDQ unit, ``--keep``) are told apart from the rule's own
declines by recording what the driver's judge returns during the attempt.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import onnx
import onnx_ir as ir

from onnxfold.analysis.constness import plan_graph
from onnxfold.analysis.settings import RunSettings
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.rewrite import judge, sweep
from onnxfold.rewrite.driver import _Worklist


@dataclass(frozen=True)
class Attempt:
    """How the attempt ended: ``rewrote``; else ``refused_by_driver`` (the driver's reason) or
    the rule's own decline (``declined``: its Reject's reason, or "" for a plain False)."""

    rewrote: bool
    refused_by_driver: str | None = None
    declined: str | None = None

    def __str__(self) -> str:
        if self.rewrote:
            return "rewrote"
        if self.refused_by_driver is not None:
            return f"the driver refused: {self.refused_by_driver}"
        return f"the rule declined: {self.declined or 'no match'}"


def attempt(proto: onnx.ModelProto, rule: str, node_name: str, monkeypatch,
            runtime_inputs: tuple[str, ...] = ()) -> tuple[Attempt, ir.Model]:
    """Try ``rule`` (alone) once at the node named ``node_name`` of ``proto``, as the first
    sweep of the driver would (``runtime_inputs``: the run's, ``RunSettings``): the attempt,
    and the model after it."""
    model = ir.serde.deserialize_model(proto)
    catalogue = load_catalogue().only(rule)
    graph = model.graph
    node = next(n for n in graph if n.name == node_name)
    plan = plan_graph(graph, model.ir_version, facts=catalogue)
    rejected_at: dict[ir.Node, str] = {}
    state = sweep.GraphState(graph, model, plan.constant, catalogue, Counter(), rejected_at,
                             shape_steps=catalogue.shape_steps,
                             settings=RunSettings(runtime_inputs=frozenset(runtime_inputs)))
    refusals: list[str] = []

    def judged(function):
        def recorded(*args, **kwargs):
            reason = function(*args, **kwargs)
            if reason is not None:
                refusals.append(reason)
            return reason
        return recorded

    monkeypatch.setattr(sweep, "refusal", judged(judge.refusal))
    monkeypatch.setattr(sweep, "match_refusal", judged(judge.match_refusal))
    trial = sweep.Sweep(state, sweep.rule_orders(catalogue.patterns_by_op()), sweep.Effects(),
                        sweep.Trying(), _Worklist(1))
    rewrote = trial._try(node)
    monkeypatch.undo()
    if rewrote:
        return Attempt(True), model
    reason = rejected_at.get(node, "").split(": ", 1)[-1]
    if refusals and reason == refusals[-1]:
        return Attempt(False, refused_by_driver=reason), model
    return Attempt(False, declined=reason), model
