"""``onnxfold optimize a.onnx b.onnx dir/ -o OUTDIR/ -j N``: many models, one process each.

Every model is a job run by its own ``python`` process (``onnxfold.app.job`` as a script, given
the parsed command line of a one-model ``optimize``), so one model's bad input, internal error
or crash (a signal) ends that job only; the others go on. Each job writes its output exactly
as a one-model run does (checked outputs, a temporary file beside, renamed when complete); a
job that dies leaves its temporary files removed. The table printed at the end gives, per
model, the node counts, the seconds and the status; the exit code is the worst status
(internal error 3 > bad input 2 > check failed 1 > ok 0).

``--job-timeout SECONDS`` (no limit by default: a big model may fold for long) bounds each
job: a job still running after that long is killed with its whole process group (each job is
the leader of its own session, so the onnxruntime child processes of
``onnxfold.fold.fallback_child``
die with it), reported as "timed out" (exit code 3: the job did not finish, as after a crash),
and the other jobs go on. What a killed job leaves is removed: its temporary files beside the
output (named by its PID), its output's lock file once no process holds it (the kernel released
the ``flock`` at its death), and its private temporary directory (each job runs with ``TMPDIR``
set to a directory of the batch's own, where its spill and fallback files go). The output itself
is published by one rename (``onnxfold.io.publication``): a killed job leaves the old output or
none, never a partial one.

Everything that can be known without reading a model is checked before the first job starts:
two inputs whose outputs would have the same name (``a/m.onnx`` and ``b/m.onnx``), an output
over an input, an output directory that is an input's directory.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

from onnxfold.errors import InputError, OutputError
from onnxfold.host import endings
from onnxfold.host.points import reached
from onnxfold.host.terminal import printable
from onnxfold.io import formats
from onnxfold.io.outputs import OutputGuard
from onnxfold.io.publication import lock_path
from onnxfold.io.reader import DATA_FILES_KEY, load_model
from onnxfold.io.tempfiles import remove_own, remove_unheld_lock, scratch_directory, write_text

EXIT_INTERNAL = 3
_ORDER = {0: 0, 1: 1, 2: 2, 3: 3}  # worst exit code wins; anything unexpected counts as 3


@dataclass
class Job:
    """One model: its input file and the output it is written to."""

    input: str
    output: str | None  # None: a dry run


@dataclass
class BatchPlan:
    """The jobs of a batch, and the one guard that claimed every output (and the summary)."""

    jobs: list[Job]
    guard: OutputGuard


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


def is_batch(inputs: list[str], output: str | None) -> bool:
    """Several inputs, a directory as input, or ``-o`` naming a directory (a trailing ``/`` or
    an existing directory): the batch form. One model file and a file ``-o`` (or none) is
    not."""
    return (len(inputs) > 1 or any(os.path.isdir(p) for p in inputs) or (output is not None
            and (output.endswith(("/", os.sep)) or os.path.isdir(output))))


def refuse_foreign_directories(inputs: list[str], recursive: bool) -> None:
    """A directory input with no .onnx file that is another framework's model (a TensorFlow
    SavedModel): say so (``onnxfold.io.formats``) rather than "no .onnx file"."""
    for path in inputs:
        if os.path.isdir(path) and not _models_in(path, recursive, skip=""):
            foreign = formats.describe(path)
            if foreign is not None:
                raise InputError(foreign.message(path))


def check_output_directory(outdir: str) -> None:
    """Several models are written into a directory: an ``-o`` that is an existing file, or a
    new name ending in ``.onnx``, is a mistake (it would become a directory of that name);
    ``out.onnx/`` (an explicit directory) is not."""
    if os.path.lexists(outdir) and not os.path.isdir(outdir):
        raise InputError(f"-o {outdir}: is a file, but several models (or a directory of them) "
                         "are written into a directory: give one, e.g. -o optimized/")
    if outdir.lower().endswith(".onnx") and not os.path.isdir(outdir):
        raise InputError(f"-o {outdir}: several models (or a directory of them) are written "
                         "into a directory, not one .onnx file: give a directory, e.g. "
                         "-o optimized/")


def plan(inputs: list[str], outdir: str | None, recursive: bool = False,
         external_data: bool = False, summary: str | None = None) -> BatchPlan:
    """The jobs for ``inputs`` (files, and directories: their ``*.onnx`` files, sorted; with
    ``recursive`` those of their subdirectories too, written to the same relative paths under
    ``outdir``; ``outdir`` None: a dry run, nothing written), and the guard that claimed their
    outputs and pinned the ``summary`` JSON. Raises before anything is written when two jobs
    would share an output, an output (or the summary) would replace an input or a file an
    input reads, or ``outdir`` is a directory an input is in."""
    outdir_real = os.path.realpath(outdir) if outdir is not None else ""
    found: list[tuple[str, str]] = []  # (input, output path relative to outdir)
    for path in inputs:
        if os.path.isdir(path):
            models = _models_in(path, recursive, skip=outdir_real)
            if not models:
                raise InputError(f"{path}: no .onnx file in this directory"
                                 + ("" if recursive else " (--recursive looks in subdirectories)"))
            found.extend(models)
        else:
            found.append((path, os.path.basename(path)))
    if not found:
        raise InputError("no input model")
    if outdir is None:
        jobs = [Job(source, None) for source, _ in found]
        return BatchPlan(jobs, _guard_summary(jobs, summary))
    by_output: dict[str, str] = {}
    for source, relative in found:
        first = by_output.get(relative)
        if first is not None:
            if os.path.realpath(first) == os.path.realpath(source):
                raise InputError(f"{source}: given twice")
            raise OutputError(f"{first} and {source} would both be written to "
                              f"{os.path.join(outdir, relative)}; nothing was written (rename "
                              "one, or optimize them into different directories)")
        by_output[relative] = source
    for source, _ in found:
        if os.path.realpath(os.path.dirname(os.path.abspath(source))) == outdir_real:
            raise OutputError(f"{outdir}: holds the input {source}; write the optimized models "
                              "to another directory (one model may be replaced in place with "
                              "`onnxfold optimize M -o M`)")
    # the output directory resolved once: a symlink on its way swapped later redirects no job
    jobs = [Job(source, os.path.join(outdir_real, relative)) for source, relative in found]
    outputs = [job.output for job in jobs if job.output is not None]
    guard = OutputGuard([path for job in jobs for path in _files_read(job.input)])
    with _directories(outdir, outputs):  # the guard wants each output's directory to exist
        for job, output in zip(jobs, outputs):
            guard.claim(output, f"output of {job.input}")
            if external_data:
                guard.claim(output + ".data", f"external data of {job.input}'s output")
        if summary is not None:  # resolved once, as every output
            guard.pin(summary, "JSON summary")
    return BatchPlan(jobs, guard)


def _guard_summary(jobs: list[Job], summary: str | None) -> OutputGuard:
    """A dry run's guard: the ``summary`` JSON, pinned, may replace no input."""
    guard = OutputGuard([job.input for job in jobs])
    if summary is not None:
        guard.pin(summary, "JSON summary")
    return guard


def _files_read(model: str) -> list[str]:
    """``model`` and the external-data files it reads (no job may write over any of them, the
    other jobs' included). A model that cannot be read fails in its own job."""
    try:
        return [model, *load_model(model, check=False).meta.get(DATA_FILES_KEY, ())]
    except (InputError, OutputError):
        return [model]


def _models_in(directory: str, recursive: bool, skip: str) -> list[tuple[str, str]]:
    """``(path, path relative to directory)`` of the .onnx files in ``directory``, sorted;
    ``skip`` (the output directory) is not entered."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if recursive
                         and os.path.realpath(os.path.join(root, d)) != skip)
        for name in sorted(files):
            path = os.path.join(root, name)
            if name.endswith(".onnx") and os.path.isfile(path):
                found.append((path, os.path.relpath(path, directory)))
    return found


@contextlib.contextmanager
def _directories(outdir: str, outputs: list[str]):
    """Create ``outdir`` and the subdirectories the ``outputs`` need for the block; the ones
    created are removed again if the block raises (they are empty then)."""
    made: list[str] = []
    try:
        for directory in sorted({os.path.dirname(os.path.abspath(o)) for o in outputs}
                                | {os.path.abspath(outdir)}):
            missing = []
            while not os.path.isdir(directory):
                missing.append(directory)
                directory = os.path.dirname(directory)
            for path in reversed(missing):
                try:
                    os.mkdir(path)
                except OSError as e:
                    raise OutputError(f"{path}: cannot create the output directory "
                                      f"({e.strerror})") from None
                made.append(path)
        yield
    except BaseException:
        for path in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(path)
        raise


def _missing_directory(outdir: str) -> str | None:
    """The outermost of ``outdir`` and its parents that does not exist yet (the batch will
    create it), or None."""
    missing = None
    directory = os.path.abspath(outdir)
    while not os.path.lexists(directory):
        missing, directory = directory, os.path.dirname(directory)
    return missing


def _remove_empty_directories(top: str) -> None:
    """Remove ``top`` and the directories under it that are empty, deepest first (a directory
    holding a file stays, with its parents)."""
    for directory, _, _ in os.walk(top, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def run(args: argparse.Namespace) -> int:
    """The batch form of ``optimize``: plan, run the jobs ``args.jobs`` at a time, print the
    table; the worst exit code."""
    if args.explain:
        raise InputError("--explain: give one model at a time")
    if getattr(args, "report", None):
        raise InputError("--report: give one model at a time")
    if args.jobs is not None and args.jobs < 1:
        raise InputError(f"-j {args.jobs}: must be at least 1")
    refuse_foreign_directories(args.input, args.recursive)  # named before -o is judged
    if args.output is not None:
        check_output_directory(args.output)
    # the jobs' scratch directory first: without a usable temporary directory nothing is
    # created, not even the output directory
    scratch = scratch_directory("onnxfold-batch-")
    created = None if args.output is None else _missing_directory(args.output)
    with contextlib.ExitStack() as closing:
        try:
            # the summary may replace no input, data file or output
            planned = plan(args.input, args.output, args.recursive,
                           args.external_data == "yes", summary=args.json)
            closing.callback(planned.guard.close)
            reached("batch-planned")
            outcomes = run_jobs(args, planned.jobs, args.jobs or 1, scratch)
        finally:
            with endings.deferred():
                shutil.rmtree(scratch, ignore_errors=True)
                if created is not None:  # no output written (every job failed, or stopped)
                    _remove_empty_directories(created)
        _report(args, planned.jobs, outcomes, planned.guard)
    return worst(o.code for o in outcomes)


def _report(args: argparse.Namespace, jobs: list[Job], outcomes: list[Outcome],
            guard: OutputGuard) -> None:
    """The table, each job's lines on stderr, and the ``--json`` summary (into the file the
    plan's ``guard`` pinned)."""
    failed = [o for o in outcomes if o.code != 0]
    if failed or not args.quiet:
        print(table(outcomes, jobs, args.output))
    for outcome in outcomes:
        lines = outcome.warnings if outcome.code == 0 else (
            [*outcome.warnings, outcome.message] if outcome.message else outcome.warnings)
        if outcome.code != 0 or not args.quiet:
            for line in lines:
                print(line_about(outcome.input, line), file=sys.stderr)
    summary = guard.pinned(args.json) if args.json else None
    if summary is not None:
        write_text(summary, json.dumps([asdict(o) for o in outcomes], indent=2) + "\n")


_KIND = re.compile(r"^onnxfold: ([a-z][a-z ]*): ")  # "onnxfold: error: ", "... internal error: "


def line_about(model: str, line: str) -> str:
    """A job's line on the batch's stderr, in the form a one-model run prints, with the model
    named first: ``onnxfold: error: MODEL: ...`` (``internal error``, ``check failed``,
    ``warning`` alike); a line of the job's that is not onnxfold's (a native library's) is
    ``onnxfold: warning: MODEL: ...``."""
    found = _KIND.match(line)
    if found is None:
        return f"onnxfold: warning: {model}: {line}"
    rest = line[found.end():]
    if rest.startswith(f"{model}: ") or rest == model:
        return line
    return f"{found.group(0)}{model}: {rest}"


def worst(codes) -> int:
    """The overall exit code: 3 > 2 > 1 > 0 (an unknown code counts as an internal error)."""
    result = 0
    for code in codes:
        code = code if code in _ORDER else EXIT_INTERNAL
        result = max(result, code)
    return result


def run_jobs(args: argparse.Namespace, jobs: list[Job], workers: int,
             scratch: str | None = None) -> list[Outcome]:
    """Run ``jobs``, at most ``workers`` processes at once, each killed after
    ``args.job_timeout`` seconds (when set); the outcomes in the jobs' order. ``scratch``: a
    directory for the jobs' command lines, results and temporary directories (a new one by
    default), removed at the end. Interrupted (Ctrl-C, or a signal ``onnxfold.host.endings``
    raises), it passes the signal on to the running jobs, waits for them to clean up (then
    kills what is left) and removes what they left, before it raises again."""
    limit: float | None = getattr(args, "job_timeout", None)
    scratch = scratch_directory("onnxfold-batch-") if scratch is None else scratch
    running: dict[int, tuple[subprocess.Popen, float]] = {}
    done: dict[int, Outcome] = {}
    pending = list(range(len(jobs)))
    try:
        while pending or running:
            while pending and len(running) < workers:
                index = pending.pop(0)
                with endings.deferred():  # a job started is a job recorded, to be stopped
                    running[index] = (_start(args, jobs[index], scratch, index),
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


def _stop_all(jobs: list[Job], running: dict[int, tuple[subprocess.Popen, float]],
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


def _start(args: argparse.Namespace, job: Job, scratch: str, index: int) -> subprocess.Popen:
    """Start the job's process: the leader of a new session (so that it can be killed with
    every process it starts), with its own temporary directory inside ``scratch``."""
    one = copy.copy(args)
    one.input, one.output = job.input, job.output
    one.json = os.path.join(scratch, f"{index}.json")
    one.quiet, one.explain, one.report = True, False, None
    one.replaces = ()
    one.job_timeout = None
    with open(os.path.join(scratch, f"{index}.args"), "wb") as f:
        pickle.dump(one, f)
    private = os.path.join(scratch, f"{index}.tmp")
    os.mkdir(private, 0o700)
    with open(os.path.join(scratch, f"{index}.err"), "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "onnxfold.app.job",
                                 os.path.join(scratch, f"{index}.args")],
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


def _timed_out(job: Job, proc: subprocess.Popen, seconds: float, limit: float, scratch: str,
               index: int) -> Outcome:
    """The outcome of a job killed at ``--job-timeout``; what it left is removed."""
    _remove_leftovers(job, proc.pid)
    _remove_job_directory(scratch, index)
    outcome = _outcome(job, proc, seconds, scratch, index)
    outcome.code, outcome.status = EXIT_INTERNAL, "timed out"
    outcome.message = (f"onnxfold: error: {job.input}: still running after {limit:g} s "
                       "(--job-timeout): stopped; nothing was written")
    return outcome


_STATUS = {0: "ok", 1: "check failed", 2: "bad input", 3: "internal error"}


def _outcome(job: Job, proc: subprocess.Popen, seconds: float, scratch: str,
             index: int) -> Outcome:
    code = proc.returncode
    lines: list[str] = []
    with contextlib.suppress(OSError), open(os.path.join(scratch, f"{index}.err"),
                                            errors="replace") as f:
        lines = [line.rstrip() for line in f if line.strip()]
    errors = [line for line in lines if line.startswith("onnxfold: ")]
    outcome = Outcome(job.input, job.output, code, _STATUS.get(code, "internal error"),
                      seconds=round(seconds, 2),
                      warnings=[line for line in lines if not line.startswith("onnxfold: ")])
    if code < 0:  # killed by a signal: a crash (in onnxruntime, say)
        _remove_temporaries(job, proc.pid)
        outcome.code, outcome.status = EXIT_INTERNAL, f"crashed (signal {-code})"
        outcome.message = (f"onnxfold: internal error: the process optimizing it was killed by "
                           f"signal {-code}; nothing was written")
    elif code not in _ORDER:
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


def _remove_leftovers(job: Job, pid: int) -> None:
    """What a job killed from here (process ``pid``) left beside its output: its temporary
    files, and the output's lock file once no process holds it (the kernel released the
    killed job's lock)."""
    _remove_temporaries(job, pid)
    if job.output is not None:
        remove_unheld_lock(lock_path(os.path.abspath(job.output)))


def _remove_temporaries(job: Job, pid: int) -> None:
    """Delete the temporary files a dead job (process ``pid``) left beside its output."""
    if job.output is not None:
        remove_own(os.path.dirname(os.path.abspath(job.output)), pid)


def table(outcomes: list[Outcome], jobs: list[Job], outdir: str | None = None) -> str:
    """The summary: one row per model, then the totals (``outdir``: the output directory as
    given, named in the totals' line)."""
    names = [printable(o.input) for o in outcomes]  # escaped before measuring widths
    width = max([len("model"), *map(len, names)])
    status_width = max([len("status"), *(len(o.status) for o in outcomes)])
    rows = [f"{'model':{width}}  nodes before  nodes after  seconds  {'status':{status_width}}  "
            "most changed ops"]
    for o, name in zip(outcomes, names):
        before = "-" if o.nodes_before is None else str(o.nodes_before)
        after = "-" if o.nodes_after is None else str(o.nodes_after)
        rows.append(f"{name:{width}}  {before:>12}  {after:>11}  {o.seconds:>7.2f}  "
                    f"{o.status:{status_width}}  {_changes(o.ops)}".rstrip())
    counts: dict[str, int] = {}
    for o in outcomes:
        key = "crashed" if o.status.startswith("crashed") else o.status
        counts[key] = counts.get(key, 0) + 1
    total = ", ".join(f"{n} {status}" for status, n in counts.items())
    if outdir is None and jobs and jobs[0].output is not None:
        outdir = os.path.dirname(jobs[0].output)
    rows.append(f"{len(outcomes)} of {len(jobs)} models: {total}"
                + ("; dry run: nothing written (-o OUT/ to write)" if outdir is None
                   else f"; outputs in {outdir}" if counts.get("ok") else ""))
    return "\n".join(rows)


CHANGED_OPS = 3  # ops a batch row names


def _changes(ops: list[dict]) -> str:
    """The ops that changed most in one model: ``Constant -90, Unsqueeze -46``."""
    changed = [row for row in ops if row.get("delta")][:CHANGED_OPS]
    return ", ".join(f"{row['op']} {row['delta']:+d}" for row in changed)

