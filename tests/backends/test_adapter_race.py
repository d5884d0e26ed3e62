"""Switching adapters from several threads while others run the Session never gives one
adapter's output for another's.

A set is folded from an adapter's arrays and kept under that adapter's content key: when the
arrays and the key were read at different moments, a thread's ``set_adapter`` could land in
between, and one adapter's fold was kept under another's key (2 of 6 stress rounds returned
another adapter's output). Here 8 threads switch among six adapters (arrays and onnxruntime
adapter files) and run, while 4 threads run with an adapter's arrays fed in the call, through
a Session that keeps only three sets (so sets are evicted and folded again all the time), with
the interpreter switching threads every 10 us. Every output fed an adapter must be that
adapter's, bit for bit; an output after ``set_adapter`` must be one of the adapters'
(another thread may have switched since); and afterwards every adapter, fed or set, gives its
own output.
"""

from __future__ import annotations

import random
import sys
import threading

import numpy as np
import pytest

from onnxfold.runtime.session import Session
from tests.support import low_rank_models as lr
from tests.support.running import run_ort

SWITCHERS, RUNNERS = 8, 4
CALLS = 10_000  # runs in all, both kinds of thread
ADAPTERS = 6
FILES = 2  # the last two adapters are switched to by file


@pytest.fixture
def fast_thread_switches():
    """The interpreter hands the GIL over every 10 us (5 ms by default): races show."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


def _dynamic(case: lr.LowRank) -> dict[str, np.ndarray]:
    return {n: a for n, a in case.feeds.items() if n not in case.runtime}


class _Stress:
    """The threads of one stress round: what they ran, what came out wrong, what raised."""

    def __init__(self, session: Session, dynamic: dict[str, np.ndarray],
                 adapters: list[dict[str, np.ndarray]], sources: list,
                 want: list[np.ndarray]) -> None:
        self.session, self.dynamic = session, dynamic
        self.adapters, self.sources, self.want = adapters, sources, want
        self.lock = threading.Lock()
        self.calls = self.switches = 0
        self.wrong: list[str] = []
        self.errors: list[BaseException] = []
        self.start = threading.Barrier(SWITCHERS + RUNNERS)

    def record(self, ok: bool, what: str) -> bool:
        """Count one call (and whether it was wrong); whether to go on."""
        with self.lock:
            self.calls += 1
            if not ok:
                self.wrong.append(what)
            return self.calls < CALLS and not self.errors

    def switcher(self, rng: random.Random) -> None:
        go = True
        while go:
            k = rng.randrange(ADAPTERS)
            self.session.set_adapter(self.sources[k])
            with self.lock:
                self.switches += 1
            for _ in range(4):
                out = self.session.run(None, self.dynamic)[0]
                go = self.record(any(np.array_equal(out, w) for w in self.want),
                                 f"set {k}: no adapter's output")
                if not go:
                    break

    def runner(self, rng: random.Random) -> None:
        go = True
        while go:
            k = rng.randrange(ADAPTERS)
            out = self.session.run(None, {**self.dynamic, **self.adapters[k]})[0]
            go = self.record(np.array_equal(out, self.want[k]), f"fed {k}")

    def thread(self, target, seed: int) -> threading.Thread:
        def guarded() -> None:
            try:
                self.start.wait()
                target(random.Random(seed))
            except BaseException as e:  # surfaced by the test
                self.errors.append(e)
        return threading.Thread(target=guarded)

    def run(self) -> None:
        threads = [self.thread(self.switcher, s) for s in range(SWITCHERS)]
        threads += [self.thread(self.runner, 100 + s) for s in range(RUNNERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def test_switching_threads_never_get_another_adapters_output(tmp_path, fast_thread_switches):
    case = lr.scale_after()
    adapters = [lr.adapter(case, k) for k in range(ADAPTERS)]
    sources: list = list(adapters[:ADAPTERS - FILES])
    for k in range(ADAPTERS - FILES, ADAPTERS):
        path = tmp_path / f"a{k}.onnx_adapter"
        lr.write_adapter(adapters[k], path)
        sources.append(str(path))
    dynamic = _dynamic(case)
    reference = Session(case.model, case.runtime)  # one thread: each adapter's own output
    want = [reference.run(None, {**dynamic, **a})[0] for a in adapters]
    for k, a in enumerate(adapters):
        np.testing.assert_allclose(want[k], run_ort(case.model, {**dynamic, **a})[0],
                                   rtol=2e-5, atol=2e-5)
    assert all(not np.array_equal(want[0], w) for w in want[1:])

    session = Session(case.model, case.runtime, max_sets=3)
    stress = _Stress(session, dynamic, adapters, sources, want)
    stress.run()
    assert not stress.errors, stress.errors[0]
    assert stress.calls >= CALLS
    assert stress.wrong == [], f"{len(stress.wrong)} wrong outputs: {stress.wrong[:5]}"
    assert stress.switches >= 1000 and session.folds > ADAPTERS  # sets evicted, refolded
    for k, a in enumerate(adapters):  # nothing kept under another adapter's key
        np.testing.assert_array_equal(session.run(None, {**dynamic, **a})[0], want[k])
        session.set_adapter(sources[k])
        np.testing.assert_array_equal(session.run(None, dynamic)[0], want[k])
