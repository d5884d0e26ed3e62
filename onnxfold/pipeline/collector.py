"""Python's cyclic garbage collector while a model loads and folds.

A loaded model is hundreds of thousands of long-lived objects (nodes, values, attributes, all
in reference cycles), and every full collection walks all of them again: 15-30% of a deep
graph's fold time. While a fold runs (:func:`long_lived`), young objects are collected less
often, and :func:`settled` freezes a model just loaded when that pays: collections then skip
it. Freezing has a price at the end: what became garbage while frozen (the folded model's old
nodes and weights) needs one full collection (~0.1 s on a large heap), unless the process
exits right after. So a small model (under ``FREEZE_MIN_NODES``) is frozen only by a process
that exits anyway. Until the model is loaded (:func:`settled`) there are no automatic
collections at all: what loading allocates is the model itself, which each collection would
walk to find nothing to free (three collections of a 12k-node graph while it loads). Everything
is undone when the outermost :func:`long_lived` ends. Objects without cycles (arrays, the buffer
pool's buffers) are freed by reference counting as always.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections.abc import Iterator
from dataclasses import dataclass

YOUNG_THRESHOLD = 50_000  # allocations between young collections (CPython's default: 700)
FREEZE_MIN_NODES = 5_000  # below, a fold's full collections cost less than the final one


@dataclass(frozen=True)
class _InEffect:
    """The outermost :func:`long_lived` running: whether its process goes on after it, and
    whether it turned automatic collection off until the model is loaded."""

    collect_after: bool
    loading: bool
    froze: bool = False  # settled() froze (gc.get_freeze_count walks every frozen object)


_in_effect: _InEffect | None = None  # set by the outermost long_lived() while it runs


@contextlib.contextmanager
def long_lived(collect_after: bool = True) -> Iterator[None]:
    """Fewer collections for the duration. An inner use does nothing, and so does any use while
    the caller has objects of its own frozen (they stay as they are) or automatic collection
    off. ``collect_after``: False when the process exits right after (see the module doc)."""
    global _in_effect
    old = gc.get_threshold()
    if _in_effect is not None or old[0] == 0 or gc.get_freeze_count():
        yield
        return
    gc.set_threshold(YOUNG_THRESHOLD, *old[1:])
    loading = gc.isenabled()  # (a caller that turned collection off keeps it off)
    if loading:
        gc.disable()
    _in_effect = _InEffect(collect_after, loading)
    try:
        yield
    finally:
        if _in_effect.loading:  # never settled (the model could not be loaded)
            gc.enable()
        froze = _in_effect.froze  # nothing was frozen when we began
        _in_effect = None
        gc.set_threshold(*old)
        if froze:
            gc.unfreeze()
            if collect_after and gc.isenabled():
                gc.collect()


def settled(nodes: int) -> None:
    """A model of ``nodes`` nodes was just loaded: freeze what exists, so that collections
    skip it while :func:`long_lived` is in effect, if that pays, and turn automatic collection
    back on (see the module doc)."""
    global _in_effect
    if _in_effect is None:
        return
    if not _in_effect.collect_after or nodes >= FREEZE_MIN_NODES:
        gc.freeze()
        _in_effect = dataclasses.replace(_in_effect, froze=True)
    if _in_effect.loading:
        gc.enable()
        _in_effect = dataclasses.replace(_in_effect, loading=False)
