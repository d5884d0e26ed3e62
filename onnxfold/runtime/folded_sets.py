"""The folded sets a Session keeps: up to ``max_sets`` entry sessions, each with the tensors
folded from one set of runtime-constant feeds (one adapter), keyed by the feeds' content,
least recently used out first, within a memory budget.

Switching to a kept set is a dictionary lookup: no fold, no compile, no session to build. What a
set costs in memory is counted (by the Session) as the bytes of its folded tensors, which
onnxruntime holds once (it loads them from a file of the set's and keeps its packed copies, or
the mapped pages: ``onnxfold.runtime.entry_session``; twice where they had to be handed over as
arrays, kept beside the packed copies), plus twice the entry model's own weights, which each
session loads and prepacks for itself. ``tests/backends/test_folded_sets.py`` measures the
process's resident memory against that count. The budget (``max_bytes``) defaults to a quarter
of the memory this process may use (the host's RAM or a tighter cgroup limit,
``onnxfold.host.memory_limits``); the set in use is never evicted, even alone above it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from onnxfold.host.memory_limits import available_memory
from onnxfold.runtime.entry_session import BoundEntry

DEFAULT_SETS = 4
FALLBACK_BUDGET = 4 << 30  # where the memory the process may use cannot be read


def default_budget() -> int:
    """A quarter of the memory this process may use (4 GiB where it cannot be read)."""
    memory = available_memory()
    return FALLBACK_BUDGET if memory is None else memory // 4


@dataclass
class FoldedSet:
    """One set: its content key, bound entry session, what it costs and how it was made, and
    the inputs its entry session takes (the merged split's, or the unmerged one's)."""

    key: str
    entry: BoundEntry
    nbytes: int
    fold_seconds: float  # the fold (0 when read from the disk cache)
    bind_seconds: float  # building the entry session
    from_disk: bool
    entry_inputs: frozenset[str] = frozenset()


class FoldedSets:
    """Folded sets by content key, most recently used last."""

    def __init__(self, max_sets: int = DEFAULT_SETS, max_bytes: int | None = None) -> None:
        self.max_sets = max_sets
        self.max_bytes = default_budget() if max_bytes is None else max_bytes
        self._sets: OrderedDict[str, FoldedSet] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sets)

    def __contains__(self, key: str) -> bool:
        return key in self._sets

    def keys(self) -> list[str]:
        """The kept sets' keys, least recently used first."""
        return list(self._sets)

    @property
    def nbytes(self) -> int:
        """What the kept sets cost together (as counted, see the module doc)."""
        return sum(s.nbytes for s in self._sets.values())

    def get(self, key: str) -> FoldedSet | None:
        """The set of ``key``, now the most recently used; None when not kept."""
        found = self._sets.get(key)
        if found is not None:
            self._sets.move_to_end(key)
        return found

    def room_for(self, nbytes: int) -> None:
        """Evict the least recently used sets until one more of ``nbytes`` fits (in count and
        bytes), before it is built, so the process never holds more than the budget."""
        while self._sets and (len(self._sets) >= self.max_sets or
                              self.nbytes + nbytes > self.max_bytes):
            self._sets.popitem(last=False)

    def add(self, folded: FoldedSet) -> None:
        """Keep ``folded`` as the most recently used set (``room_for`` made room for it)."""
        self._sets[folded.key] = folded
        self._sets.move_to_end(folded.key)

    def drop(self, key: str | None = None) -> None:
        """Forget the set of ``key``, or every set."""
        if key is None:
            self._sets.clear()
        else:
            self._sets.pop(key, None)
