"""``onnxfold optimize a.onnx b.onnx dir/ -o OUTDIR/ -j N``: many models, one process each.

The batch plans its jobs before any starts (``batch_plan.py``: which models, into which
outputs, all claimed by one guard), runs them ``-j`` at a time, each in its own process
(``batch_jobs.py``), and prints the table: per model, the node counts, the seconds and the
status; the exit code is the worst status (internal error 3 > bad input 2 > check failed 1 >
ok 0). Each model's stderr line is a one-model run's line with the model named first.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
from dataclasses import asdict

from onnxfold.app.batch_jobs import EXIT_CODES, EXIT_INTERNAL, Outcome, run_jobs
from onnxfold.app.batch_plan import (
    BatchPlan,
    check_output_directory,
    missing_directory,
    plan,
    refuse_foreign_directories,
    remove_empty_directories,
)
from onnxfold.app.commands import ModelJob, OptimizeCommand
from onnxfold.app.shards import manifest
from onnxfold.errors import InputError
from onnxfold.host import endings
from onnxfold.host.points import reached
from onnxfold.host.terminal import printable
from onnxfold.io.tempfiles import scratch_directory, write_text


def run(command: OptimizeCommand, debug: bool = False) -> int:
    """The batch form of ``optimize``: plan, run the jobs ``-j`` at a time (``debug``: they
    print tracebacks), print the table; the worst exit code."""
    report, batch, output = command.settings.report, command.batch, command.output
    if report.explain:
        raise InputError("--explain: give one model at a time")
    if report.html:
        raise InputError("--report: give one model at a time")
    if batch.jobs is not None and batch.jobs < 1:
        raise InputError(f"-j {batch.jobs}: must be at least 1")
    sources = list(command.sources)
    refuse_foreign_directories(sources, batch.recursive)  # named before -o is judged
    if output is not None:
        check_output_directory(output)
    # the jobs' scratch directory first: without a usable temporary directory nothing is
    # created, not even the output directory
    scratch = scratch_directory("onnxfold-batch-")
    created = None if output is None else missing_directory(output)
    with contextlib.ExitStack() as closing:
        try:
            # the summary may replace no input, data file or output
            planned = plan(sources, output, batch.recursive,
                           command.settings.save.external_data == "yes", summary=report.json,
                           shard=batch.shard)
            closing.callback(planned.guard.close)
            reached("batch-planned")
            outcomes = run_jobs(command, planned.jobs, batch.jobs or 1, scratch, debug) \
                if planned.jobs else []
        finally:
            with endings.deferred():
                shutil.rmtree(scratch, ignore_errors=True)
                if created is not None:  # no output written (every job failed, or stopped)
                    remove_empty_directories(created)
        _report(command, planned, outcomes)
    return worst(o.code for o in outcomes)


def _report(command: OptimizeCommand, planned: BatchPlan, outcomes: list[Outcome]) -> None:
    """The table, each job's lines on stderr, and the ``--json`` summary (into the file the
    plan's guard pinned): the outcomes, or with ``--shard`` the shard's manifest."""
    quiet, summary_path = command.settings.report.quiet, command.settings.report.json
    jobs, guard, shard = planned.jobs, planned.guard, command.batch.shard
    failed = [o for o in outcomes if o.code != 0]
    if shard is not None and not quiet:
        print(f"shard {shard}: {len(jobs)} of the batch's {len(planned.keys)} models")
    if jobs and (failed or not quiet):
        print(table(outcomes, jobs, command.output))
    for outcome in outcomes:
        lines = outcome.warnings if outcome.code == 0 else (
            [*outcome.warnings, outcome.message] if outcome.message else outcome.warnings)
        if outcome.code != 0 or not quiet:
            for line in lines:
                print(line_about(outcome.input, line), file=sys.stderr)
    summary = guard.pinned(summary_path) if summary_path else None
    if summary is not None:
        rows = [asdict(o) for o in outcomes]
        data = rows if shard is None else manifest(shard, planned.keys, planned.taken, rows)
        write_text(summary, json.dumps(data, indent=2) + "\n")


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
        code = code if code in EXIT_CODES else EXIT_INTERNAL
        result = max(result, code)
    return result


def table(outcomes: list[Outcome], jobs: list[ModelJob], outdir: str | None = None) -> str:
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
