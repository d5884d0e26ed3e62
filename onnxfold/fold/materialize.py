"""Write an evaluation's kept values into the graph: arrays become constants, with provenance.

Every value the graph keeps (a graph output, an input of a node that stays) and the evaluator
computed replaces its producer's output: as an initializer in a graph, as a Constant node in a
function body (the ``store`` the caller passes). Its tensor records the nodes it was computed
from (``provenance.FOLDED_FROM``). A result is refused here, and its node stays to compute it at run
time, when it is much larger than the constants it comes from (``budget.expansion``), cannot
serve as the shape input it feeds (``shape_inputs.py``) or holds strings; an Identity (chain)
of a source constant is replaced by that constant, not copied; a plain fold equal, bit for
bit, to one already stored in this graph reads that one (:class:`_Stored`: 58
ConstantOfShape weights of a DenseNet are one tensor), so the second copy is released, never
kept.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from onnxfold.analysis.declines import DeclineKind, Reason
from onnxfold.fold.budget import expansion
from onnxfold.fold.evaluate import Evaluated
from onnxfold.fold.plan import FoldPlan
from onnxfold.fold.policy import static_nbytes
from onnxfold.fold.pool import BufferPool
from onnxfold.fold.recipes import capture
from onnxfold.fold.settings import SizePolicy
from onnxfold.fold.shape_inputs import unusable_as_shape
from onnxfold.ir import provenance
from onnxfold.ir.graph import identity_source
from onnxfold.ir.recipes import encode
from onnxfold.ir.scopes import FOLDED_MODULE_KEY, module_path

Store = Callable[[ir.Value, np.ndarray, tuple[str, ...]], None]


@dataclass
class Materialized:
    """What :func:`materialize` wrote, and the evaluated nodes that stay after all."""

    stored: int = 0
    stored_bytes: int = 0
    refused: list[tuple[ir.Node, Reason]] = field(default_factory=list)


def materialize(evaluated: Evaluated, plan: FoldPlan, graph: ir.Graph, pool: BufferPool,
                policy: SizePolicy, store: Store) -> Materialized:
    """Turn every kept computed value into a constant replacing its producer's output
    (``store(value, array, provenance)``); release the kept buffers. A stored value a rewrite
    built keeps its recipe (:mod:`onnxfold.fold.recipes`), and one that stands for a value of
    the original says which (``onnxfold.ir.provenance``), on its tensor."""
    done = Materialized()
    derived = _DerivedBytes(plan, evaluated.input_bytes)
    outputs = frozenset(graph.outputs)  # (storing one value changes no other's membership)
    stored_by_content = _Stored()
    for value in list(evaluated.keep):
        if value not in pool:
            continue
        arr = pool.get(value)
        refused = expansion(arr.nbytes, functools.partial(derived, value), policy.expansion_factor,
                            policy.expansion_min_bytes, policy.max_tensor_bytes) or \
            unusable_as_shape(value, arr) or _text(arr)
        producer = value.producer()
        if refused is not None and producer is not None:
            done.refused.append((producer, refused))  # it stays, computing it at run time
        elif (source := _aliased_source(value, outputs, plan)) is not None:
            value.replace_all_uses_with(source)  # an Identity of a constant: read the constant
        elif _plain(value, outputs, evaluated) and (same := stored_by_content.get(arr)) is not None:
            value.replace_all_uses_with(same)  # equal bits: one initializer, one copy
            same.meta[provenance.SHARED] = True
        else:
            made = provenance.MADE_BY in value.meta  # a rewrite built it: keep its recipe
            recipe = capture(value, evaluated.how) if made else None
            standing = provenance.stands_for(value)
            name = value.name or ""
            store(value, arr, evaluated.provenance.get(value, ()))
            stored = graph.initializers.get(name)
            if stored is not None and (tensor := stored.const_value) is not None:
                if value in evaluated.rounded:
                    tensor.metadata_props[provenance.ROUNDING] = "numpy"
                if standing is not None:
                    tensor.metadata_props[provenance.STANDS_FOR] = standing
                if provenance.rewired(value):
                    tensor.metadata_props[provenance.REWIRED] = str(value.meta[
                        provenance.REWIRED])
                if recipe is not None:
                    tensor.metadata_props[provenance.RECIPE] = encode(recipe)
                stored_by_content.add(arr, stored)
            done.stored += 1
            done.stored_bytes += arr.nbytes
        pool.release(value)
    return done


def _text(arr: np.ndarray) -> Reason | None:
    """Why a tensor of strings is not stored: the fold keeps no strings (a constant's are no
    source either: ``ir.constants.source_array``); its node computes it at run time (a Cast
    of a constant to STRING, through onnxruntime, ended in an internal error when written)."""
    if arr.dtype.kind not in "OSU":
        return None
    return Reason(DeclineKind.RULE_DECLINED, "a tensor of strings is not stored: onnxruntime "
                  "computes it")


def _plain(value: ir.Value, outputs: Collection[ir.Value], evaluated: Evaluated) -> bool:
    """Whether ``value`` is a plain fold of the original, which any equal tensor may stand
    for: not a graph output (it keeps its own name), not rounded otherwise than onnxruntime
    rounds, not made, proved or rewired by a rewrite (its tensor says so, for the check)."""
    return value not in outputs and value not in evaluated.rounded and \
        provenance.MADE_BY not in value.meta and provenance.stands_for(value) is None and \
        not provenance.rewired(value)


class _Stored:
    """The initializers one materialization stored, by content: a plain fold equal to one of
    them, bit for bit, reads it. Candidates are narrowed by dtype, shape and a few sampled
    bytes; the bytes of a candidate that passes are compared whole (no hash trusted)."""

    SAMPLES = 16

    def __init__(self) -> None:
        self._by_key: dict[tuple, list[ir.Value]] = {}

    def _key(self, arr: np.ndarray) -> tuple | None:
        if not isinstance(arr, np.ndarray) or arr.dtype.kind == "O" or \
                not arr.flags.c_contiguous:
            return None  # strings have no bytes to compare; an unbuilt concatenation is not
            # built to be compared
        flat = _bytes(arr)
        return arr.dtype.str, arr.shape, flat[::max(1, flat.size // self.SAMPLES)].tobytes()

    def get(self, arr: np.ndarray) -> ir.Value | None:
        key = self._key(arr)
        for value in self._by_key.get(key, ()) if key is not None else ():
            assert value.const_value is not None
            if np.array_equal(_bytes(value.const_value.numpy()), _bytes(arr)):
                return value
        return None

    def add(self, arr: np.ndarray, value: ir.Value) -> None:
        key = self._key(arr)
        if key is not None:
            self._by_key.setdefault(key, []).append(value)


def _bytes(arr: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)


class _DerivedBytes:
    """The bytes of the distinct source constants a value is computed from (at most its
    node's input bytes): a result is judged against what it replaces, across a chain. A node
    refused by the budget leaves its input kept, and a Concat(x, x) chain doubles at every step
    while each step is only 1x its direct inputs. The origins are the plan's (traced before
    anything was evaluated or stored: the graph as the plan saw it)."""

    def __init__(self, plan: FoldPlan, input_bytes: dict[ir.Value, int]) -> None:
        self.plan, self.input_bytes = plan, input_bytes

    def __call__(self, value: ir.Value) -> int:
        sources = self.plan.origins.get(value)
        direct = self.input_bytes.get(value, 0)
        if sources is None:
            return direct
        return min(direct, sum(static_nbytes(s) or 0 for s in sources))


def _aliased_source(value: ir.Value, outputs: Collection[ir.Value], plan: FoldPlan
                    ) -> ir.Value | None:
    """The source constant ``value`` is an Identity (chain) of, when its readers can read
    that instead (``value`` is not one of the graph's ``outputs``): one copy per reader would
    duplicate a shared weight (two Identities of one weight, as exporters share weights) where
    the source costs nothing more."""
    return None if value in outputs else identity_source(value, plan.const.sources)


def replacement(value: ir.Value, arr: np.ndarray, folded_from: tuple[str, ...]) -> ir.Value:
    """A constant value named as ``value`` (renamed aside) that replaces it everywhere,
    graph outputs included; its tensor names the nodes it was computed from (and, in memory
    for the report, the module path of the node that computed it)."""
    name = value.name
    value.name = f"{name}__onnxfold_replaced"
    # (an unbuilt concatenation, ``onnxfold.ir.blocks``, is built where it is written)
    tensor = ir.Tensor(arr, ir.DataType.from_numpy(arr.dtype), name=name)
    tensor.metadata_props[provenance.FOLDED_FROM] = ",".join(folded_from)
    producer = value.producer()
    if producer is not None:
        tensor.meta[FOLDED_MODULE_KEY] = module_path(producer)
    new = ir.Value(name=name, shape=ir.Shape(arr.shape), type=ir.TensorType(tensor.dtype),
                   const_value=tensor)
    value.replace_all_uses_with(new, replace_graph_outputs=True)
    return new


def as_initializer(graph: ir.Graph, model: ir.Model) -> Store:
    """The store of a graph: an initializer replaces the value (and, in IR 3, is an input of
    the main graph too)."""
    def store(value: ir.Value, arr: np.ndarray, folded_from: tuple[str, ...]) -> None:
        new = replacement(value, arr, folded_from)
        graph.register_initializer(new)
        if model.ir_version < 4 and graph is model.graph:
            graph.inputs.append(new)
    return store
