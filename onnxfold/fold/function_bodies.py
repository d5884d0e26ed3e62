"""Constants inside model-local function bodies fold, without inlining the functions.

A function body is folded with the graph folder's machinery (``fold.GraphFolder``: native
rules, the onnxruntime fallback, the pool budget, the size policy, ``--keep``, disabled rules),
narrowed to what is constant *whatever the call*:

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
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.analysis.constness import ConstPlan, plan_graph
from onnxfold.analysis.declines import DeclineKind, Reason
from onnxfold.declare.catalogue import Catalogue
from onnxfold.fold.folder import FoldOptions, FoldStats, GraphFolder
from onnxfold.fold.pool import BufferPool
from onnxfold.ir.constants import source_array
from onnxfold.ir.edits import remove_dead_nodes_in
from onnxfold.ir.graph import is_default_op, subgraphs

_LITERALS = frozenset({"value", "value_float", "value_floats", "value_int", "value_ints",
                       "value_string", "value_strings", "sparse_value"})


def _literal_constant(node: ir.Node) -> bool:
    """A Constant node whose value is written in the body, not passed by the caller, nor kept
    in an external file: the trust boundary (``io/trust.py``) checks the files of the graphs'
    tensors, not of the bodies' (an unchecked location may name any file, ``/etc/...``)."""
    attrs = list(node.attributes.values())
    if len(attrs) != 1 or attrs[0].is_ref() or attrs[0].name not in _LITERALS:
        return False
    return not (attrs[0].type == ir.AttributeType.TENSOR and
                isinstance(attrs[0].as_tensor(), ir.ExternalTensor))


class FunctionBodyFolder(GraphFolder):
    """A ``GraphFolder`` for one function body (see the module docstring)."""

    def __init__(self, function: ir.Function, model: ir.Model, options: FoldOptions,
                 catalogue: Catalogue, stats: FoldStats, pool: BufferPool,
                 called: frozenset[tuple[str, str]]) -> None:
        self.called = called  # (domain, name) of every local function: calls are not folded
        super().__init__(function.graph, model, options, catalogue, stats, pool)
        self.opset_imports = {**model.opset_imports, **function.opset_imports}
        self.opset = self.opset_imports.get("", 1)
        self.sizes: dict[ir.Value, tuple[tuple[int, ...], np.dtype]] = {}  # what was computed

    def _make_plan(self, outer: Iterable[ir.Value]) -> ConstPlan:
        plan = plan_graph(self.graph, self.model.ir_version, (), shape_folding=False,
                          keep=self.options.keep, facts=self.facts)
        passed = {v for n in self.graph if is_default_op(n, "Constant") and
                  not _literal_constant(n) for v in n.outputs}
        plan.sources -= passed
        plan.constant -= passed

        def constant_inputs(node: ir.Node) -> bool:
            return all(v in plan.constant for v in node.inputs if v is not None)

        foldable = []
        for node in plan.foldable:  # topological: a removal upstream is seen downstream
            reason = _why_not_in_body(node, self.called)
            if reason is None and constant_inputs(node):
                foldable.append(node)
                continue
            plan.constant.difference_update(node.outputs)
            if reason is not None and constant_inputs(node):
                plan.refused.append((node, reason))
        plan.foldable = foldable
        plan.refused = [(n, r) for n, r in plan.refused if constant_inputs(n)]
        return plan

    def _finish(self, node: ir.Node, results: dict[ir.Value, np.ndarray], how: str) -> None:
        self.sizes.update((v, (arr.shape, arr.dtype)) for v, arr in results.items())
        super()._finish(node, results, how)

    def _store(self, value: ir.Value, arr: np.ndarray) -> None:
        """A Constant node computes ``value`` (under its name) where its producer was."""
        producer = value.producer()
        assert producer is not None  # a computed value
        new = self._replacement(value, arr)
        assert new.const_value is not None
        constant = ir.Node("", "Constant", [], [ir.AttrTensor("value", new.const_value)],
                           outputs=[new])
        self.graph.insert_before(producer, constant)
        self.stats.function_constants += 1


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
def _known(sizes: dict[ir.Value, tuple[tuple[int, ...], np.dtype]],
           constants: dict[ir.Value, np.ndarray]) -> Iterator[None]:
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


def fold_function(function: ir.Function, model: ir.Model, options: FoldOptions,
                  catalogue: Catalogue, stats: FoldStats, pool: BufferPool,
                  called: frozenset[tuple[str, str]] | None = None) -> None:
    """Fold the constants of one function body in place (see the module docstring);
    ``called``: the (domain, name) of the model's local functions, when the caller has them."""
    if not any(is_default_op(n, "Constant") and _literal_constant(n) for n in function.graph):
        return  # no constant in the body: nothing in it can fold
    if called is None:
        called = local_functions(model)
    probe = FunctionBodyFolder(function, model, dataclasses.replace(
        options, growth_factor=None, max_growth_bytes=None), catalogue, FoldStats(), pool,
        called)
    constants = {v: arr for v in probe.plan.sources if (arr := source_array(v)) is not None}
    sizes = {v: (arr.shape, arr.dtype) for v, arr in constants.items()}
    if probe.planned:
        held = set(pool.keys())
        probe.run()
        for key in set(pool.keys()) - held:  # the probe's results: only their sizes matter
            pool.release(key, pool.count(key))
        sizes.update(probe.sizes)
    folded = stats.folded
    with _known(sizes, constants):
        folder = FunctionBodyFolder(function, model, options, catalogue, stats, pool, called)
        folder.run()
        folder.materialize()
    stats.folded_in_functions += stats.folded - folded
    if stats.folded > folded:  # replaced by Constants, or by the constant an Identity copied
        remove_dead_nodes_in(function.graph, frozenset(options.keep))


def fold_functions(model: ir.Model, options: FoldOptions, catalogue: Catalogue,
                   stats: FoldStats, pool: BufferPool) -> int:
    """Fold the constants in every model-local function body; return how many nodes folded."""
    before = stats.folded
    newest = onnx.defs.onnx_opset_version()
    called = local_functions(model)  # once: each body's folder needs it
    for function in list(model.functions.values()):
        opset = function.opset_imports.get("", function.opset_imports.get("ai.onnx", 0))
        # none: a folded result could not be written (a Constant is a default-domain node);
        # newer than onnx knows: its ops may mean something new
        if 0 < opset <= newest:
            fold_function(function, model, options, catalogue, stats, pool, called)
    if options.strict and len(pool):
        raise RuntimeError(f"buffers left in the pool after folding: {pool.keys()[:5]}")
    return stats.folded - before
