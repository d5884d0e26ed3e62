"""Pattern rules: graph rewrites that enable or improve folding, and whole-graph cleanups.

A pattern rule is a function registered with :func:`pattern` for one or more root op types. It
receives the root node and a :class:`RewriteContext`, and returns ``True`` when it rewrote the
graph, ``None`` when the node does not match, or a string: the reason a match was rejected (kept
for ``--explain``). A cleanup rule (:func:`cleanup`) runs once over the whole model and returns
how many changes it made. Both kinds have a name, a hit counter and a source location, and both
are disabled by name like folder rules.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from onnxfold.analysis import plan_graph, static_shape, subgraphs

MAX_ITERATIONS = 10


@dataclass
class PatternRule:
    name: str
    op_types: tuple[str, ...]
    fn: Callable
    source: str
    hits: int = 0


@dataclass
class CleanupRule:
    name: str
    fn: Callable
    source: str
    hits: int = 0


_PATTERNS: list[PatternRule] = []
_CLEANUPS: list[CleanupRule] = []
_names = itertools.count()


def _where(fn: Callable) -> str:
    return f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"  # no source parsing


def pattern(op_types: str | Iterable[str], name: str | None = None) -> Callable:
    """Register a rewrite rooted at nodes of ``op_types``."""
    ops = (op_types,) if isinstance(op_types, str) else tuple(op_types)

    def register(fn: Callable) -> Callable:
        _PATTERNS.append(PatternRule(name or fn.__name__, ops, fn, _where(fn)))
        return fn

    return register


def cleanup(name: str | None = None) -> Callable:
    """Register a whole-model cleanup ``fn(model) -> number of changes``."""

    def register(fn: Callable) -> Callable:
        _CLEANUPS.append(CleanupRule(name or fn.__name__, fn, _where(fn)))
        return fn

    return register


def pattern_rules() -> list[PatternRule]:
    from onnxfold.registry import default_registry

    default_registry()  # imports every rules module
    return list(_PATTERNS)


def cleanup_rules() -> list[CleanupRule]:
    from onnxfold.registry import default_registry

    default_registry()
    return list(_CLEANUPS)


@dataclass
class RewriteContext:
    """What a pattern may ask about the graph it rewrites."""

    graph: ir.Graph
    model: ir.Model
    constant: set[ir.Value]
    rejected: Counter = field(default_factory=Counter)

    def is_constant(self, value: ir.Value | None) -> bool:
        return value is not None and value in self.constant

    def array(self, value: ir.Value | None) -> np.ndarray | None:
        """The data of an initializer or Constant output (not of values still to be folded)."""
        from onnxfold.fold import _source_array

        return None if value is None else _source_array(value)

    def shape(self, value: ir.Value | None) -> tuple[int, ...] | None:
        if value is None:
            return None
        if value.const_value is not None:
            return tuple(value.const_value.shape.numpy())
        return static_shape(value)

    def producer(self, value: ir.Value | None, *op_types: str) -> ir.Node | None:
        """The default-domain node of one of ``op_types`` that computes ``value``, if any."""
        node = value.producer() if value is not None else None
        if node is None or node.op_type not in op_types or node.domain not in ("", "ai.onnx"):
            return None
        return node

    def single_use(self, value: ir.Value) -> bool:
        return len(value.uses()) == 1 and value not in self.graph.outputs

    def fresh_name(self, base: str) -> str:
        return f"{base}__onnxfold{next(_names)}"

    def constant_value(self, array: np.ndarray, base: str) -> ir.Value:
        """A new initializer holding ``array``."""
        name = self.fresh_name(base)
        value = ir.Value(name=name, shape=ir.Shape(array.shape),
                         type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                         const_value=ir.Tensor(array, name=name))
        self.graph.register_initializer(value)
        if self.model.ir_version < 4 and self.graph is self.model.graph:
            self.graph.inputs.append(value)  # IR 3: initializers are inputs (main graph only)
        return value

    def add_node(self, op_type: str, inputs: list, before: ir.Node, *, attributes=(),
                 dtype: ir.DataType | None = None, shape: ir.Shape | None = None,
                 domain: str = "", base: str | None = None) -> ir.Value:
        """Insert a one-output node before ``before``; return its (freshly named) output."""
        node = ir.Node(domain, op_type, inputs, attributes=list(attributes),
                       name=self.fresh_name(op_type))
        out = node.outputs[0]
        out.name = self.fresh_name(base or op_type)
        out.dtype, out.shape = dtype, shape
        self.graph.insert_before(before, node)
        return out

    def replace_node(self, node: ir.Node, new: ir.Value) -> None:
        """``new`` takes over the only output of ``node``, which leaves the graph."""
        self.replace_output(node.outputs[0], new)
        self.graph.remove(node, safe=True)

    def remove_if_unused(self, node: ir.Node) -> None:
        """Remove ``node`` once a rewrite has moved every reader of its results elsewhere."""
        if all(not v.uses() and v not in self.graph.outputs for v in node.outputs):
            self.graph.remove(node, safe=True)

    def replace_output(self, old: ir.Value, new: ir.Value) -> None:
        """Route every use of ``old`` to ``new``, keeping graph output names stable."""
        name = old.name
        old.replace_all_uses_with(new, replace_graph_outputs=True)
        if new in self.graph.outputs:
            old.name = self.fresh_name(name or "replaced")
            new.name = name


def _graphs(model: ir.Model) -> list[ir.Graph]:
    out = [model.graph]
    for graph in out:
        for node in graph:
            out.extend(subgraphs(node))
    return out


def rewrite(model: ir.Model, disabled: set[str], rejected: Counter | None = None,
            inputs_are_constant: bool = False, constant_inputs: bool = False) -> Counter:
    """Apply the enabled pattern rules everywhere until nothing changes; return hits per rule.

    ``constant_inputs``: the main graph's inputs count as constants (see ``plan_graph``).
    """
    hits: Counter = Counter()
    rejected = rejected if rejected is not None else Counter()
    by_op: dict[str, list[PatternRule]] = {}
    for rule in pattern_rules():
        if rule.name in disabled:
            continue
        for op in rule.op_types:
            by_op.setdefault(op, []).append(rule)
    for _ in range(MAX_ITERATIONS):
        changed = False
        for graph in _graphs(model):
            plan = plan_graph(graph, model.ir_version, inputs_are_constant=inputs_are_constant,
                              constant_inputs=constant_inputs and graph is model.graph)
            ctx = RewriteContext(graph, model, plan.constant, rejected)
            for node in list(graph):
                if node.graph is not graph:
                    continue  # removed by an earlier rewrite in this sweep
                for rule in by_op.get(node.op_type, ()):
                    outcome = rule.fn(node, ctx)
                    if outcome is True:
                        rule.hits += 1
                        hits[rule.name] += 1
                        changed = True
                        break
                    if isinstance(outcome, str):
                        rejected[f"{rule.name}: {outcome}"] += 1
        if not changed:
            break
    return hits


def run_cleanups(model: ir.Model, disabled: set[str]) -> Counter:
    hits: Counter = Counter()
    for rule in cleanup_rules():
        if rule.name in disabled:
            continue
        n = rule.fn(model)
        if n:
            rule.hits += n
            hits[rule.name] += n
    return hits
