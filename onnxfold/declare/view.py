"""What a pattern rule may ask about the graph it matched in: :class:`GraphView`, queries only.

A check receives the view as its first argument (``ctx``) and answers from it; it never
changes the graph (the rewrite returns its replacement, and the driver puts it in). The
answers hold for one sweep of one graph: the driver makes a new view for each, and updates
what it knows (the constants, the shape values) as rewrites change the graph.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxfold.analysis.constness import OpFacts, runtime_constant_nodes
from onnxfold.analysis.dim_algebra import Dim, Dims, Known, Sym
from onnxfold.analysis.settings import RunSettings
from onnxfold.analysis.step_inputs import (
    ShapeSteps,
    derived_dims,
    describe_dim,
    dim_symbol,
    input_dims,
    known_constant,
)
from onnxfold.ir.constants import has_source_array, source_array
from onnxfold.ir.graph import static_shape, through_identities, use_count

IDENTITY_HOPS = 16  # Identity nodes GraphView.array looks through
_RUNTIME_CONSTANTS = "runtime constants"  # the memo's key for them


class GraphView:
    """What a pattern rule may ask about the graph a pattern matched in, for one sweep.

    ``constant``: the values the constness analysis found constant (the driver adds what
    rewrites build from constants); ``shape_values``: computes (or updates) the graph's shape
    values, asked at most once per sweep; ``memo``: what rules remember about the graph during
    the sweep (:meth:`remembered`), emptied by the driver when a rewrite builds a node;
    ``positions``: each node's place in the graph as the sweep found it (made when first asked;
    the driver forgets the nodes a rewrite moves), for :meth:`in_order`;
    ``shared_dim_names``: the input dim names that prove nothing in this run
    (``symbolic.shared_dim_names``; the driver computes them once per sweep).

    It holds only what rules ask (``tests/unit/test_graph_view_surface.py``); what the driver
    alone needs (what ``--keep`` keeps, which values a graph output may be) it reads from the
    settings and the graph.
    """

    def __init__(self, graph: ir.Graph, model: ir.Model, constant: AbstractSet[ir.Value],
                 facts: OpFacts, *, shape_steps: ShapeSteps, settings: RunSettings,
                 shape_values: Callable[[GraphView], dict[ir.Value, Known]],
                 memo: dict[str, Any], positions: Callable[[], dict[ir.Node, int]],
                 shared_dim_names: Callable[[], frozenset[str]]) -> None:
        self._graph, self._model, self._constant, self._facts = graph, model, constant, facts
        self._steps, self._settings = shape_steps, settings
        self._compute_shape_values = shape_values
        self._shape_values: dict[ir.Value, Known] | None = None
        self._arrays: dict[ir.Value, np.ndarray | None] = {}
        self._memo = memo
        self._positions = positions
        self._shared_dim_names = shared_dim_names

    @property
    def settings(self) -> RunSettings:
        """The run's settings (what the user keeps, the runtime-constant inputs, ...)."""
        return self._settings

    @property
    def in_subgraph(self) -> bool:
        """Whether the graph is a subgraph (an ``If`` branch, a ``Loop`` body, ...), whose
        outputs the enclosing graph reads."""
        return self._graph is not self._model.graph

    def opset(self, domain: str = "") -> int:
        """The model's opset of ``domain`` (1 where it imports none)."""
        return self._model.opset_imports.get(domain, 1)

    def here(self, node: ir.Node | None) -> bool:
        """Whether ``node`` is a node of this graph (not of an enclosing one, nor removed)."""
        return node is not None and node.graph is self._graph

    def in_order(self, nodes: Iterable[ir.Node]) -> list[ir.Node]:
        """Those of ``nodes`` that are in this graph, in its order: by their places (a graph's
        order is kept by every edit but a move), or a walk of the graph where a node has none
        (built or moved in this sweep). Each merge of a deep model's MatMuls asks: a walk from
        the start for each made the merges quadratic in the layers."""
        wanted = set(nodes)
        places = self._positions()
        here = [node for node in wanted if node.graph is self._graph]
        if all(node in places for node in here):
            return sorted(here, key=places.__getitem__)
        found: list[ir.Node] = []
        for node in self._graph:
            if node in wanted:
                found.append(node)
                if len(found) == len(wanted):
                    break  # the rest of the graph holds none of them
        return found

    def is_graph_output(self, value: ir.Value | None) -> bool:
        """Whether ``value`` is an output of this graph."""
        return value is not None and value in self._graph.outputs

    def single_use(self, value: ir.Value) -> bool:
        """Whether one node reads ``value`` (once) and it is not a graph output (counted, not
        copied: patterns ask it of values every layer reads)."""
        return use_count(value) == 1 and value not in self._graph.outputs

    def reader(self, value: ir.Value) -> ir.Node | None:
        """The node reading ``value`` where :meth:`single_use` holds; None where it does not."""
        return next(iter(value.uses())).node if self.single_use(value) else None

    def readers(self, value: ir.Value) -> tuple[tuple[ir.Node, int], ...]:
        """Each use of ``value``: the node reading it and at which input (a node reading it at
        two inputs is there twice). A rule walks them to find what to build from (the
        siblings of a product, the readers of a sequence); whether it may remove what they
        read is the driver's to judge."""
        return tuple((use.node, use.idx) for use in value.uses())

    def is_constant(self, value: ir.Value | None) -> bool:
        """Whether ``value`` is computed from constants only (the fold will know it)."""
        return value is not None and value in self._constant

    def is_runtime_constant(self, value: ir.Value | None) -> bool:
        """Whether ``value`` is computed from the run's runtime-constant inputs
        (``settings.runtime_inputs``, main graph only) and constants by nodes that may fold:
        known once the first call's feeds are, not before (a compile-time constant is not)."""
        if value is None or not self._settings.runtime_inputs or self.in_subgraph:
            return False
        memo = self._memo
        found = memo.get(_RUNTIME_CONSTANTS)
        if not isinstance(found, frozenset):  # computed once per sweep (and after a build)
            graph = self._graph
            inputs = [v for v in graph.inputs if v.name in self._settings.runtime_inputs]
            nodes = runtime_constant_nodes(graph, inputs, self._constant, self._settings.keep,
                                           facts=self._facts)
            found = frozenset(inputs).union(*(n.outputs for n in nodes))
            memo[_RUNTIME_CONSTANTS] = found
        return value in found

    def known_at_fold(self, value: ir.Value | None) -> bool:
        """Whether ``value`` is a constant or a runtime constant (:meth:`is_runtime_constant`)."""
        return self.is_constant(value) or self.is_runtime_constant(value)

    def array(self, value: ir.Value | None) -> np.ndarray | None:
        """The data of an initializer or Constant output, also through Identity nodes (an
        exporter's way to share one weight); not of values still to be folded, nor of an
        initializer that is also a graph input (a default: the driver, not the rule, decides
        that it is no constant)."""
        if value is None:
            return None
        if value in self._arrays:  # a constant's data does not change during a sweep
            return self._arrays[value]
        link = self._data_link(value)
        found = None if link is None else source_array(link)
        self._arrays[value] = found
        return found

    def has_array(self, value: ir.Value | None) -> bool:
        """Whether :meth:`array` gives data for ``value``, without reading it: a tensor of a
        caller's proto is copied out of the proto at every read (protobuf gives no view)."""
        if value is None:
            return False
        if value in self._arrays:
            return self._arrays[value] is not None
        return self._data_link(value) is not None

    def _data_link(self, value: ir.Value) -> ir.Value | None:
        """The value along ``value``'s Identity chain whose data :meth:`array` reads; None
        where there is none."""
        for link in itertools.islice(through_identities(value), IDENTITY_HOPS):
            if link in self._graph.inputs and link not in self._constant:
                return None  # an initializer that is also a graph input: a default a caller
                # may override (IR >= 4), whose value no rule may read
            if has_source_array(link):
                return link
        return None

    def shape(self, value: ir.Value | None) -> tuple[int, ...] | None:
        """``value``'s shape where every dim is static (a constant's, from its data)."""
        if value is None:
            return None
        if value.const_value is not None:
            return tuple(value.const_value.shape.numpy())
        return static_shape(value)

    def dim(self, value: ir.Value, axis: int) -> Dim | None:
        """Axis ``axis`` of ``value`` as an int or a symbol (``onnxfold.analysis.symbolic``)."""
        return dim_symbol(value, axis, self._shared_dim_names())

    def input_dims(self, value: ir.Value) -> Dims | None:
        """Every dim of ``value`` as :meth:`dim` gives it (a constant's: ints)."""
        return input_dims(value, self._shared_dim_names())

    def derived_dims(self, node: ir.Node) -> Dims | None:
        """The dims of ``node``'s first output that its op's shape step gives from its
        inputs' dims and shape values; None where not derived."""
        return derived_dims(node, self.shape_value, self.array, self._shared_dim_names(),
                            steps=self._steps)

    def describe_dim(self, atom: Sym) -> str:
        """A dynamic dim in words, named after the graph inputs that declare it."""
        return describe_dim(atom, self._model)

    def shape_value(self, value: ir.Value) -> Known | None:
        """What a small integer tensor of this graph computes, element by element (static
        ints or dynamic dims: ``onnxfold.analysis.symbolic``); computed once per sweep, except
        for a constant's, read at once."""
        found = known_constant(value, self.array)
        if found is not None:
            return found
        if self._shape_values is None:
            self._shape_values = self._compute_shape_values(self)
        return self._shape_values.get(value)

    def remembered(self, key: str) -> dict[Any, Any]:
        """A rule's memo of answers about this graph, kept for the sweep until a rewrite
        builds a node: what it holds must stay true when rewrites only reroute values
        (``rules/zero_sign.py``'s answers do, as long as values are only rerouted to readers
        of the same kind)."""
        return self._memo.setdefault(key, {})
