"""The process's I/O threads (``onnxfold.io.threads``): bounded, shared, and never a wait on a
job no thread will start. Each test uses a pool of its own."""

import os
import threading

import pytest

from onnxfold.io import threads

BOUND = 60  # seconds: a bound for a loaded machine, never a timing claim


@pytest.fixture
def pool(monkeypatch):
    fresh = threads._Pool()
    monkeypatch.setattr(threads, "_POOL", fresh)
    return fresh


def _blocked(count):
    """``count`` jobs that hold their thread until released: (started events, release)."""
    release = threading.Event()
    started = [threading.Event() for _ in range(count)]

    def hold(event):
        event.set()
        assert release.wait(BOUND)
        return threading.current_thread().name

    return started, release, [threads.submit(hold, e) for e in started]


def _waited(job):
    """Who ran ``job`` (a thread returned by it), its wait bounded: "the waiter" when the
    thread that waited for it did."""
    ran: list[object] = []
    waiter = threading.Thread(target=lambda: ran.append(job.joined()), daemon=True)
    waiter.start()
    waiter.join(BOUND)
    assert ran, "the wait did not end: the job was left to a thread that never came"
    return "the waiter" if ran[0] is waiter else ran[0]


def test_jobs_share_at_most_the_bound_of_daemon_threads(pool):
    started, release, jobs = _blocked(threads.MAX_THREADS)
    assert all(e.wait(BOUND) for e in started)  # each on a thread of its own
    more = threads.submit(lambda: "queued")
    assert pool.threads() == threads.MAX_THREADS  # no thread beyond the bound
    assert not more.done()
    release.set()
    assert [j.joined() for j in jobs] == ["onnxfold-io"] * threads.MAX_THREADS
    assert more.joined() == "queued"
    workers = [t for t in threading.enumerate() if t.name == "onnxfold-io"]
    assert len(workers) >= threads.MAX_THREADS and all(t.daemon for t in workers)


def test_an_idle_thread_takes_the_next_job(pool):
    names = []
    for _ in range(20):  # one at a time: the thread is idle again by the next
        ran = threading.Event()
        job = threads.submit(lambda event: (names.append(threading.current_thread().name),
                                            event.set()), ran)
        assert ran.wait(BOUND)  # (a waiter would run a job no thread had started yet)
        job.joined()
    assert names == ["onnxfold-io"] * 20
    assert pool.threads() <= 2  # (a job may be queued as the thread goes idle)


def test_a_waiter_runs_its_job_when_every_thread_is_busy(pool):
    """A writer's second half queued behind a prefill and two hints is written by the
    writer: no wait on a job that no thread has started."""
    started, release, jobs = _blocked(threads.MAX_THREADS)
    assert all(e.wait(BOUND) for e in started)
    mine = threads.submit(threading.current_thread)
    assert _waited(mine) == "the waiter"
    assert not any(j.done() for j in jobs)  # the busy threads were not waited for
    release.set()
    for job in jobs:
        job.joined()


def _no_io_thread(monkeypatch):
    """Starting an I/O thread fails as it does at a thread limit (other threads start)."""
    start = threading.Thread.start

    def refused(self):
        if self.name == "onnxfold-io":
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", refused)


def test_no_thread_to_be_had_runs_the_job_in_its_waiter(pool, monkeypatch):
    _no_io_thread(monkeypatch)
    job = threads.submit(threading.current_thread)
    assert pool.threads() == 0
    assert _waited(job) == "the waiter"


def test_a_cancelled_job_never_runs(pool, monkeypatch):
    _no_io_thread(monkeypatch)
    ran: list[int] = []
    job = threads.submit(ran.append, 1)
    assert job.cancel() and job.done()
    assert job.exception() is None and ran == []
    monkeypatch.undo()  # a thread can start now: it finds the job and skips it
    threads._POOL = pool
    threads.submit(ran.append, 2).joined()
    assert ran == [2]


def test_a_started_job_is_not_cancelled_and_is_waited_for(pool):
    started, release, (job,) = _blocked(1)
    assert started[0].wait(BOUND)
    assert not job.cancel()
    release.set()
    assert job.joined() == "onnxfold-io"


def test_what_a_job_raises_is_raised_to_its_waiter(pool):
    def fails():
        raise OSError(28, "No space left on device")

    job = threads.submit(fails)
    with pytest.raises(OSError, match="No space"):
        job.joined()
    assert isinstance(job.exception(), OSError)


def test_a_job_lets_go_of_its_arguments_once_ended(pool):
    """A weight handed to a job is not kept alive by the job (the writer holds two at most)."""
    import weakref

    class Weight:
        pass

    weight = Weight()
    held = weakref.ref(weight)
    job = threads.submit(lambda w: None, weight)
    job.joined()
    del weight
    assert held() is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this system")
def test_a_forked_child_has_a_pool_of_its_own(pool):
    """The parent's threads do not exist in a child: its jobs run on threads of its own."""
    threads.submit(lambda: None).joined()  # the parent has a thread
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            name = threads.submit(lambda: threading.current_thread().name).joined()
            os.write(write, f"{name} {threads._POOL.threads()}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as reader:
        said = reader.read()
    os.waitpid(child, 0)
    assert said == "onnxfold-io 1"


def test_two_jobs_queued_at_once_do_not_both_count_on_one_idle_thread(pool):
    """The writer queues the next weight's read, then a half: with one thread idle, the second
    job starts a thread of its own (the bound allowing), so both run at once."""
    threads.submit(lambda: None).joined()
    for _ in range(BOUND * 100):  # until the thread is idle again (bounded)
        if pool._idle:
            break
        threading.Event().wait(0.01)
    assert pool._idle == 1 and pool.threads() == 1
    started, release, jobs = _blocked(2)
    try:
        assert all(e.wait(BOUND) for e in started)  # both began, neither waited for the other
    finally:
        release.set()
    assert [j.joined() for j in jobs] == ["onnxfold-io"] * 2 and pool.threads() == 2


def test_a_signal_in_a_job_its_waiter_runs_ends_the_wait_with_it(pool, monkeypatch):
    """A KeyboardInterrupt (the command line's signal) raised in a job its waiter runs is
    raised once to the waiter, never kept as an outcome the wait raises again and again."""
    _no_io_thread(monkeypatch)

    def interrupted():
        raise KeyboardInterrupt("SIGTERM")

    job = threads.submit(interrupted)
    raised: list[BaseException] = []

    def wait():
        try:
            job.joined()
        except KeyboardInterrupt as e:
            raised.append(e)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(BOUND)
    assert raised, "the wait raised nothing, or never ended"
    assert job.done() and isinstance(job.exception(), KeyboardInterrupt)


def test_a_signal_as_a_waiter_claims_its_job_still_ends_the_job(pool, monkeypatch):
    """A signal that lands once the waiter has claimed the job, before it runs: the job ends
    (with the interrupt), so no later wait waits for it forever."""
    _no_io_thread(monkeypatch)
    job = threads.submit(lambda: 42)
    claim = threads.Job._claim

    def claimed_then_interrupted(self):
        claim(self)
        raise KeyboardInterrupt("SIGINT")

    monkeypatch.setattr(threads.Job, "_claim", claimed_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        job.exception()
    assert job.done()
    monkeypatch.setattr(threads.Job, "_claim", claim)
    assert isinstance(_waited_error(job), KeyboardInterrupt)


def _waited_error(job):
    """``job.exception()`` with the wait bounded."""
    found: list[object] = []
    waiter = threading.Thread(target=lambda: found.append(job.exception()), daemon=True)
    waiter.start()
    waiter.join(BOUND)
    assert found, "the wait did not end"
    return found[0]


def test_a_signal_while_the_writer_reads_ahead_in_its_own_thread_ends_the_write(tmp_path):
    """SIGTERM lands while the writer reads the next weight itself (no I/O thread had taken
    it yet): the write ends with the interrupt, as the command line's handler raises it,
    instead of waiting for it forever."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import os, signal, threading
        import numpy as np
        from onnxfold.host import endings
        from onnxfold.io import segments, threads
        endings.install()
        segments._reads_mapping = lambda seg: True  # every segment read ahead
        unmapped, calls = segments.unmapped, [0]
        def read(seg, scratch=None):
            if threading.current_thread() is threading.main_thread():
                calls[0] += 1
                if calls[0] == 5:
                    os.kill(os.getpid(), signal.SIGTERM)
            return unmapped(seg, scratch)
        segments.unmapped = read
        start = threading.Thread.start
        def no_io_thread(self):
            if self.name == "onnxfold-io":
                raise RuntimeError("can't start new thread")
            start(self)
        threading.Thread.start = no_io_thread  # every read is the writer's own
        segs, at = [], 0
        for i in range(50):
            a = np.full((8, 512), i, np.float32)
            segs.append(segments.Segment(at, a))
            at += a.nbytes
        fd = os.open({str(tmp_path / "out")!r}, os.O_RDWR | os.O_CREAT)
        try:
            segments.write(fd, segs, direct=False)
            print("not interrupted")
        except KeyboardInterrupt as e:
            print("interrupted", type(e).__name__)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=BOUND)
    assert done.stdout.strip() == "interrupted Interrupted", (done.stdout, done.stderr)


def test_a_failed_half_does_not_start_the_other(tmp_path, monkeypatch, pool):
    """The writer's own half fails (a full disk): the other half, not started yet, is
    dropped, never written in its place before the error is raised."""
    import numpy as np

    from onnxfold.io import segments

    _no_io_thread(monkeypatch)
    written: list[int] = []

    def one(writes, seg, scratch, sources):
        written.append(seg.offset)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(segments, "_write_one", one)
    big = np.zeros(segments.PARALLEL_WRITE // 4 * 2, np.float32)
    fd = os.open(tmp_path / "out", os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="No space"):
            segments.write(fd, [segments.Segment(0, big)], direct=False)
    finally:
        os.close(fd)
    assert written == [0]  # the first half only


def test_a_hint_request_cut_by_a_signal_does_not_stop_later_hints(monkeypatch, pool):
    """A signal that lands as the read-ahead queues its job: the next request is still given
    (no flag left saying a job takes the requests when none does)."""
    from onnxfold.io import mapped

    given: list[int] = []
    everything = threading.Event()

    class Hinted:
        def __init__(self, n):
            self.n = n

        def prefetch(self):
            given.append(self.n)
            everything.set()

    hints = mapped._ReadAhead()
    submit = mapped.submit

    def interrupted(fn, *args):
        raise KeyboardInterrupt("SIGINT")

    monkeypatch.setattr(mapped, "submit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        hints.ask([Hinted(1)])
    monkeypatch.setattr(mapped, "submit", submit)
    hints.ask([Hinted(2)])
    assert everything.wait(BOUND) and given == [2]
