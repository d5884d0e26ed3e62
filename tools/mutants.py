"""Bugs a fold or a rewrite could really have, planted into onnxfold's own rules: what the check
must catch.

Each :class:`Mutant` turns the installed catalogue into one with one wrong rule (a folder, a
pattern's check or rewrite, a shape step), as a bug would make it: a dynamic dim baked, an
input's values folded as zeros, Q and K swapped in a merged weight, a Reshape target off by
one, a weight transposed by the wrong permutation, a folded or merged weight a few ulps off, a
Cast dropped, a normalization's epsilon taken as zero. ``python -m tools.mutants NAME
ARGS...`` runs ``onnxfold ARGS...`` with the mutant in place (the one catalogue every part of
the run loads: the fold, and the check of ``--check`` in the same process, as a bug would be);
``tools/mutation_tier.py`` runs every mutant over the export matrix.

Nothing here is imported by onnxfold: a mutant exists only in the process that runs it.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxfold.declare.pattern_rules import PatternRule
from onnxfold.declare.registry import FolderRule, ShapeValueRule

ULPS = 4


@dataclass(frozen=True)
class Mutant:
    """A bug (``what``) planted by ``plant(catalogue) -> catalogue``."""

    name: str
    what: str
    plant: Callable


def _replace_folder(catalogue, op_type: str, wrap: Callable[[Callable], Callable]):
    rules = tuple(dataclasses.replace(r, fn=wrap(r.fn)) if isinstance(r, FolderRule) and
                  r.op_type == op_type and r.domain in ("", "ai.onnx") else r
                  for r in catalogue.rules)
    return dataclasses.replace(catalogue, rules=rules)


def _replace_pattern(catalogue, name: str, *, rewrite: Callable | None = None,
                     check: Callable | None = None):
    rules = []
    for rule in catalogue.rules:
        if isinstance(rule, PatternRule) and rule.name == name:
            rule = dataclasses.replace(rule, rewrite=rewrite(rule.rewrite) if rewrite else
                                       rule.rewrite,
                                       check=check(rule.check) if check else rule.check)
        rules.append(rule)
    return dataclasses.replace(catalogue, rules=tuple(rules))


def _same_signature(original: Callable, wrapper: Callable) -> Callable:
    """``wrapper`` taking the keyword arguments ``original`` takes (the driver reads them)."""
    functools.update_wrapper(wrapper, original)
    return wrapper


# -- the mutants ---------------------------------------------------------------------------------


def bake_batch(catalogue):
    """The symbolic engine reads a dynamic dim on axis 0 as 1 (a batch baked)."""
    from onnxfold.analysis.dim_algebra import Known, Sym

    def wrap(fn):
        def shape_of(step):
            known = fn(step)
            if known is None or not known.elements:
                return known
            first = known.elements[0]
            start = step.node.attributes.get_int("start", 0)
            if start == 0 and isinstance(first, Sym):
                return Known((1, *known.elements[1:]), known.scalar, known.dtype)
            return known
        return shape_of

    rules = tuple(dataclasses.replace(r, fn=wrap(r.fn)) if isinstance(r, ShapeValueRule) and
                  r.op_type == "Shape" else r for r in catalogue.rules)
    return dataclasses.replace(catalogue, rules=rules)


def bake_input_values(catalogue):
    """A Gather whose indices are a graph input's values reads them as zeros (an input's
    values taken as a constant): a pattern that should not exist."""
    from onnxfold.declare import P, Var, pattern

    def reads_input(ctx, node, table, indices):
        return ctx.is_constant(table) and indices.is_graph_input()

    @pattern(P("Gather", Var("table"), Var("indices"), name="node"), check=reads_input,
             name="bake_gather_indices")
    def bake(op, node, table, indices):
        zeros = op.ConstantOfShape(op.Shape(indices, _dtype=ir.DataType.INT64),
                                   value=ir.tensor(np.zeros(1, np.int64)),
                                   _dtype=ir.DataType.INT64)
        return op.Gather(table, zeros, _attributes=node.attributes)

    (rule,) = bake.__onnxfold_rules__
    return dataclasses.replace(catalogue, rules=(*catalogue.rules, rule))


def swap_merged_qk(catalogue):
    """Merging MatMuls that share their input concatenates two weights of the same width in
    the wrong order (Q and K swapped; K and V where grouped-query attention makes Q wider)."""
    def wrap(fn):
        def merge(op, x, products, first):
            pairs = [(i, j) for i in range(len(products)) for j in range(i + 1, len(products))
                     if products[i].columns == products[j].columns]
            if pairs:
                i, j = pairs[0]
                products = list(products)
                a, b = products[i], products[j]
                products[i] = dataclasses.replace(a, weight=b.weight)
                products[j] = dataclasses.replace(b, weight=a.weight)
            return fn(op, x=x, products=products, first=first)
        return _same_signature(fn, merge)
    return _replace_pattern(catalogue, "merge_shared_input_matmuls", rewrite=wrap)


def reshape_off_by_one(catalogue):
    """A Reshape target computed from known dims is one too large in its last entry."""
    def wrap(fn):
        def rewrite(op, node, x, target, dims):
            dims = list(dims)
            if dims and dims[-1] > 0:
                dims[-1] += 1
            return fn(op, node=node, x=x, target=target, dims=dims)
        return _same_signature(fn, rewrite)
    return _replace_pattern(catalogue, "reshape_known_target", rewrite=wrap)


def transpose_perm(catalogue):
    """The Transpose folder applies its permutation rotated by one (a 2-D weight is not
    transposed at all)."""
    def wrap(fn):
        def transpose(x, perm=None):
            perm = list(perm) if perm is not None else list(range(x.ndim))[::-1]
            return fn(x, perm=perm[1:] + perm[:1])
        return transpose
    return _replace_folder(catalogue, "Transpose", wrap)


def _ulps_off(arr: np.ndarray) -> np.ndarray:
    """``arr`` with its element of largest magnitude moved ULPS ulps up (floats only)."""
    if arr.dtype.kind != "f" or arr.size < 2:
        return arr
    out = np.array(arr, copy=True, order="C")  # (reshape(-1) of another layout copies)
    flat = out.reshape(-1)
    i = int(np.argmax(np.abs(flat)))
    for _ in range(ULPS):
        flat[i] = np.nextafter(flat[i], np.asarray(np.inf, flat.dtype))
    return out


def ulps_transpose(catalogue):
    """The Transpose folder rounds one element of a folded weight 4 ulps off."""
    return _replace_folder(catalogue, "Transpose",
                           lambda fn: lambda *a, **k: _ulps_off(fn(*a, **k)))


def ulps_concat(catalogue):
    """The Concat folder (merged Q/K/V weights) rounds one element 4 ulps off."""
    return _replace_folder(catalogue, "Concat",
                           lambda fn: lambda *a, **k: _ulps_off(fn(*a, **k)))


def dropped_cast(catalogue):
    """A Cast between two float types, or two integer types, is taken as a no-op and
    dropped."""
    def wrap(check):
        def is_noop(ctx, node, src):
            if node.op_type == "Cast" and node.outputs[0].dtype is not None and \
                    src.dtype is not None and src.dtype != node.outputs[0].dtype and \
                    src.dtype.is_floating_point() == node.outputs[0].dtype.is_floating_point():
                return True
            return check(ctx, node=node, src=src)
        return _same_signature(check, is_noop)
    return _replace_pattern(catalogue, "drop_noop", check=wrap)


def neutral_epsilon(catalogue):
    """``x + eps`` dropped as if adding zero, where the constant is at most 1e-5 (a
    normalization's epsilon): a change below any output tolerance where the variance is
    large."""
    from onnxfold.declare import P, Var, pattern

    def tiny(ctx, node, x, c):
        array = ctx.array(c)  # one element broadcast over x: x's shape, x's dtype
        return array is not None and array.size == 1 and array.dtype.kind == "f" and \
            0 < abs(float(array.reshape(-1)[0])) <= 1e-5 and x.shape is not None and \
            array.ndim <= len(x.shape) and not ctx.is_constant(x) and \
            x.dtype == node.outputs[0].dtype

    @pattern(P("Add", Var("x"), Var("c"), name="node"), check=tiny,
             name="drop_tiny_epsilon")
    def drop(op, x):
        return x

    (rule,) = drop.__onnxfold_rules__
    return dataclasses.replace(catalogue, rules=(*catalogue.rules, rule))


MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    Mutant("bake_batch", "a dynamic batch dim baked as 1 by the symbolic engine", bake_batch),
    Mutant("bake_input_values", "a Gather reading a graph input's values folded at zeros",
           bake_input_values),
    Mutant("swap_merged_qk", "Q and K (or K and V) weights swapped in a merged MatMul",
           swap_merged_qk),
    Mutant("reshape_off_by_one", "a Reshape target's last entry off by one",
           reshape_off_by_one),
    Mutant("transpose_perm", "a weight Transpose folded with the wrong permutation",
           transpose_perm),
    Mutant("ulps_transpose", "a folded Transpose 4 ulps off", ulps_transpose),
    Mutant("ulps_concat", "a merged (Concat) weight 4 ulps off", ulps_concat),
    Mutant("dropped_cast", "a Cast between two float or two integer types dropped",
           dropped_cast),
    Mutant("neutral_epsilon", "x + eps dropped as neutral where eps is at most 1e-5",
           neutral_epsilon),
)}


# Bugs in the machinery under the rules: the fold's onnxruntime runner, the buffer pool,
# materialization and the writer. Each patches onnxfold's code in this process only; the check
# runs onnxruntime through its own runner (``onnxfold.check.running.runner``), so a fault in
# the fold's is never re-derived as right.


def _patch(module_name: str, attribute: str, wrap: Callable[[Callable], Callable]) -> None:
    """Replace ``module.attribute`` by ``wrap(module.attribute)``."""
    import importlib

    module = importlib.import_module(module_name)
    setattr(module, attribute, wrap(getattr(module, attribute)))


_FOLD_RUNNERS = ("onnxfold.fold.fallback", "onnxfold.fold.fallback_child")


def _runner_results(change: Callable[[list], list]) -> None:
    """The fold's onnxruntime runner (``run_guarded``, as each caller imported it) returns
    ``change(results)``."""
    for module in _FOLD_RUNNERS:
        _patch(module, "run_guarded",
               lambda run: lambda *a, **k: change(list(run(*a, **k))))


def runner_ulps() -> None:
    """The fold's runner returns each float result 4 ulps off (one element)."""
    _runner_results(lambda results: [_ulps_off(r) for r in results])


def runner_order() -> None:
    """The fold's runner returns its results in reverse order where two or more have one
    dtype and shape (the order of ``outputs`` lost)."""
    def reverse(results: list) -> list:
        alike = len({(r.dtype, r.shape) for r in results}) == 1
        return results[::-1] if len(results) > 1 and alike else results
    _runner_results(reverse)


def runner_dropped() -> None:
    """The fold's runner drops its last result's values (zeros of its dtype and shape)."""
    _runner_results(lambda results: [*results[:-1], np.zeros_like(results[-1])]
                    if results else results)


def runner_half() -> None:
    """The fold's runner converts float32 results through float16 (a wrong dtype
    conversion)."""
    _runner_results(lambda results: [r.astype(np.float16).astype(np.float32)
                                     if r.dtype == np.float32 else r for r in results])


def pool_stale() -> None:
    """The buffer pool hands out a stale buffer: the first array it ever held of the same
    dtype and shape, in place of the one asked for."""
    from onnxfold.fold.pool import BufferPool

    first: dict[tuple, np.ndarray] = {}
    get = BufferPool.get

    def stale(self, key):
        arr = get(self, key)
        return first.setdefault((arr.dtype.str, arr.shape), arr)
    BufferPool.get = stale  # type: ignore[method-assign]


def materialize_ulps() -> None:
    """Materialization stores each folded float tensor 4 ulps off (one element)."""
    _patch("onnxfold.fold.materialize", "replacement",
           lambda make: lambda value, arr, folded_from: make(value, _ulps_off(arr),
                                                             folded_from))


def writer_ulps() -> None:
    """The writer writes each float array it streams 4 ulps off (one element)."""
    def wrap(unmapped: Callable) -> Callable:
        def shifted(given, *rest):
            seg = unmapped(given, *rest)
            if isinstance(seg.data, np.ndarray) and seg.data.dtype.kind == "f":
                return dataclasses.replace(seg, data=_ulps_off(seg.data))
            return seg
        return shifted
    _patch("onnxfold.io.segments", "unmapped", wrap)


MACHINERY: dict[str, Mutant] = {m.name: m for m in (
    Mutant("runner_ulps", "the fold's onnxruntime runner 4 ulps off", runner_ulps),
    Mutant("runner_order", "the fold's runner returning outputs in another order",
           runner_order),
    Mutant("runner_dropped", "the fold's runner dropping an output's values", runner_dropped),
    Mutant("runner_half", "the fold's runner converting float32 through float16", runner_half),
    Mutant("pool_stale", "the buffer pool handing out a stale buffer", pool_stale),
    Mutant("materialize_ulps", "a folded tensor stored 4 ulps off", materialize_ulps),
    Mutant("writer_ulps", "the writer writing a streamed float array 4 ulps off",
           writer_ulps),
)}


def planted(name: str) -> None:
    """Put mutant ``name`` in place in this process: every later ``load_catalogue()`` (the
    fold's and the check's) returns the mutated catalogue; a machinery mutant patches the
    fold's code at once."""
    if name in MACHINERY:
        MACHINERY[name].plant()
        return
    import onnxfold.declare.catalogue as catalogue_module

    original = catalogue_module.load_catalogue
    mutant = MUTANTS[name]

    @functools.cache
    def load_catalogue():
        return mutant.plant(original())

    catalogue_module.load_catalogue = load_catalogue  # type: ignore[assignment]


def main(argv: list[str]) -> int:
    """``python -m tools.mutants NAME ARGS...``: onnxfold ARGS with mutant NAME planted."""
    if not argv or argv[0] not in {**MUTANTS, **MACHINERY}:
        print(f"usage: python -m tools.mutants {{{','.join({**MUTANTS, **MACHINERY})}}} "
              "ONNXFOLD_ARGS...",
              file=sys.stderr)
        return 2
    planted(argv[0])
    from onnxfold.__main__ import main as onnxfold_main

    sys.argv = ["onnxfold", *argv[1:]]
    onnxfold_main()  # exits with onnxfold's code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
