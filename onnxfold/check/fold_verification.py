"""Verify every fold without guessing an input: re-derive each folded tensor from the original.

A folded initializer keeps the name of the value it replaces (``fold.materialize.replacement``),
so the original model says how that value was computed: the nodes between it and the
original's constants (its *cone*). This runs those nodes in onnxruntime (CPU, graph
optimizations off, the original's initializers handed over as initializers, so its kernels
prepack exactly as the original session's do: ``fold.fallback.run_nodes``) and compares the
result with the folded tensor:

- **bitwise**: the same dtype, shape and bytes (what every fold through data movement,
  integer arithmetic, comparisons, casts and IEEE ``+ - * / sqrt`` must give);
- **within N ulps**: the fold marked the tensor as computed by a native folder that is not
  bitwise (``ROUNDING_KEY``: a MatMul, a reduction that adds, ``exp`` by numpy:
  ``rules/facts.py``), or, unmarked by a fold, its cone holds such an op, and every element is
  within the budget of
  ``docs/exactness.md`` (:data:`ULPS_OWN` ulps of its own value plus :data:`ULPS_MAGNITUDE`
  ulps of the tensor's largest magnitude);
- **differs**: anything else; the check fails.

Some initializers have no original to be re-derived from, and say why (``not verifiable``):
one a rewrite made (a merged weight: its name is new), one whose cone reads a graph input
whose shape is not static (a value of the input's shape: the comparison on inputs covers it),
one onnxruntime cannot compute alone. Initializers the original holds with the same bytes
are not folds and are only counted.

Batches of targets run in one session each, their outputs bounded by ``batch_bytes``; a
failing batch is retried target by target so that one bad cone does not hide the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import onnx_ir as ir

from onnxfold.check.recipe_runs import RecipeRunner, Unresolved
from onnxfold.check.sessions import ModelRef, graph_of, label_of
from onnxfold.check.tolerance import ulp
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.fold.fallback import FallbackError, run_nodes
from onnxfold.fold.materialize import PROVENANCE_KEY, ROUNDING_KEY
from onnxfold.fold.recipes import Recipe
from onnxfold.ir.graph import captured_values, static_shape

# the budget of a fold that is not bitwise (a MatMul or a sum folded by numpy): numpy and
# onnxruntime's kernels add in other orders (docs/exactness.md, "Checking folds")
ULPS_OWN, ULPS_MAGNITUDE = 4.0, 2.0
BATCH_BYTES = 64 * 2**20  # the folded bytes one session re-derives at most
BATCH_TARGETS = 512

BITWISE, WITHIN, DIFFERS, UNVERIFIABLE = "bitwise", "within", "differs", "not verifiable"
REWRITE_CONSTANT = "made by a rewrite as a constant, not by folding (no original value of " \
    "that name); the comparison on inputs covers it"
REWRITE_ELSEWHERE = "made by a rewrite (no original value of that name); its recipe is known " \
    "only to the run that folded it (optimize --check verifies it)"


@dataclass
class TensorVerdict:
    """What re-deriving one folded initializer from the original gave."""

    name: str
    dtype: str
    shape: list[int]
    state: str  # BITWISE, WITHIN, DIFFERS or UNVERIFIABLE
    max_ulps: float | None = None  # WITHIN/DIFFERS floats: the largest difference in ulps
    mismatches: int = 0  # DIFFERS: elements outside the budget
    reason: str = ""  # UNVERIFIABLE: why; DIFFERS: how
    via: str = "original"  # re-derived from the original's nodes, or from the fold's "recipe"


@dataclass
class FoldVerification:
    """Every initializer of the optimized model that the original does not hold as it is."""

    model_a: str
    model_b: str
    tensors: list[TensorVerdict] = field(default_factory=list)
    unchanged: int = 0  # initializers the original holds with the same bytes (not folds)

    @property
    def ok(self) -> bool:
        return not any(t.state == DIFFERS for t in self.tensors)

    def __bool__(self) -> bool:
        return self.ok

    def count(self, state: str) -> int:
        return sum(t.state == state for t in self.tensors)

    @property
    def failing(self) -> list[str]:
        return [t.name for t in self.tensors if t.state == DIFFERS]

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(ok=self.ok, counts={s: self.count(s) for s in
                                        (BITWISE, WITHIN, DIFFERS, UNVERIFIABLE)})
        return data

    def summary(self) -> str:
        """One line (plus one per differing tensor and per reason of the unverifiable)."""
        within = [t.max_ulps or 0.0 for t in self.tensors if t.state == WITHIN]
        parts = [f"{self.count(BITWISE)} bitwise"]
        if within:
            parts.append(f"{len(within)} within {max(within):.3g} ulps (not bitwise ops)")
        if self.count(UNVERIFIABLE):
            parts.append(f"{self.count(UNVERIFIABLE)} not verifiable")
        parts.append(f"{self.count(DIFFERS)} differ")
        recipes = sum(t.via == "recipe" and t.state != UNVERIFIABLE for t in self.tensors)
        made = f" ({recipes} made by rewrites, from the fold's recipes)" if recipes else ""
        lines = [f"fold verification: {len(self.tensors)} folded tensors re-derived from the "
                 f"original in onnxruntime{made}: {', '.join(parts)}"]
        reasons: dict[str, int] = {}
        for t in self.tensors:
            if t.state == UNVERIFIABLE:
                reasons[t.reason] = reasons.get(t.reason, 0) + 1
            elif t.state == DIFFERS:
                lines.append(f"  DIFFERS {t.name} {t.dtype}{t.shape}: {t.reason}")
        lines += [f"  not verifiable ({n}): {reason}" for reason, n in reasons.items()]
        return "\n".join(lines)


def verify_folds(original: ModelRef, optimized: ModelRef, *,
                 input_shapes: Mapping[str, Sequence[int]] | None = None,
                 recipes: Mapping[str, Recipe] | None = None,
                 batch_bytes: int = BATCH_BYTES,
                 progress: Callable[[str], None] | None = None,
                 catalogue: Catalogue | None = None) -> FoldVerification:
    """Re-derive every folded initializer of ``optimized`` from ``original`` in onnxruntime.

    ``input_shapes`` (a binding of the original's inputs, e.g. the comparison's first feeds)
    lets cones that read an input's shape run on zeros of that shape; without it only inputs
    of static shape are fed. ``recipes`` (the optimized model's ``meta``, in the process that
    folded it: :mod:`onnxfold.fold.recipes`) re-derive the tensors a rewrite made. Raises
    InputError when a model cannot be read. ``catalogue``: whose op facts say which folds are
    bitwise (None: the installed rules).
    """
    catalogue = load_catalogue() if catalogue is None else catalogue
    tell = progress or (lambda text: None)
    label_a, label_b = label_of(original, "model A"), label_of(optimized, "model B")
    graph_a, graph_b = graph_of(original, label_a), graph_of(optimized, label_b)
    result = FoldVerification(label_a, label_b)
    deriving = _Deriving(graph_a, dict(input_shapes or {}), catalogue.bitwise)
    targets: list[tuple[ir.Value, ir.Value]] = []  # (original value, folded initializer)
    by_recipe: list[ir.Value] = []
    for name, folded in graph_b.graph.initializers.items():
        tensor = folded.const_value
        if tensor is None:
            continue
        source = deriving.values.get(name)
        if source is not None and source.const_value is not None and \
                source.producer() is None and _same(source.const_value, tensor):
            result.unchanged += 1
        elif (source is None or source.producer() is None) and recipes and name in recipes:
            by_recipe.append(folded)
        elif source is None:
            result.tensors.append(_unverifiable(folded, REWRITE_CONSTANT if recipes is not None
                                                else REWRITE_ELSEWHERE))
        elif source.const_value is not None and source.producer() is None:
            result.tensors.append(_unverifiable(
                folded, "an original initializer of that name holds other values (a "
                "rewrite changed it); the comparison on inputs covers it"))
        elif (why := deriving.unreachable(source)) is not None:
            result.tensors.append(_unverifiable(folded, why))
        else:
            targets.append((source, folded))
    targets.sort(key=lambda pair: deriving.position(pair[0]))
    for k, batch in enumerate(_batches(targets, batch_bytes)):
        tell(f"verifying folds {k + 1}")
        for (source, _), verdict in zip(batch, deriving.verify(batch)):
            producer = source.producer()
            if verdict.state == BITWISE and producer is not None and \
                    producer.op_type == "Constant" and producer.domain in ("", "ai.onnx"):
                result.unchanged += 1  # a Constant node's value, now an initializer
            else:
                result.tensors.append(verdict)
    if by_recipe:
        tell("verifying rewrite-made folds")
        result.tensors.extend(_by_recipes(deriving, graph_b, recipes or {}, by_recipe))
    order = {name: i for i, name in enumerate(graph_b.graph.initializers)}
    result.tensors.sort(key=lambda t: order.get(t.name, 0))
    return result


def _by_recipes(deriving: _Deriving, optimized: ir.Model, recipes: Mapping[str, Recipe],
                targets: list[ir.Value]) -> list[TensorVerdict]:
    """Each of ``targets`` (made by a rewrite) against its recipe re-run in onnxruntime."""
    runner = RecipeRunner(deriving.model, optimized, recipes, deriving.computed)
    verdicts = []
    for folded in targets:
        name = str(folded.name)
        try:
            derived = runner.derive(name)
        except Unresolved as e:
            verdicts.append(_unverifiable(folded, f"made by a rewrite; {e}"))
            continue
        exact = expects_bits(folded) or all((n.domain or "", n.op_type) in deriving.bitwise
                                            for n in recipes[name].nodes)
        verdict = judge(folded, derived, exact)
        verdict.via = "recipe"
        verdicts.append(verdict)
    return verdicts


def _batches(targets: list[tuple[ir.Value, ir.Value]], limit: int
             ) -> Iterable[list[tuple[ir.Value, ir.Value]]]:
    batch: list[tuple[ir.Value, ir.Value]] = []
    size = 0
    for pair in targets:
        nbytes = pair[1].const_value.nbytes if pair[1].const_value is not None else 0
        if batch and (size + nbytes > limit or len(batch) >= BATCH_TARGETS):
            yield batch
            batch, size = [], 0
        batch.append(pair)
        size += nbytes
    if batch:
        yield batch


def _unverifiable(folded: ir.Value, reason: str) -> TensorVerdict:
    tensor = folded.const_value
    assert tensor is not None
    return TensorVerdict(str(folded.name), _dtype(tensor), list(tensor.shape.numpy()),
                         UNVERIFIABLE, reason=reason)


def _dtype(tensor: ir.TensorProtocol) -> str:
    return tensor.dtype.name.lower()


def _same(a: ir.TensorProtocol, b: ir.TensorProtocol) -> bool:
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and \
        a.tobytes() == b.tobytes()


class _Deriving:
    """The original graph's cones: which nodes compute a value from its constants."""

    def __init__(self, model: ir.Model, input_shapes: dict[str, Sequence[int]],
                 bitwise: frozenset[tuple[str, str]]) -> None:
        self.model = model
        graph = model.graph
        self.order = {node: i for i, node in enumerate(graph)}
        self.values: dict[str, ir.Value] = {}
        for value in [*graph.inputs, *graph.initializers.values()]:
            self.values[str(value.name)] = value
        for node in graph:
            for out in node.outputs:
                if out.name:
                    self.values[out.name] = out
        self.inputs = {v for v in graph.inputs if v.name not in graph.initializers}
        self.input_shapes = {name: tuple(int(d) for d in shape)
                             for name, shape in input_shapes.items()}
        self.bitwise = bitwise  # the catalogue's op fact
        self._reads: dict[ir.Value, frozenset[ir.Value]] = {}

    def _cone(self, roots: Iterable[ir.Value]) -> tuple[list[ir.Node], set[ir.Value]]:
        """The nodes computing ``roots`` (in graph order) and the values they read from
        outside (constants and graph inputs)."""
        nodes: set[ir.Node] = set()
        leaves: set[ir.Value] = set()
        stack = list(roots)
        seen: set[ir.Value] = set()
        while stack:
            value = stack.pop()
            if value in seen:
                continue
            seen.add(value)
            producer = value.producer()
            if producer is None or producer.graph is not self.model.graph:
                leaves.add(value)
                continue
            if producer not in nodes:
                nodes.add(producer)
                stack.extend(v for v in [*producer.inputs, *captured_values(producer)]
                             if v is not None)
        return sorted(nodes, key=self.order.__getitem__), leaves

    def position(self, value: ir.Value) -> int:
        """Where ``value``'s producer stands in the original graph (batches follow it)."""
        producer = value.producer()
        return self.order.get(producer, 0) if producer is not None else 0

    def _shape_of(self, value: ir.Value) -> tuple[int, ...] | None:
        return self.input_shapes.get(str(value.name)) or static_shape(value)

    def unreachable(self, source: ir.Value) -> str | None:
        """Why ``source`` cannot be re-derived without inputs (None: it can)."""
        _, leaves = self._cone([source])
        for leaf in leaves:
            if leaf in self.inputs and self._shape_of(leaf) is None:
                return "computed from the shape of an input with dynamic dims; the " \
                    "comparison on inputs covers it"
            if leaf.const_value is None and leaf not in self.inputs:
                return "reads a value onnxfold cannot re-derive alone (a value of an " \
                    "enclosing scope)"
        return None

    def _feeds(self, leaves: set[ir.Value]) -> dict[ir.Value, np.ndarray]:
        feeds = {}
        for leaf in leaves:
            if leaf in self.inputs:
                shape = self._shape_of(leaf)
                assert shape is not None and leaf.dtype is not None
                feeds[leaf] = np.zeros(shape, leaf.dtype.numpy())
            else:
                assert leaf.const_value is not None
                feeds[leaf] = leaf.const_value.numpy()
        return feeds

    def verify(self, batch: list[tuple[ir.Value, ir.Value]]) -> list[TensorVerdict]:
        """Re-derive ``batch`` in one session; on failure, each target alone."""
        try:
            derived = self._run([source for source, _ in batch])
        except FallbackError as e:
            if len(batch) == 1:
                return [_unverifiable(batch[0][1], f"onnxruntime cannot compute it from the "
                                      f"original: {str(e)[:200]}")]
            return [v for pair in batch for v in self.verify([pair])]
        return [self._judge(source, folded, derived[source]) for source, folded in batch]

    def computed(self, name: str) -> np.ndarray | None:
        """The array the original computes for its value ``name`` from its constants (None:
        no such value, or one that needs inputs or cannot run)."""
        value = self.values.get(name)
        if value is None or value.producer() is None or self.unreachable(value) is not None:
            return None
        try:
            return self._run([value])[value]
        except FallbackError:
            return None

    def _run(self, sources: list[ir.Value]) -> dict[ir.Value, np.ndarray]:
        nodes, leaves = self._cone(sources)
        opsets = dict(self.model.opset_imports)
        arrays = run_nodes(nodes, self._feeds(leaves), sources, opsets, self.model.ir_version,
                           stored=[v for v in leaves if v not in self.inputs])
        return dict(zip(sources, arrays))

    def _exact_cone(self, source: ir.Value) -> bool:
        nodes, _ = self._cone([source])
        return all((n.domain or "", n.op_type) in self.bitwise or not any(
            o.dtype is not None and o.dtype.is_floating_point() for o in n.outputs)
            for n in nodes)

    def _judge(self, source: ir.Value, folded: ir.Value, derived: np.ndarray) -> TensorVerdict:
        return judge(folded, derived, expects_bits(folded) or self._exact_cone(source))


def expects_bits(folded: ir.Value) -> bool:
    """Whether the fold says it computed ``folded`` as onnxruntime does, bit for bit: it
    carries provenance and no :data:`ROUNDING_KEY` (no native folder that is not bitwise
    computed it)."""
    tensor = folded.const_value
    return tensor is not None and PROVENANCE_KEY in tensor.metadata_props and \
        ROUNDING_KEY not in tensor.metadata_props


def judge(folded: ir.Value, derived: np.ndarray, exact: bool) -> TensorVerdict:
    """``folded`` against the ``derived`` array: bitwise, or (``exact`` False: a cone with
    an op that is not bitwise) within the ulp budget, or it differs."""
    tensor = folded.const_value
    assert tensor is not None
    verdict = TensorVerdict(str(folded.name), _dtype(tensor), list(tensor.shape.numpy()),
                            BITWISE)
    got = tensor.numpy()
    if got.dtype != derived.dtype or got.shape != derived.shape:
        verdict.state = DIFFERS
        verdict.reason = f"the original computes {derived.dtype}{list(derived.shape)}"
        return verdict
    if got.tobytes() == derived.tobytes():
        return verdict
    if got.dtype.kind != "f" and got.dtype.name != "bfloat16":
        verdict.state = DIFFERS
        verdict.mismatches = int(np.sum(got != derived))
        verdict.reason = f"{verdict.mismatches} of {got.size} elements differ"
        return verdict
    x, y = got.astype(np.float64), derived.astype(np.float64)
    with np.errstate(all="ignore"):
        # a NaN is any NaN (no op reads its sign or payload); a zero has its sign where
        # bits are expected (1 / -0.0 is -inf): docs/exactness.md
        same = ((x == y) & ((x != 0) | (np.signbit(x) == np.signbit(y)) | (not exact))) | \
            (np.isnan(x) & np.isnan(y))
        diff = np.where(same, 0.0, np.abs(x - y))
        own = ulp(y, got.dtype.name)
        assert own is not None
        finite = np.isfinite(y)
        magnitude = float(np.abs(y[finite]).max()) if finite.any() else 0.0
        scale = float(ulp(np.array(magnitude), got.dtype.name))  # type: ignore[arg-type]
        ulps = np.where(same, 0.0, diff / own)
        verdict.max_ulps = float(np.nanmax(ulps)) if ulps.size else 0.0
        if not exact:
            outside = ~same & ~(diff <= ULPS_OWN * own + ULPS_MAGNITUDE * scale)
            verdict.mismatches = int(outside.sum())
            if not verdict.mismatches:
                verdict.state = WITHIN
                return verdict
            verdict.reason = (f"{verdict.mismatches} of {got.size} elements beyond "
                              f"{ULPS_OWN:g} ulps + {ULPS_MAGNITUDE:g} ulps of max |x| "
                              f"(max {verdict.max_ulps:.3g} ulps)")
        else:
            verdict.mismatches = int((~same).sum())
            if not verdict.mismatches:  # NaNs of other bits: the same values
                return verdict
            verdict.reason = (f"{verdict.mismatches} of {got.size} elements differ from "
                              f"the original's bits (every op of its cone is bitwise; max "
                              f"{verdict.max_ulps:.3g} ulps)")
    verdict.state = DIFFERS
    return verdict


__all__ = ["BITWISE", "DIFFERS", "UNVERIFIABLE", "WITHIN", "FoldVerification",
           "TensorVerdict", "verify_folds"]
