"""``onnxfold.host.address_space.bounded``: inside the block an allocation beyond the bound fails
(it does not reach the machine's memory); after it, the process's limit is what it was."""

from __future__ import annotations

import resource
import sys

import numpy as np
import pytest

from onnxfold.host import address_space

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/statm")

MiB = 1 << 20


def test_an_allocation_beyond_the_bound_fails_and_one_within_succeeds():
    before = resource.getrlimit(resource.RLIMIT_AS)
    with address_space.bounded(32 * MiB) as in_place:
        assert in_place
        small = np.empty(16 * MiB, np.uint8)  # np.empty maps, it does not touch the pages
        with pytest.raises(MemoryError):
            np.empty(32 * MiB + 2 * address_space.RUN_ALLOWANCE, np.uint8)
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    del small
    np.empty(32 * MiB + 2 * address_space.RUN_ALLOWANCE, np.uint8)  # the limit is gone


def test_a_tighter_limit_already_set_is_kept():
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    in_use = address_space.address_space_in_use()
    assert in_use is not None
    tight = in_use + 128 * MiB
    resource.setrlimit(resource.RLIMIT_AS, (tight, hard))
    try:
        with address_space.bounded(1 << 40):
            assert resource.getrlimit(resource.RLIMIT_AS)[0] == tight
        assert resource.getrlimit(resource.RLIMIT_AS)[0] == tight
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_a_bound_within_a_bound_keeps_the_tighter_and_does_not_wait_for_itself():
    """A check's cone runs bounded, and the fallback it calls bounds an unsized contrib op
    again on the same thread: that second bound waited for the first forever (ddddocr's
    recognizer hung its --check). Nested, the tighter holds, and each restores what it found."""
    import threading

    before = resource.getrlimit(resource.RLIMIT_AS)
    done = threading.Event()

    def nested() -> None:
        with address_space.bounded(256 * MiB):
            outer = resource.getrlimit(resource.RLIMIT_AS)[0]
            with address_space.bounded(64 * MiB):
                assert resource.getrlimit(resource.RLIMIT_AS)[0] < outer
            assert resource.getrlimit(resource.RLIMIT_AS)[0] == outer
            with address_space.bounded(1 << 40):
                assert resource.getrlimit(resource.RLIMIT_AS)[0] == outer
        done.set()

    thread = threading.Thread(target=nested, daemon=True)
    thread.start()
    thread.join(30)
    assert done.is_set(), "a nested bound waited for the outer one"
    assert resource.getrlimit(resource.RLIMIT_AS) == before
