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
    waiter = threading.Thread(target=lambda: ran.append(job.result()), daemon=True)
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
    assert [j.result() for j in jobs] == ["onnxfold-io"] * threads.MAX_THREADS
    assert more.result() == "queued"
    workers = [t for t in threading.enumerate() if t.name == "onnxfold-io"]
    assert len(workers) >= threads.MAX_THREADS and all(t.daemon for t in workers)


def test_an_idle_thread_takes_the_next_job(pool):
    names = []
    for _ in range(20):  # one at a time: the thread is idle again by the next
        ran = threading.Event()
        job = threads.submit(lambda event: (names.append(threading.current_thread().name),
                                            event.set()), ran)
        assert ran.wait(BOUND)  # (a waiter would run a job no thread had started yet)
        job.result()
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
        job.result()


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
    threads.submit(ran.append, 2).result()
    assert ran == [2]


def test_a_started_job_is_not_cancelled_and_is_waited_for(pool):
    started, release, (job,) = _blocked(1)
    assert started[0].wait(BOUND)
    assert not job.cancel()
    release.set()
    assert job.result() == "onnxfold-io"


def test_what_a_job_raises_is_raised_to_its_waiter(pool):
    def fails():
        raise OSError(28, "No space left on device")

    job = threads.submit(fails)
    with pytest.raises(OSError, match="No space"):
        job.result()
    assert isinstance(job.exception(), OSError)


def test_a_job_lets_go_of_its_arguments_once_ended(pool):
    """A weight handed to a job is not kept alive by the job (the writer holds two at most)."""
    import weakref

    class Weight:
        pass

    weight = Weight()
    held = weakref.ref(weight)
    job = threads.submit(lambda w: None, weight)
    job.result()
    del weight
    assert held() is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this system")
def test_a_forked_child_has_a_pool_of_its_own(pool):
    """The parent's threads do not exist in a child: its jobs run on threads of its own."""
    threads.submit(lambda: None).result()  # the parent has a thread
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            name = threads.submit(lambda: threading.current_thread().name).result()
            os.write(write, f"{name} {threads.threads_started()}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as reader:
        said = reader.read()
    os.waitpid(child, 0)
    assert said == "onnxfold-io 1"
