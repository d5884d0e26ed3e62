"""The ``onnxfold`` command line: a thin layer over the Python API.

Exit codes: 0 ok; 1 a check or comparison failed; 2 bad input, one line ``onnxfold: error: ...``
on stderr; 3 an internal error (a bug), one line that says so (``--debug`` prints the
traceback). Nothing the user had is overwritten, and a failure leaves nothing half-written.

The command line is parsed once into typed values (``onnxfold.app.parser``,
``onnxfold.app.commands``), and the command's module runs them: ``optimize_command.py`` (a
batch: ``batch.py``), ``compare_commands.py``, ``runtime_commands.py``, ``info_commands.py``.
This module turns how a run ends into an exit code and one line: errors, signals, a bus error
on an input truncated while it is read. Each command's module is imported when it runs, and
imports its own machinery inside its functions: on purpose, so that ``--help``, a usage error
or a light command answers without loading onnxruntime sessions and every rule.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from onnxfold.app.commands import (
    CommandLine,
    CompareCommand,
    InspectCommand,
    JobOrder,
    OptimizeCommand,
    RulesCommand,
    RunCommand,
    SplitAdapterCommand,
    SplitCommand,
    VerifyFoldsCommand,
    inference_limit,
    written_directories,
)
from onnxfold.app.parser import EXIT_USAGE, parse
from onnxfold.errors import OnnxfoldError, one_line
from onnxfold.host import endings, interruptible
from onnxfold.host.limits import describe_cause as describe_limit
from onnxfold.host.limits import shortage
from onnxfold.host.logs import as_warnings, quiet, quiet_onnxruntime_startup
from onnxfold.host.points import reached
from onnxfold.host.terminal import printable, printable_streams
from onnxfold.io.faults import bus_error_exits
from onnxfold.io.publication import release_locks
from onnxfold.io.tempfiles import published, remove_own_files

__all__ = ["EXIT_INTERNAL", "EXIT_USAGE", "entry_point", "interrupted", "main", "run",
           "run_job"]

EXIT_INTERNAL = 3


def main(argv: Sequence[str] | None = None, exiting: bool = False) -> int:
    """Run a command line; ``exiting``: the process ends right after (no garbage collection
    at the end of a fold, see ``collector.long_lived``)."""
    # OpenBLAS worker threads otherwise spin for ~0.1 s after numpy is imported, on the core
    # the prefill and the writer's copies use; matrix products still run multi-threaded.
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    with printable_streams():  # argparse's errors quote what was typed
        line = parse(argv)
    reached("parsed")
    return run(line, exiting)


def run(line: CommandLine, exiting: bool = False) -> int:
    """Run a parsed command line; its exit code (errors printed as one line on stderr)."""
    command = line.command
    silent = isinstance(command, OptimizeCommand) and command.settings.report.quiet

    def action() -> int:
        with interruptible.inference_time_limit(inference_limit(command)):
            return _dispatch(line, exiting)

    return run_guarded(action, line.debug, silent, written_directories(command))


def run_job(order: JobOrder) -> int:
    """One model of a batch, in its job's process (``onnxfold.app.job``): the one-model
    ``optimize`` of ``order``, ending as a one-model run does; its exit code."""
    from onnxfold.app.optimize_command import optimize_model

    job, settings = order.job, order.settings
    written = OptimizeCommand((job.source,), job.output, settings)

    def action() -> int:
        with interruptible.inference_time_limit(inference_limit(written)):
            return optimize_model(job, settings, collect_after=False)

    return run_guarded(action, order.debug, settings.report.quiet, written_directories(written))


def _dispatch(line: CommandLine, exiting: bool) -> int:
    """Run the command with the module that runs it."""
    command = line.command
    if isinstance(command, OptimizeCommand):
        from onnxfold.app import optimize_command

        return optimize_command.run(command, line.debug, exiting)
    if isinstance(command, CompareCommand | VerifyFoldsCommand):
        from onnxfold.app import compare_commands

        return compare_commands.compare(command) if isinstance(command, CompareCommand) else \
            compare_commands.verify_folds(command)
    if isinstance(command, SplitCommand | RunCommand):
        from onnxfold.app import runtime_commands

        return runtime_commands.split(command) if isinstance(command, SplitCommand) else \
            runtime_commands.run(command)
    if isinstance(command, SplitAdapterCommand):
        from onnxfold.app import adapter_commands

        return adapter_commands.split_adapter(command)
    if isinstance(command, InspectCommand | RulesCommand):
        from onnxfold.app import info_commands

        return info_commands.inspect(command) if isinstance(command, InspectCommand) else \
            info_commands.rules(command)
    raise TypeError(f"no command runs a {type(command).__name__}")


def run_guarded(action: Callable[[], int], debug: bool, silent: bool,
                directories: list[str]) -> int:
    """Run ``action``; its exit code, or the one line and exit code of how it ended (an error,
    a signal, a bus error on an input truncated while read). ``silent``: ``-q``, nothing on
    success; ``directories``: where the command writes (what it left there is removed).
    Everything printed shows control characters escaped (``onnxfold.host.terminal``): model and
    file names are not the terminal's to interpret."""
    with printable_streams():
        return _run_guarded(action, debug, silent, directories)


def _run_guarded(action: Callable[[], int], debug: bool, silent: bool,
                 directories: list[str]) -> int:
    debug = debug or os.environ.get("ONNXFOLD_DEBUG", "") not in ("", "0")
    if not debug:  # stderr is onnxfold's: one line per error (docs/errors.md)
        quiet_onnxruntime_startup()
    try:
        # onnx-ir's warnings (a string attribute that is not UTF-8, kept byte for byte; device
        # configurations it does not write) are shown, except under -q: nothing on success
        with bus_error_exits(directories, EXIT_USAGE), warnings.catch_warnings(), \
                quiet("onnx_ir") if silent and not debug else as_warnings("onnx_ir", "onnx-ir"):
            warnings.showwarning = _one_line_warning
            # numpy's floating-point notes (a NaN cast, a division by zero) are the model's
            # values meeting arithmetic, as onnxruntime meets them: no warning of onnxfold's
            warnings.filterwarnings("ignore", NUMPY_FLOATING_NOTE, RuntimeWarning)
            code = action()
        endings.check()  # a signal some library swallowed, or one noted while unwinding
        return code
    except KeyboardInterrupt as e:
        return interrupted(e)
    except BaseException as e:
        if endings.received() is not None:  # an error met while a signal ended the run
            return interrupted(None)
        code = _one_line_error(e, debug)
        if code:
            _remove_own_files()
        return code


NUMPY_FLOATING_NOTE = r"(invalid value|divide by zero|overflow|underflow) encountered in "


def _one_line_warning(message: Warning | str, *_where: Any, **_more: Any) -> None:
    """A Python warning (an untrusted cache directory, a cache entry not used) as the one
    line ``onnxfold: warning: ...``, not Python's two lines naming onnxfold's source."""
    text = one_line(message if isinstance(message, Warning) else Warning(message))
    print(f"onnxfold: warning: {text.removeprefix('onnxfold: ')}", file=sys.stderr)


def _one_line_error(e: BaseException, debug: bool) -> int:
    """Print the one line ``e`` ends the run with; its exit code (``e`` raised again if it
    is no error: SystemExit)."""
    if isinstance(e, OnnxfoldError):
        if debug:
            traceback.print_exc()
        hint = "; --inference-timeout SECONDS sets the limit" if \
            isinstance(e, interruptible.InferenceTimeout) else ""
        print(f"onnxfold: error: {one_line(e)}{hint}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(e, BrokenPipeError):  # output piped into e.g. `head`
        sys.stderr.close()
        return 0
    if isinstance(e, MemoryError):
        print(f"onnxfold: error: {describe_limit(e)}; {_what_was_written()}", file=sys.stderr)
        return EXIT_USAGE
    if not isinstance(e, Exception):
        raise e
    if debug:  # a bug: one line, the traceback on request
        traceback.print_exc()
    limit = _shortage(e)
    if limit is not None:  # a resource limit of the machine, not a bug
        print(f"onnxfold: error: {limit}; {_what_was_written()}", file=sys.stderr)
        return EXIT_USAGE
    print(f"onnxfold: internal error: {type(e).__name__}: {one_line(e)} (this is a bug; "
          f"{_what_was_written()}; --debug or ONNXFOLD_DEBUG=1 shows the traceback)",
          file=sys.stderr)
    return EXIT_INTERNAL


def _what_was_written() -> str:
    """What an error's line says of the outputs: none written, or those published before it
    (an error while the report is made comes after the output is written, whole)."""
    done = published()
    return "nothing was written" if not done else \
        f"{', '.join(map(printable, done))} was written before it"


def _shortage(e: Exception) -> str | None:
    """What the machine ran short of, where ``e`` says it did, wherever it arose: the check's
    runner's ``MachineShort`` (its message names what ran: it could not run), a resource limit
    in ``e``'s chain, or onnxruntime's own words for one (``host.limits.shortage``). None
    where ``e`` says nothing of the machine: a bug."""
    runner = sys.modules.get("onnxfold.check.running.runner")  # none raised if not loaded
    if runner is not None and isinstance(e, runner.MachineShort):
        return f"could not run: {one_line(e)}"
    return shortage(e)


def _remove_own_files() -> None:
    """Remove what this run made and still has (temporary files, scratch, output locks):
    the end of a run that did not finish (``onnxfold.io.tempfiles``)."""
    remove_own_files()
    release_locks()


def interrupted(interrupt: KeyboardInterrupt | None) -> int:
    """End a run a signal stopped (``onnxfold.host.endings``): what it made removed, one line
    ``onnxfold: interrupted``; ``128 + N``."""
    _remove_own_files()
    endings.announce()
    return endings.exit_code(interrupt if interrupt is not None else
                             endings.Interrupted(endings.received() or signal.SIGINT))


def _reserve_standard_descriptors() -> None:
    """Open ``/dev/null`` on descriptors 0-2 where the process started with them closed
    (``2>&-``): else the first file onnxfold opens would get descriptor 2, and what anything
    writes to "stderr" (onnxruntime's native log among them) would land in that file."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            if getattr(sys, name) is None:
                setattr(sys, name, open(fd, "r" if fd == 0 else "w", closefd=False))  # noqa: SIM115 - it becomes the stream


def entry_point() -> None:
    """The ``onnxfold`` executable: ``main``, then exit without tearing the interpreter down.

    Freeing every graph object and module at exit takes ~50 ms on a BERT-size model and helps
    no one: by then every output is closed and renamed. SIGINT, SIGTERM and SIGHUP end the run
    in one line (``onnxfold.host.endings``; ``onnxfold.__main__`` took them over already).
    """
    endings.install()
    _reserve_standard_descriptors()
    try:
        code = main(exiting=True)
    except KeyboardInterrupt as e:  # while the command line was read
        code = interrupted(e)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: started with that descriptor closed (2>&-)
                stream.flush()
        except (OSError, ValueError):  # closed, or a pipe whose reader is gone
            pass
    os._exit(code)


if __name__ == "__main__":
    entry_point()
