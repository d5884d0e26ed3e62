"""A batch's jobs, one process each: started, watched, stopped, and how each ended.

Every model is a job run by its own ``python`` process (``onnxfold.app.job`` as a script, given
a :class:`~onnxfold.app.commands.JobOrder`: the model's job and the settings it runs with,
pickled), so one model's bad input, internal error or crash (a signal) ends that job only; the
others go on. Each job writes its output exactly as a one-model run does (checked outputs, a
temporary file beside, renamed when complete).

``--job-timeout SECONDS`` (no limit by default: a big model may fold for long) bounds each
job: a job still running after that long is killed with its whole process group (each job is
the leader of its own session, so the onnxruntime child processes of
``onnxfold.fold.fallback_child`` die with it), reported as "timed out" (exit code 3: the job
did not finish, as after a crash), and the other jobs go on. What a killed job leaves is
removed: its temporary files beside the output (named by its PID), its output's lock file once
no process holds it (the kernel released the ``flock`` at its death), and its private
temporary directory (each job runs with ``TMPDIR`` set to a directory of the batch's own, where
its spill and fallback files go). The output itself is published by one rename
(``onnxfold.io.publication``): a killed job leaves the old output or none, never a partial one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from onnxfold.app.commands import JobOrder, ModelJob, OptimizeCommand
from onnxfold.host import endings
from onnxfold.host.points import reached
from onnxfold.io.publication import lock_path
from onnxfold.io.tempfiles import remove_own, remove_unheld_lock, scratch_directory

EXIT_INTERNAL = 3

EXIT_CODES = frozenset({0, 1, 2, 3})  # a job's; anything else counts as an internal error


@dataclass
class Outcome:
    """How one job ended."""

    input: str
    output: str | None
    code: int
    status: str
    nodes_before: int | None = None
    nodes_after: int | None = None
    seconds: float = 0.0
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    ops: list[dict] = field(default_factory=list)  # the job's per-op table (report "ops")


def run_jobs(command: OptimizeCommand, jobs: list[ModelJob], workers: int,
             scratch: str | None = None, debug: bool = False) -> list[Outcome]:
    """Run ``jobs``, at most ``workers`` processes at once, each killed after
    ``--job-timeout`` seconds (when set); the outcomes in the jobs' order. ``scratch``: a
    directory for the jobs' orders, results and temporary directories (a new one by
    default), removed at the end; ``debug``: the jobs print tracebacks. Interrupted (Ctrl-C,
    or a signal ``onnxfold.host.endings`` raises), it passes the signal on to the running
    jobs, waits for them to clean up (then kills what is left) and removes what they left,
    before it raises again."""
    limit = command.batch.job_timeout
    scratch = scratch_directory("onnxfold-batch-") if scratch is None else scratch
    running: dict[int, tuple[subprocess.Popen, float]] = {}
    done: dict[int, Outcome] = {}
    pending = list(range(len(jobs)))
    try:
        while pending or running:
            while pending and len(running) < workers:
                index = pending.pop(0)
                with endings.deferred():  # a job started is a job recorded, to be stopped
                    running[index] = (_start(command, jobs[index], scratch, index, debug),
                                      time.monotonic())
            reached("batch-running")
            time.sleep(0.02)
            for index, (proc, started) in list(running.items()):
                elapsed = time.monotonic() - started
                if proc.poll() is None and limit is not None and elapsed > limit:
                    _stop(proc, signal.SIGKILL)
                    del running[index]
                    done[index] = _timed_out(jobs[index], proc, elapsed, limit, scratch, index)
                elif proc.returncode is not None:
                    del running[index]
                    done[index] = _outcome(jobs[index], proc, elapsed, scratch, index)
                    _remove_job_directory(scratch, index)
    except KeyboardInterrupt as interrupt:
        _stop_all(jobs, running, getattr(interrupt, "signum", signal.SIGINT))
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return [done[i] for i in sorted(done)]


JOB_GRACE = 10.0  # seconds a signalled job has to clean up before it is killed


def _stop_all(jobs: list[ModelJob], running: dict[int, tuple[subprocess.Popen, float]],
              signum: int) -> None:
    """Pass ``signum`` on to every running job (each leads its own session: the terminal's
    Ctrl-C reaches only the batch), wait for each to end (killed after ``JOB_GRACE``
    seconds), then remove what each left. Not interrupted itself: a second signal is noted
    by ``onnxfold.host.endings``, not raised, and a KeyboardInterrupt of a caller that did
    not install it is taken after the jobs are stopped."""
    with endings.deferred():
        for proc, _ in running.values():
            _signal_group(proc, signum)
        for index, (proc, _) in running.items():
            try:
                endings.uninterrupted(functools.partial(proc.wait, timeout=JOB_GRACE))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                endings.uninterrupted(proc.wait)
            _signal_group(proc, signal.SIGKILL)  # its fallback children, if any are left
            _remove_leftovers(jobs[index], proc.pid)


def _start(command: OptimizeCommand, job: ModelJob, scratch: str, index: int,
           debug: bool = False) -> subprocess.Popen:
    """Start the job's process: the leader of a new session (so that it can be killed with
    every process it starts), with its own temporary directory inside ``scratch``. Its order:
    the job, and the command's settings with its report written into ``scratch``, quiet."""
    settings = command.settings
    report = dataclasses.replace(settings.report, json=os.path.join(scratch, f"{index}.json"),
                                 quiet=True, explain=False, html=None)
    order = JobOrder(ModelJob.of(job.source, job.output),
                     dataclasses.replace(settings, report=report), debug)
    with open(os.path.join(scratch, f"{index}.order"), "wb") as f:
        pickle.dump(order, f)
    private = os.path.join(scratch, f"{index}.tmp")
    os.mkdir(private, 0o700)
    with open(os.path.join(scratch, f"{index}.err"), "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "onnxfold.app.job",
                                 os.path.join(scratch, f"{index}.order")],
                                stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                env={**os.environ, "TMPDIR": private}, start_new_session=True)


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    """Send ``signum`` to the job's process group (the job and the processes it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)

def _stop(proc: subprocess.Popen, signum: int) -> None:
    """Kill the job's process group and reap the job."""
    _signal_group(proc, signum)
    proc.wait()

def _remove_job_directory(scratch: str, index: int) -> None:
    shutil.rmtree(os.path.join(scratch, f"{index}.tmp"), ignore_errors=True)


def _timed_out(job: ModelJob, proc: subprocess.Popen, seconds: float, limit: float, scratch: str,
               index: int) -> Outcome:
    """The outcome of a job killed at ``--job-timeout``; what it left is removed."""
    _remove_leftovers(job, proc.pid)
    _remove_job_directory(scratch, index)
    outcome = _outcome(job, proc, seconds, scratch, index)
    outcome.code, outcome.status = EXIT_INTERNAL, "timed out"
    outcome.message = (f"onnxfold: error: {job.source}: still running after {limit:g} s "
                       "(--job-timeout): stopped; nothing was written")
    return outcome


_STATUS = {0: "ok", 1: "check failed", 2: "bad input", 3: "internal error"}


def _outcome(job: ModelJob, proc: subprocess.Popen, seconds: float, scratch: str,
             index: int) -> Outcome:
    code = proc.returncode
    lines: list[str] = []
    with contextlib.suppress(OSError), open(os.path.join(scratch, f"{index}.err"),
                                            errors="replace") as f:
        lines = [line.rstrip() for line in f if line.strip()]
    errors = [line for line in lines if line.startswith("onnxfold: ")]
    outcome = Outcome(job.source, job.output, code, _STATUS.get(code, "internal error"),
                      seconds=round(seconds, 2),
                      warnings=[line for line in lines if not line.startswith("onnxfold: ")])
    if code < 0:  # killed by a signal: a crash (in onnxruntime, say)
        _remove_temporaries(job, proc.pid)
        outcome.code, outcome.status = EXIT_INTERNAL, f"crashed (signal {-code})"
        outcome.message = (f"onnxfold: internal error: the process optimizing it was killed by "
                           f"signal {-code}; nothing was written")
    elif code not in EXIT_CODES:
        outcome.code = EXIT_INTERNAL
    if errors and not outcome.message:
        outcome.message = errors[-1]
    with contextlib.suppress(OSError, ValueError):
        with open(os.path.join(scratch, f"{index}.json")) as f:
            report = json.load(f)
        outcome.nodes_before, outcome.nodes_after = report["nodes_before"], report["nodes_after"]
        outcome.ops = report.get("ops", [])
    if code == 0 and outcome.nodes_after is None:  # should not happen: say so
        outcome.code, outcome.status = EXIT_INTERNAL, "internal error"
        outcome.message = "onnxfold: internal error: the job wrote no report"
    return outcome


def _remove_leftovers(job: ModelJob, pid: int) -> None:
    """What a job killed from here (process ``pid``) left beside its output: its temporary
    files, and the output's lock file once no process holds it (the kernel released the
    killed job's lock)."""
    _remove_temporaries(job, pid)
    if job.output is not None:
        remove_unheld_lock(lock_path(os.path.abspath(job.output)))


def _remove_temporaries(job: ModelJob, pid: int) -> None:
    """Delete the temporary files a dead job (process ``pid``) left beside its output."""
    if job.output is not None:
        remove_own(os.path.dirname(os.path.abspath(job.output)), pid)
