"""Wrong folds planted in a folded model, for proving that ``onnxfold compare`` catches them.

A fold that computes a tensor slightly wrong, or a shape off by one, is the bug the check
exists for. Given an original model and its fold (default options), these plant one such
error in a tensor the fold verification re-derived from the original
(``onnxfold.check.folds.verification.verify_folds``) and save the result with onnxfold's
provenance kept (so ``compare`` verifies its folds):

- ``ulps``: one element of a folded float tensor (verified ``bitwise``, else ``within``, and
  computed exactly by the fold: :func:`held_to_bits`), the one of largest magnitude, moved 4
  ulps up (``np.nextafter`` 4 times);
- ``reshape``: a folded Reshape target (an int64 initializer that a Reshape reads as its shape,
  verified ``bitwise``) with its largest element plus one.

:func:`planted` raises :class:`NoTarget` (saying why) when the fold has no such tensor;
:func:`planted_together` plants every kind with a target in one model (one comparison judges
them all, each tensor named where it differs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from onnxfold.ir.provenance import ROUNDING as ROUNDING_KEY
from tests.support.cli import Finished, run_cli

KINDS = ("ulps", "reshape")
ULPS = 4
_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)


class NoTarget(Exception):
    """The folded model has no tensor this kind of plant needs."""


def fold(src: Path, out: Path) -> Path:
    """``src`` folded with the default options, saved at ``out``."""
    import onnxfold

    onnxfold.optimize(str(src)).save(str(out))
    return out


def verdicts(src: Path, folded: Path) -> dict[str, str]:
    """Folded initializer name -> its fold verification state."""
    from onnxfold.check.folds.verification import verify_folds

    return {t.name: t.state for t in verify_folds(str(src), str(folded)).tensors}


def _moved(value: np.generic, ulps: int) -> np.generic:
    for _ in range(ulps):
        value = np.nextafter(value, np.array(np.inf, value.dtype))
    return value


def _replace(target: onnx.TensorProto, arr: np.ndarray) -> None:
    """``target`` holding ``arr`` instead, its metadata (the fold's provenance) kept: a wrong
    fold is still a fold."""
    kept = list(target.metadata_props)
    target.CopyFrom(numpy_helper.from_array(arr, target.name))
    target.metadata_props.extend(kept)


def held_to_bits(init: onnx.TensorProto) -> bool:
    """Whether the fold computed ``init`` as onnxruntime does, bit for bit (it carries no
    ``onnxfold.rounding``: no native folder that is not bitwise computed it), so that fold
    verification holds it to its bits; one it marks is allowed 4 ulps of its own value plus
    2 of the tensor's largest magnitude (``docs/exactness.md``), where a 4-ulp plant is
    within the budget by design."""
    return not any(p.key == ROUNDING_KEY for p in init.metadata_props)


def _plant_ulps(model: onnx.ModelProto, states: dict[str, str],
                original: onnx.ModelProto) -> tuple[str, str]:
    by_state: dict[str, list[onnx.TensorProto]] = {"bitwise": [], "within": []}
    inexact = []
    for init in model.graph.initializer:
        state = states.get(init.name)
        if state in by_state and init.data_type in _FLOATS and int(np.prod(init.dims)) > 0:
            arr = numpy_helper.to_array(init)
            if not np.any(np.isfinite(arr) & (arr != 0)):
                continue
            if held_to_bits(init):
                by_state[state].append(init)
            else:
                inexact.append(init.name)
    state = "bitwise" if by_state["bitwise"] else "within"
    if not by_state[state]:
        raise NoTarget("no folded float tensor verified bitwise or within (with a finite "
                       "nonzero element) that the fold computed exactly"
                       + (f"; {len(inexact)} computed by a native MatMul/reduction, where 4 "
                          "ulps are within the budget" if inexact else ""))
    target = max(by_state[state], key=lambda t: (int(np.prod(t.dims)), t.name))
    arr = numpy_helper.to_array(target).copy()
    flat = arr.reshape(-1)
    finite = np.where(np.isfinite(flat), np.abs(flat), -1.0)
    index = int(np.argmax(finite))
    before = flat[index]
    flat[index] = _moved(flat[index], ULPS)
    _replace(target, arr)
    return target.name, (f"{target.name} {arr.dtype}{list(arr.shape)} ({state}) element "
                         f"{index}: {before!r} -> {flat[index]!r}")


def _plant_reshape(model: onnx.ModelProto, states: dict[str, str],
                   original: onnx.ModelProto) -> tuple[str, str]:
    inits = {t.name: t for t in model.graph.initializer}
    targets = sorted({n.input[1] for n in model.graph.node
                      if n.op_type == "Reshape" and n.domain in ("", "ai.onnx")
                      and len(n.input) > 1 and n.input[1] in inits
                      and states.get(n.input[1]) == "bitwise"
                      and inits[n.input[1]].data_type == onnx.TensorProto.INT64})
    if not targets:
        raise NoTarget("no folded Reshape target (an int64 shape a Reshape reads) verified "
                       "bitwise")
    # a target with a positive element (a dim it states) first: -1 -> 0 would copy a dim
    target = max((inits[name] for name in targets),
                 key=lambda t: numpy_helper.to_array(t).max(initial=-1) > 0)
    arr = numpy_helper.to_array(target).copy()
    flat = arr.reshape(-1)
    index = int(np.argmax(flat))
    before = int(flat[index])
    flat[index] += 1
    _replace(target, arr)
    return target.name, f"{target.name} int64{list(arr.shape)} {before} -> {before + 1} at " \
        f"{index}"


_PLANTS = {"ulps": _plant_ulps, "reshape": _plant_reshape}


def planted(kind: str, src: Path, folded: Path, states: dict[str, str], out: Path) -> str:
    """Plant ``kind`` in a copy of ``folded`` (the fold of ``src``) saved at ``out``; returns
    what was changed."""
    model = onnx.load(str(folded))
    what = _PLANTS[kind](model, states, onnx.load(str(src)))[1]
    onnx.save(model, str(out))
    return what


def planted_together(src: Path, folded: Path, states: dict[str, str], out: Path
                     ) -> dict[str, str]:
    """Every kind that has a target planted in one copy of ``folded`` saved at ``out`` (one
    comparison then judges them all: the fold verification names each tensor that differs);
    the planted tensors' names -> what was changed. NoTarget where no kind has one."""
    model, original = onnx.load(str(folded)), onnx.load(str(src))
    found, why = {}, []
    for kind, plant in _PLANTS.items():
        try:
            name, what = plant(model, states, original)
        except NoTarget as e:
            why.append(f"{kind}: {e}")
            continue
        found[name] = f"{kind}: {what}"
    if not found:
        raise NoTarget("; ".join(why))
    onnx.save(model, str(out))
    return found


def compare(original: Path, other: Path) -> Finished:
    """``python -m onnxfold compare ORIGINAL OTHER`` (defaults) in a child, its stdin empty."""
    return run_cli("compare", original, other, timeout=600, input="")


def try_all(src: Path, prefix: Path) -> dict[str, str]:
    """Each kind planted in ``src``'s fold and compared: kind -> ``caught: WHAT``, ``MISSED
    (exit 0): WHAT``, ``not run (compare exit N): WHAT`` (compare could not run the original)
    or ``skip: WHY``."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    folded = fold(src, Path(f"{prefix}.folded.onnx"))
    states = verdicts(src, folded)
    outcome = {}
    for kind in KINDS:
        out = Path(f"{prefix}.{kind}.onnx")
        try:
            what = planted(kind, src, folded, states, out)
        except NoTarget as e:
            outcome[kind] = f"skip: {e}"
            continue
        code = compare(src, out).returncode
        outcome[kind] = (f"caught: {what}" if code == 1 else f"MISSED (exit 0): {what}"
                         if code == 0 else f"not run (compare exit {code}): {what}")
    return outcome
