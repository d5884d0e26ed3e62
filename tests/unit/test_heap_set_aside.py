"""``heap.apart`` and ``heap.set_aside``: within an apart block, a collection walks only what
the block made; what a step sets aside is not walked either until the block ends, and then
its garbage is collected; outside a block setting aside does nothing (nothing frozen for
good)."""

from __future__ import annotations

import gc
import weakref

from onnxfold.host import heap


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_what_is_set_aside_is_collected_once_the_block_ends():
    with heap.apart():
        held = _Node()
        gone = weakref.ref(held)
        heap.set_aside()
        del held
        gc.collect()
        assert gone() is not None  # set aside: not walked within the block
        assert gc.get_freeze_count() > 0
    gc.collect()
    assert gone() is None


def test_outside_a_block_nothing_is_set_aside():
    frozen = gc.get_freeze_count()
    heap.set_aside()
    assert gc.get_freeze_count() == frozen
    held = _Node()
    gone = weakref.ref(held)
    del held
    gc.collect()
    assert gone() is None


def test_an_exception_entering_the_block_leaves_nothing_set_aside(monkeypatch):
    """An exception landing between the freeze and the block (a KeyboardInterrupt) undoes
    both: no token is left to make set_aside freeze outside a block, nothing stays frozen."""
    frozen = gc.get_freeze_count()
    real_freeze = gc.freeze

    def interrupted() -> None:
        real_freeze()
        raise KeyboardInterrupt

    monkeypatch.setattr(heap.gc, "freeze", interrupted)
    try:
        with heap.apart():
            raise AssertionError("the block ran")
    except KeyboardInterrupt:
        pass
    monkeypatch.undo()
    assert not heap._apart and gc.get_freeze_count() == frozen
    heap.set_aside()
    assert gc.get_freeze_count() == frozen
