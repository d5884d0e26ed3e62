"""Constants inside model-local function bodies fold, without inlining the functions.

A function body is folded by the graph fold's three steps (``plan.py``, ``evaluate.py``,
``materialize.py``: native rules, the onnxruntime fallback, the pool budget, the size policy,
``--keep``, disabled rules), its constness narrowed to what is constant *whatever the call*:

- sources are ``Constant`` nodes with a literal ``value*`` attribute; a Constant whose
  attribute refers to a function attribute (``ref_attr_name``) or whose tensor is in an
  external file (unchecked: see ``_literal_constant``) and the function's inputs are not
  constants;
- a node with an attribute reference, a node with subgraphs (their bodies could hold
  references too), and a call of another local function are never folded;
- Shape/Size fold only from a constant input (a body's shapes are not known per call).

Functions have no initializers: a kept result becomes a ``Constant`` node with the name of the
value it replaces (so a function output keeps its name). The growth policy needs sizes, which a
body rarely declares: a probe evaluates the body's constant nodes first (without the growth
policy, its results dropped) to learn them, and the fold itself then runs with those sizes as
static shapes, refusing exactly what the graph folder would refuse. Nodes left unused go.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.analysis.constness import ConstPlan, plan_graph
from onnxfold.analysis.declines import DeclineKind, Reason
from onnxfold.declare.catalogue import Catalogue
from onnxfold.fold.budget import pool_budget
from onnxfold.fold.evaluate import Evaluator
from onnxfold.fold.folder import FoldCounts, fold_graph
from onnxfold.fold.materialize import Store, replacement
from onnxfold.fold.plan import FoldPlan, plan_fold
from onnxfold.fold.pool import BufferPool
from onnxfold.fold.settings import FoldSettings
from onnxfold.ir.constants import source_array
from onnxfold.ir.edits import remove_dead_nodes_in
from onnxfold.ir.graph import is_default_op, subgraphs

Sizes = dict[ir.Value, tuple[tuple[int, ...], np.dtype]]  # a value's shape and dtype
_LITERALS = frozenset({"value", "value_float", "value_floats", "value_int", "value_ints",
                       "value_string", "value_strings", "sparse_value"})


def _literal_constant(node: ir.Node) -> bool:
    """A Constant node whose value is written in the body, not passed by the caller, nor kept
    in an external file: the trust boundary (``io/trust.py``) checks the files of the graphs'
    tensors, not of the bodies' (an unchecked location may name any file, ``/etc/...``)."""
    attrs = list(node.attributes.values())
    if len(attrs) != 1 or attrs[0].is_ref() or attrs[0].name not in _LITERALS:
        return False
    # (``value``, not ``as_tensor()``: its check against onnx-ir's tensor protocol costs more
    # than the rest of a small body's fold, 10,000 bodies over)
    return not (attrs[0].type == ir.AttributeType.TENSOR and
                isinstance(attrs[0].value, ir.ExternalTensor))


def _body_constness(function: ir.Function, model: ir.Model, keep: frozenset[str],
                    facts: Catalogue, called: frozenset[tuple[str, str]]) -> ConstPlan:
    """The constness analysis of a body, narrowed to what is constant whatever the call."""
    graph = function.graph
    plan = plan_graph(graph, model.ir_version, (), shape_folding=False, keep=keep,
                      facts=facts)
    passed = {v for n in graph if is_default_op(n, "Constant") and not _literal_constant(n)
              for v in n.outputs}
    plan.sources -= passed
    plan.constant -= passed

    def constant_inputs(node: ir.Node) -> bool:
        return all(v in plan.constant for v in node.inputs if v is not None)

    foldable = []
    for node in plan.foldable:  # topological: a removal upstream is seen downstream
        reason = _why_not_in_body(node, called)
        if reason is None and constant_inputs(node):
            foldable.append(node)
            continue
        plan.constant.difference_update(node.outputs)
        if reason is not None and constant_inputs(node):
            plan.refused.append((node, reason))
    plan.foldable = foldable
    plan.refused = [(n, r) for n, r in plan.refused if constant_inputs(n)]
    return plan


def _as_constant_node(graph: ir.Graph) -> Store:
    """The store of a body: a Constant node computes the value (under its name) where its
    producer was."""
    def store(value: ir.Value, arr: np.ndarray, provenance: tuple[str, ...]) -> None:
        producer = value.producer()
        assert producer is not None  # a computed value
        new = replacement(value, arr, provenance)
        assert new.const_value is not None
        constant = ir.Node("", "Constant", [], [ir.AttrTensor("value", new.const_value)],
                           outputs=[new])
        graph.insert_before(producer, constant)
    return store


def local_functions(model: ir.Model) -> frozenset[tuple[str, str]]:
    """(domain, name) of each of ``model``'s local functions: a node calling one of them."""
    return frozenset((domain, name) for domain, name, _overload in model.functions)


def _why_not_in_body(node: ir.Node, called: frozenset[tuple[str, str]]) -> Reason | None:
    if (node.domain, node.op_type) in called:
        return Reason(DeclineKind.CUSTOM_DOMAIN, "a call of a model-local function")
    if any(attr.is_ref() for attr in node.attributes.values()):
        return Reason(DeclineKind.RULE_DECLINED, "an attribute refers to a function attribute")
    if subgraphs(node):
        return Reason(DeclineKind.RULE_DECLINED, "subgraphs in function bodies are not folded")
    return None


@contextmanager
def _known(sizes: Sizes, constants: dict[ir.Value, np.ndarray]) -> Iterator[None]:
    """For a while, give these values static shapes (and dtypes), and the body's Constant
    outputs their data as ``const_value``, as a graph's initializers have it (so an Identity
    of a constant is read as that constant, not copied); then restore them."""
    saved = [(v, v.shape, v.type, v.const_value) for v in {**sizes, **constants}]
    try:
        for value, (dims, dtype) in sizes.items():
            value.shape = ir.Shape(dims)
            if value.dtype is None:
                value.dtype = ir.DataType.from_numpy(dtype)
        for value, arr in constants.items():
            if value.const_value is None:
                value.const_value = ir.Tensor(arr)
        yield
    finally:
        for value, shape, type_, const in saved:
            value.shape, value.type, value.const_value = shape, type_, const


class _Body:
    """One function body's fold inputs: what its plans and evaluations share."""

    def __init__(self, function: ir.Function, model: ir.Model, catalogue: Catalogue,
                 pool: BufferPool, called: frozenset[tuple[str, str]]) -> None:
        self.function, self.model, self.catalogue, self.pool = function, model, catalogue, pool
        self.called = called
        self.opset_imports = {**model.opset_imports, **function.opset_imports}

    def plan(self, settings: FoldSettings, growth_spent: int) -> FoldPlan:
        const = _body_constness(self.function, self.model, settings.keep, self.catalogue,
                                self.called)
        return plan_fold(const, self.function.graph, self.model, settings.policy, self.catalogue,
                         self.catalogue.shape_only, self.opset_imports.get("", 1), growth_spent)

    def probe(self, settings: FoldSettings) -> tuple[dict[ir.Value, np.ndarray], Sizes]:
        """The body's constants, and the sizes of those and of what its constant nodes
        compute, by an evaluation without the growth policy whose results are dropped."""
        settings = dataclasses.replace(settings, policy=dataclasses.replace(
            settings.policy, growth_factor=None, max_growth_bytes=None))
        plan = self.plan(settings, 0)
        constants = {v: arr for v in plan.const.sources
                     if (arr := source_array(v)) is not None}
        sizes = {v: (arr.shape, arr.dtype) for v, arr in constants.items()}
        if plan.order:
            def observe(results: dict[ir.Value, np.ndarray]) -> None:
                sizes.update((v, (arr.shape, arr.dtype)) for v, arr in results.items())

            held = set(self.pool.keys())
            Evaluator(plan, self.function.graph, self.model, settings.evaluation, self.catalogue,
                      self.pool, self.opset_imports, observe=observe).run()
            for key in set(self.pool.keys()) - held:  # only their sizes matter
                self.pool.release(key, self.pool.count(key))
        return constants, sizes


def fold_function(function: ir.Function, model: ir.Model, settings: FoldSettings,
                  catalogue: Catalogue, pool: BufferPool, growth_spent: int,
                  counts: FoldCounts, called: frozenset[tuple[str, str]] | None = None) -> None:
    """Fold the constants of one function body in place (see the module docstring), adding
    to ``counts``; ``growth_spent``: what the run's folds let the model grow by before this
    body (``max_growth_bytes`` bounds the sum); ``called``: the (domain, name) of the model's
    local functions, when the caller has them."""
    if not any(is_default_op(n, "Constant") and _literal_constant(n) for n in function.graph):
        return  # no constant in the body: nothing in it can fold
    body = _Body(function, model, catalogue, pool,
                 local_functions(model) if called is None else called)
    constants, sizes = body.probe(settings)
    folded = counts.folded
    with _known(sizes, constants):
        plan = body.plan(settings, growth_spent)
        done = fold_graph(plan, function.graph, model, settings, catalogue, pool,
                          body.opset_imports, _as_constant_node(function.graph), counts)
    counts.function_constants += done.stored
    if counts.folded > folded:  # replaced by Constants, or by the constant an Identity copied
        remove_dead_nodes_in(function.graph, settings.keep)


def fold_functions(model: ir.Model, settings: FoldSettings, catalogue: Catalogue,
                   pool: BufferPool, growth_spent: int = 0) -> FoldCounts:
    """Fold the constants in every model-local function body; return what happened (its
    ``growth_bytes``: what the bodies' folds let the model grow by). ``growth_spent``: what
    the run's earlier folds let it grow by (``max_growth_bytes`` bounds the sum)."""
    counts = FoldCounts()
    newest = onnx.defs.onnx_opset_version()
    called = local_functions(model)  # once: each body's folder needs it
    # the budget once, too: the default one reads the cgroup files, twice per body otherwise
    limits = settings.evaluation
    settings = dataclasses.replace(settings, evaluation=dataclasses.replace(
        limits, pool_budget=pool_budget(limits.pool_budget, limits.memory_limit)))
    for function in list(model.functions.values()):
        opset = function.opset_imports.get("", function.opset_imports.get("ai.onnx", 0))
        # none: a folded result could not be written (a Constant is a default-domain node);
        # newer than onnx knows: its ops may mean something new
        if 0 < opset <= newest:
            fold_function(function, model, settings, catalogue, pool,
                          growth_spent + counts.growth_bytes, counts, called)
    return counts
