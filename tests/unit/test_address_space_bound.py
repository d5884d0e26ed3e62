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


def test_a_worker_bounds_its_run_while_the_caller_holds_a_bound():
    """A check held a bound on the main thread while it waited for the worker running its
    cone, and the worker asked for a bound of its own for an unsized contrib op: it waited for
    the main thread's lock forever (transformers' fused BERT and Llama hung ``--check 1``). No
    lock is held across a bound's block: the worker's bound goes in, the tighter holds, and
    the process's limit comes back when both have ended, in either order."""
    import threading

    before = resource.getrlimit(resource.RLIMIT_AS)
    inside, release = threading.Event(), threading.Event()
    seen: list[int] = []

    def worker() -> None:
        with address_space.bounded(64 * MiB):
            seen.append(resource.getrlimit(resource.RLIMIT_AS)[0])
            inside.set()
            release.wait(30)

    with address_space.bounded(512 * MiB):
        outer = resource.getrlimit(resource.RLIMIT_AS)[0]
        thread = threading.Thread(target=worker, daemon=True)
        thread.start()
        assert inside.wait(30), "the worker's bound waited for the caller's"
        assert seen[0] < outer
    assert resource.getrlimit(resource.RLIMIT_AS)[0] == seen[0]  # the worker's still holds
    release.set()
    thread.join(30)
    assert not thread.is_alive()
    assert resource.getrlimit(resource.RLIMIT_AS) == before


def test_a_signal_while_a_worker_holds_the_bound_ends_the_wait_and_the_limit_comes_back():
    """Ctrl-C while the caller waits for a worker that holds a bound: the caller goes on with
    the interruption at once (the wait is bounded by ``interruptible.GRACE``), and once the
    worker ends nothing of either bound is left."""
    import signal
    import threading

    from onnxfold.host import interruptible

    before = resource.getrlimit(resource.RLIMIT_AS)
    inside, release = threading.Event(), threading.Event()

    def call(_options: object) -> None:
        with address_space.bounded(64 * MiB):
            inside.set()
            release.wait(30)

    def interrupt() -> None:
        inside.wait(30)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        interruptible.run(call, run_options=_Options(), around=lambda: address_space.bounded(
            256 * MiB))
    release.set()
    for thread in threading.enumerate():
        if thread.name == "onnxfold-inference":
            thread.join(30)
    assert resource.getrlimit(resource.RLIMIT_AS) == before


class _Options:
    """Stands for onnxruntime's ``RunOptions``: the run is Python, it reads nothing."""

    terminate = False
