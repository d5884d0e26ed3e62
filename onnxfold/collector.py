"""Python's cyclic garbage collector while a model loads and folds.

A loaded model is hundreds of thousands of long-lived objects (nodes, values, attributes, all
in reference cycles), and every full collection walks all of them again: 15-30% of a fold's
time on deep graphs. While a fold runs, :func:`long_lived` freezes what exists (collections no
longer walk it) and collects young objects less often; :func:`settled` freezes a model just
loaded. Both are undone when the outermost :func:`long_lived` ends. Objects without cycles
(arrays, the buffer pool's buffers) are still freed by reference counting the moment their
last reader lets go.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

# allocations between young collections (CPython's default: 700); an unusual number, so that
# "this threshold and a heap frozen" tells that a long_lived() is in effect (no module state)
YOUNG_THRESHOLD = 50_021


def _in_effect() -> bool:
    """Whether a :func:`long_lived` is in effect: its threshold, and a heap frozen (a caller
    would have to choose this very threshold and freeze objects of its own to be mistaken
    for it)."""
    return gc.get_threshold()[0] == YOUNG_THRESHOLD and gc.get_freeze_count() > 0


@contextlib.contextmanager
def long_lived(collect_after: bool = True) -> Iterator[None]:
    """Fewer, cheaper collections for the duration. An inner use does nothing, and so does any
    use while the caller has objects of its own frozen (they stay as they are) or automatic
    collection off. ``collect_after``: collect once at the end (what became garbage while
    frozen, a folded model's old nodes and weights, would otherwise be frozen again by the
    next call and never collected); a process about to exit need not."""
    old = gc.get_threshold()
    if old[0] == 0 or gc.get_freeze_count():  # nested (we froze), or the caller's own settings
        yield
        return
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()
        if collect_after and gc.isenabled():
            gc.collect()


def settled() -> None:
    """The objects that exist now (a model just loaded) live on: collections skip them while
    :func:`long_lived` is in effect."""
    if _in_effect():
        gc.freeze()
