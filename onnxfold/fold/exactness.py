"""Which native folds must be computed by onnxruntime's kernels instead: bitwise where a step
can flip.

A native folder that is not ``bitwise`` (``rules/facts.py``: a MatMul, a reduction that adds,
Exp, Pow, ...) computes within a few ulps of onnxruntime, which sums in another order or uses
other approximations. That is invisible in a continuous computation and decisive where the
value meets a ``discontinuous`` op: a QuantizeLinear, a Cast to an integer type, a rounding, a
comparison, an ArgMax, a Range's length. One ulp there moves a result by a whole step (a
quantized weight one step off, a token chosen differently). So a node whose native fold is not
bitwise and whose floating-point result reaches a discontinuous op, directly or through any
chain of nodes with floating-point results (folded or left to run, since the runtime reads the
folded initializer), runs through the onnxruntime fallback instead, batched with its
neighbours: the folded value is then the one onnxruntime computes.

A value that leaves a subgraph (If, Loop, Scan bodies) is followed no further and counts as
reaching one: the conservative answer.

The same holds for a value that becomes one of the graph's outputs through folded nodes only:
the model then returns the folded initializer itself, which must be the one onnxruntime
computes (a constant output costs one session; a model whose inputs are all constant folds to
exactly the outputs onnxruntime gives it). A value read by nodes left to run on other inputs
is not followed to the outputs: continuous ops keep its few ulps a few ulps.
"""

from __future__ import annotations

from collections.abc import Collection

import onnx_ir as ir

from onnxfold.declare.catalogue import Catalogue
from onnxfold.ir.graph import DEFAULT_DOMAINS


def _domain(node: ir.Node) -> str:
    return "" if node.domain in DEFAULT_DOMAINS else node.domain


def _maybe_float(value: ir.Value) -> bool:
    """Whether ``value`` may hold floating-point numbers (an unknown type may)."""
    return value.dtype is None or value.dtype.is_floating_point()


class Discontinuities:
    """Answers, for a model, which values reach a discontinuous op (memoized per value)."""

    def __init__(self, catalogue: Catalogue, main_graph: ir.Graph,
                 folded: Collection[ir.Node] = (), graph: ir.Graph | None = None) -> None:
        self.catalogue = catalogue
        self.main_graph = main_graph
        self.folded = folded
        self.outputs = set(graph.outputs) if graph is not None else set()
        self.reaching: dict[ir.Value, bool] = {}
        self.returned: dict[ir.Value, bool] = {}

    def breaks(self, node: ir.Node) -> bool:
        """Whether ``node`` turns a one-ulp change of a floating-point input into a step."""
        fact = self.catalogue.discontinuous.get((_domain(node), node.op_type))
        if fact is None:
            return False
        return not fact.only_to_integers or any(
            out.dtype is None or not out.dtype.is_floating_point() for out in node.outputs)

    def _leaves_subgraph(self, value: ir.Value) -> bool:
        producer = value.producer()
        graph = producer.graph if producer is not None else None
        return graph is not None and graph is not self.main_graph and value in graph.outputs

    def reaches(self, root: ir.Value) -> bool:
        """Whether ``root``'s floating-point values flow into a discontinuous op."""
        stack: list[tuple[ir.Value, bool]] = [(root, False)]
        while stack:
            value, expanded = stack.pop()
            if value in self.reaching and not expanded:
                continue
            follow: list[ir.Value] = []
            hit = self._leaves_subgraph(value)
            for user, _ in value.uses() if not hit else ():
                if self.breaks(user):
                    hit = True
                    break
                follow.extend(out for out in user.outputs if _maybe_float(out))
            if hit:
                self.reaching[value] = True
            elif not expanded:
                stack.append((value, True))
                stack.extend((v, False) for v in follow if v not in self.reaching)
            else:
                self.reaching[value] = any(self.reaching.get(v, False) for v in follow)
        return self.reaching[root]

    def returns(self, root: ir.Value) -> bool:
        """Whether ``root`` flows into a graph output through folded nodes only."""
        stack: list[tuple[ir.Value, bool]] = [(root, False)]
        while stack:
            value, expanded = stack.pop()
            if value in self.returned and not expanded:
                continue
            if value in self.outputs:
                self.returned[value] = True
                continue
            follow = [out for user, _ in value.uses() if user in self.folded
                      for out in user.outputs if _maybe_float(out)]
            if not expanded:
                stack.append((value, True))
                stack.extend((v, False) for v in follow if v not in self.returned)
            else:
                self.returned[value] = any(self.returned.get(v, False) for v in follow)
        return self.returned[root]

    def is_bitwise(self, node: ir.Node) -> bool:
        """Whether ``node``'s native fold computes onnxruntime's bits (declared bitwise, or no
        floating-point result: integer arithmetic and float-to-integer ops are exact)."""
        return (_domain(node), node.op_type) in self.catalogue.bitwise or not any(
            _maybe_float(out) for out in node.outputs)

    def needs_onnxruntime(self, node: ir.Node) -> bool:
        """Whether ``node`` must be folded by onnxruntime's kernel, not natively."""
        return not self.is_bitwise(node) and any(
            self.reaches(out) or self.returns(out) for out in node.outputs if _maybe_float(out))


def needing_onnxruntime(nodes: Collection[ir.Node], catalogue: Catalogue, opset: int,
                        main_graph: ir.Graph, graph: ir.Graph) -> set[ir.Node]:
    """The nodes among ``nodes`` (the folded nodes of ``graph``) that have a native folder but
    must be folded by onnxruntime (see the module docstring)."""
    found = Discontinuities(catalogue, main_graph, nodes, graph)
    return {node for node in nodes
            if catalogue.folder(node.domain, node.op_type, node.version or opset) is not None
            and found.needs_onnxruntime(node)}
