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

YOUNG_THRESHOLD = 50_000  # allocations between young collections (CPython's default: 700)
_active: list[bool] = []  # one entry while the outermost long_lived() has frozen the heap


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    """Fewer, cheaper collections for the duration (re-entrant: an inner use does nothing;
    so does any use while the caller has objects of its own frozen, which stay as they are)."""
    old = gc.get_threshold()
    if _active or old[0] == 0 or gc.get_freeze_count():  # nested, or the caller's own settings
        yield
        return
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *old[1:])
    _active.append(True)
    try:
        yield
    finally:
        _active.clear()
        gc.set_threshold(*old)
        gc.unfreeze()
        # what became garbage while frozen (a folded model's old nodes and weights, and the
        # caller's garbage frozen with it) now sits in the oldest generation, which the next
        # call would freeze again: collected here, or repeated calls keep every model alive
        if gc.isenabled():
            gc.collect()


def settled() -> None:
    """The objects that exist now (a model just loaded) live on: collections skip them while
    :func:`long_lived` is in effect."""
    if _active:
        gc.freeze()
