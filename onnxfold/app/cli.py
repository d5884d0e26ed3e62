"""The ``onnxfold`` command line: a thin layer over the Python API.

Exit codes: 0 ok; 1 a check or comparison failed; 2 bad input, one line ``onnxfold: error: ...``
on stderr; 3 an internal error (a bug), one line that says so (``--debug`` prints the
traceback). Nothing the user had is overwritten, and a failure leaves nothing half-written.

Each command imports its own machinery inside its function (the fold pipeline, comparison,
session, split, inspection, conformance, the HTML report): on purpose, so that ``--help``, a
usage error or a light command answers without loading onnxruntime sessions and every rule.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from onnxfold.app import batch
from onnxfold.app.parser import EXIT_USAGE, build_parser, fold_options
from onnxfold.errors import InputError, OnnxfoldError, one_line
from onnxfold.host import endings
from onnxfold.host.limits import describe_cause as describe_limit
from onnxfold.host.logs import as_warnings, quiet, quiet_onnxruntime_startup
from onnxfold.host.points import reached
from onnxfold.host.terminal import printable_streams
from onnxfold.io.faults import bus_error_exits
from onnxfold.io.publication import release_locks
from onnxfold.io.tempfiles import remove_own_files
from onnxfold.pipeline.collector import long_lived

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    import onnx_ir as ir

    from onnxfold.check.compare_options import CompareOptions
    from onnxfold.check.comparison import CompareResult
    from onnxfold.io.outputs import OutputGuard
    from onnxfold.io.pinned import PinnedOutput
    from onnxfold.io.prefill import OutputPrefill
    from onnxfold.pipeline.optimizer import OptimizeResult
    from onnxfold.pipeline.phases import Phases
    from onnxfold.pipeline.report import Report

EXIT_INTERNAL = 3


def cmd_optimize(args: argparse.Namespace) -> int:
    from onnxfold.io.outputs import OutputGuard

    if args.inputs and not args.check:
        raise InputError(f"--inputs {args.inputs}: feeds --check N; give --check too")
    if isinstance(args.input, list):  # from the command line (a batch job's is one string)
        if batch.is_batch(args.input, args.output):
            return batch.run(args)
        if args.job_timeout is not None:
            raise InputError("--job-timeout: applies to batches (several models, or -o DIR/)")
        args.input = args.input[0]
    args.replaces = _in_place(args.input, args.output) if args.output is not None else ()
    guard = OutputGuard([args.input], args.replaces)
    try:
        return _claimed_optimize(args, guard)
    finally:
        guard.close()


def _claimed_optimize(args: argparse.Namespace, guard: OutputGuard) -> int:
    """``optimize`` once its outputs are claimed and their directories pinned: each is
    written where it was resolved now, whatever moves later (``onnxfold.io.pinned``)."""
    guard.protect([args.inputs] if args.inputs else [])
    target = None
    if args.output is not None:
        target = guard.pin(args.output, "output model")
        if args.external_data == "yes":
            guard.claim(args.output + ".data", "output model's external data")
    if args.json:
        guard.pin(args.json, "JSON report")
    if args.report:
        guard.pin(args.report, "HTML report")
    with _start_prefill(args, target) as prefill:
        reached("claimed")
        return _optimize_and_save(args, guard, target, prefill)


def _in_place(source: str, output: str) -> tuple[str, ...]:
    """The files ``-o`` may replace: the input itself (and its ``.data`` beside it) when the
    output is the input; nothing otherwise."""
    try:
        same = os.path.samefile(source, output)
    except OSError:
        return ()
    return (source, output + ".data") if same else ()


def _start_prefill(args: argparse.Namespace, target: PinnedOutput | None
                   ) -> AbstractContextManager[OutputPrefill | None]:
    """Warm the output's temporary file while the model folds (``onnxfold.io.prefill``).

    The output is expected to be about as big as the input .onnx; ``--check`` writes elsewhere
    first, small models gain nothing, and a dry run (``target`` None) writes no model.
    """
    from onnxfold.io.prefill import AVAILABLE, OutputPrefill

    size = os.path.getsize(args.input) if os.path.isfile(args.input) else 0
    if target is None or args.check or args.no_prefill or size < _PREFILL_MIN or not AVAILABLE:
        return contextlib.nullcontext()
    return OutputPrefill(target, size)


_PREFILL_MIN = 16 << 20


def _optimize_and_save(args: argparse.Namespace, guard: OutputGuard,
                       target: PinnedOutput | None, prefill: OutputPrefill | None) -> int:

    checking = _compare_options(args) if args.check else None  # bad --dim fails before folding
    with long_lived(collect_after=getattr(args, "collect_after", True)):
        return _fold_and_save(args, guard, target, prefill, checking)


def _fold_and_save(args: argparse.Namespace, guard: OutputGuard, target: PinnedOutput | None,
                   prefill: OutputPrefill | None, checking: CompareOptions | None) -> int:
    from onnxfold.app.progress import TerminalProgress
    from onnxfold.io import load_model, save_model
    from onnxfold.pipeline.optimizer import optimize
    from onnxfold.pipeline.phases import Phases

    progress = None
    try:  # optimize loads the model itself: its first shape inference reuses what was read
        progress = TerminalProgress() if _on_terminal(sys.stderr) and not args.quiet else None
        phases = Phases(progress)
        result = optimize(args.input, fold_options(args), check=not args.skip_check,
                          progress=phases.fold_progress, phases=phases,
                          pristine=lambda: load_model(args.input, check=False),
                          loaded=functools.partial(_loaded, guard, checking is not None))
        reached("folded")
        result.report.input = args.input
        external = {"auto": None, "yes": True, "no": False}[args.external_data]
        check = info = None
        not_run = ""  # why the check could not run (the run keeps its products)
        if args.output is None:  # a dry run: a --check compares in memory
            if checking is not None:
                with phases.phase("check"), _could_not_run() as why:
                    check = _check_in_memory(result, args, checking, phases)
                not_run = why.reason
        elif checking is not None:
            from onnxfold.app.checked_save import save_checked

            with phases.phase("check"), _could_not_run() as why:
                assert target is not None  # args.output is not None
                info, check = save_checked(result.model, args.input, target, n=args.check,
                                           options=checking, guard=guard,
                                           external_data=external,
                                           saving=lambda done, total: phases.detail(
                                               "writing " + _mib_of(done, total)),
                                           checking=phases.detail)
            not_run = why.reason
        else:
            from onnxfold.app.verify import verifiable, verifier

            cheap, unverified = (False, None) if args.no_verify else verifiable(result.model)
            if unverified is not None:
                result.report.warnings.append(unverified)
            with phases.phase("save"):
                assert target is not None  # args.output is not None
                info = save_model(result.model, target, external_data=external,
                                  prefill=prefill, guard=guard,
                                  verify=verifier(args.input) if cheap else None,
                                  progress=lambda done, total: phases.detail(
                                      _mib_of(done, total)))
    finally:
        if progress is not None:
            progress.close()
    reached("published")
    report = result.report
    report.phases = phases.rounded()
    report.options.update({name: getattr(args, name) for name in _REPORTED_ARGS})
    if _check_failed(args, report, check, not_run, guard):
        return 1
    if info is not None:
        report.output = info.path
        report.external_data = info.data_path
        report.output_bytes = info.bytes_written
    latency = None
    if args.latency:
        with phases.phase("latency"):
            latency = _measure_latency(args, result, target, checking, phases)
        report.latency = latency.to_dict()
    if not args.quiet:  # the table and summary, then the check's verdict last
        print(report.summary(verbose=args.verbose))
        if latency is not None:
            print(latency.summary())
        if check is not None:
            print(check.summary())
        else:
            print(CHECK_HINT)
        if args.output is None:
            print(DRY_RUN_LINE)
    if args.explain:
        print(report.explain())
    _write_reports(args, report, guard)
    return 0


CHECK_HINT = ("check        not run: --check 3 runs the output beside the original in "
              "onnxruntime and re-derives every folded tensor (docs/check.md)")


def _measure_latency(args: argparse.Namespace, result: OptimizeResult,
                     target: PinnedOutput | None, checking: CompareOptions | None, phases: Phases):
    """``--latency N``: the original and the output (as written, read through its pinned
    directory, or in memory for a dry run) timed in onnxruntime (``onnxfold.check.latency``)."""
    from onnxfold.check.latency import measure_latency

    optimized = target.directory.path_of(target.name) if target is not None else \
        _in_memory(result, args)
    options = checking if checking is not None else _compare_options(args)
    latency = measure_latency(args.input, optimized, args.latency, threads=args.latency_threads,
                              dims=options.dims, int_ranges=options.int_ranges,
                              custom_op_libraries=options.custom_op_libraries,
                              progress=phases.detail)
    if target is not None:
        latency.model_b = target.given  # the output as named, not the descriptor's path
    return latency


def _in_memory(result: OptimizeResult, args: argparse.Namespace):
    """The folded model as a proto, for a dry run's check or latency (2 GiB at most)."""
    if result.report.initializer_bytes_after > IN_MEMORY_CHECK_LIMIT:
        raise InputError(f"{args.input}: without -o the folded model is compared in memory, "
                         "and it is over protobuf's 2 GiB limit; give -o OUT to write it")
    return result.to_proto()


def _check_failed(args: argparse.Namespace, report: Report, check: CompareResult | None,
                  not_run: str, guard: OutputGuard) -> bool:
    """Record the check in the report; on failure print the table and the verdict, write
    ``--json`` and ``--report`` (the model is not written) and say so. Raises InputError
    (exit 2) after that when the check could not run."""
    from onnxfold.check.comparison import check_dict

    if not_run:
        report.check = {"ok": False, "state": "could not run", "reason": not_run}
    elif check is not None:
        report.check = check_dict(check)
    if report.check is None or report.check["ok"]:
        return False
    if not args.quiet:
        print(report.summary())
    if check is not None:
        print(check.summary())
    _write_reports(args, report, guard)
    where = f"nothing was written to {args.output}" if args.output is not None else \
        "dry run: nothing written"
    if not_run:
        raise InputError(f"the check could not run ({where}): {not_run}")
    assert check is not None
    print(f"onnxfold: check failed: {', '.join(check.failing)} outside tolerance; {where}",
          file=sys.stderr)
    return True


class _Reason:
    reason = ""


@contextlib.contextmanager
def _could_not_run() -> Iterator[_Reason]:
    """Catch a check whose reference does not run on the feeds, keeping why."""
    from onnxfold.check.comparison import CheckCouldNotRun

    why = _Reason()
    try:
        yield why
    except CheckCouldNotRun as e:
        why.reason = one_line(e)


def _loaded(guard: OutputGuard, checking: bool, model: ir.Model) -> None:
    """Once the input is read: refuse an output that would replace one of its files; with
    ``--check``, have the fold keep its recipes (rewrite-made tensors are verified too)."""
    from onnxfold.io.writer import input_files

    reached("loaded")
    guard.protect(input_files(model))
    if checking:
        from onnxfold.fold.recipes import keep_recipes

        keep_recipes(model)


DRY_RUN_LINE = "dry run: nothing written (-o OUT to write)"
IN_MEMORY_CHECK_LIMIT = 1_800_000_000  # bytes of weights a dry run's check holds as one proto


def _check_in_memory(result: OptimizeResult, args: argparse.Namespace, checking: CompareOptions,
                     phases: Phases) -> CompareResult:
    """A dry run's ``--check``: the folded model, as a proto in memory, against the input."""
    from onnxfold.check.comparison import compare_models
    from onnxfold.fold.recipes import RECIPES_KEY

    check = compare_models(args.input, _in_memory(result, args), args.check, checking,
                           progress=phases.detail, recipes=result.model.meta.get(RECIPES_KEY))
    check.model_b = "(folded, not written)"
    return check


def _write_reports(args: argparse.Namespace, report: Report, guard: OutputGuard) -> None:
    """``--json`` and ``--report``, when given (into the files ``guard`` pinned)."""
    if args.json or args.report:
        reached("reports")
    if args.json:
        _write_text(args.json, report.to_json() + "\n", guard)
    if args.report:
        from onnxfold.app.report_html import render_html

        _write_text(args.report, render_html(report), guard)


def _mib_of(done: int, total: int) -> str:
    """``120.0/480.0 MiB``: the save phase's detail."""
    return f"{done / 2**20:.1f}/{total / 2**20:.1f} MiB"


# command-line settings the JSON report's ``options`` records besides the fold options
_REPORTED_ARGS = ("check", "inputs", "seed", "rtol", "atol", "dim", "int_range", "external_data",
                  "skip_check", "no_verify", "ort_level", "no_fold_verification", "latency",
                  "latency_threads")


def _compare_options(args: argparse.Namespace) -> CompareOptions:
    from onnxfold.check.compare_options import CompareOptions
    from onnxfold.check.feeds import parse_dims, parse_int_ranges
    from onnxfold.runtime.custom_ops import checked_libraries

    return CompareOptions(
        inputs=args.inputs, dims=parse_dims(args.dim),
        int_ranges=parse_int_ranges(args.int_range), seed=args.seed, rtol=args.rtol,
        atol=args.atol, custom_op_libraries=checked_libraries(args.custom_op_library),
        level=args.ort_level, verify=False if args.no_fold_verification else None)


def cmd_compare(args: argparse.Namespace) -> int:
    from onnxfold.check.comparison import compare_models

    guard = None
    if args.json:
        guard = _guard_inputs([args.a, args.b])
        guard.protect([args.inputs] if args.inputs else [])
        guard.pin(args.json, "JSON report")
    result = compare_models(args.a, args.b, args.n, _compare_options(args))
    print(result.summary())
    if args.json:
        _write_text(args.json, json.dumps(result.to_dict(), indent=2) + "\n", guard)
    if not result.ok:
        print(f"onnxfold: outside tolerance: {', '.join(result.failing)}", file=sys.stderr)
        return 1
    return 0


def cmd_verify_folds(args: argparse.Namespace) -> int:
    from onnxfold.check.fold_verification import verify_folds

    guard = None
    if args.json:
        guard = _guard_inputs([args.a, args.b])
        guard.pin(args.json, "JSON report")
    result = verify_folds(args.a, args.b)
    print(result.summary())
    if args.json:
        _write_text(args.json, json.dumps(result.to_dict(), indent=2) + "\n", guard)
    if not result.ok:
        print(f"onnxfold: folds differ from the original: {', '.join(result.failing)}",
              file=sys.stderr)
        return 1
    return 0


def _guard_inputs(models: Sequence[str]) -> OutputGuard:
    """A guard protecting ``models`` and every file their weights are read from."""
    from onnxfold.io import load_model
    from onnxfold.io.outputs import OutputGuard
    from onnxfold.io.writer import input_files

    guard = OutputGuard(models)
    for path in models:
        guard.protect(input_files(load_model(path, check=False)))
    return guard


def _write_text(path: str, text: str, guard: OutputGuard | None) -> None:
    """Write a report to ``path``: into the file ``guard`` pinned for it when it was claimed."""
    from onnxfold.io.tempfiles import write_text

    pinned = guard.pinned(path) if guard is not None else None
    if pinned is None:
        raise RuntimeError(f"{path}: written before it was claimed")
    write_text(pinned, text)


def cmd_inspect(args: argparse.Namespace) -> int:
    from onnxfold.app.inspection import inspect_model

    info = inspect_model(args.input, check=not args.skip_check)
    print(json.dumps(info, indent=2) if args.json else info["text"])
    return 0


def cmd_rules(args: argparse.Namespace) -> int:
    if args.coverage:
        return _coverage(args)
    from onnxfold.declare.catalogue import load_catalogue

    catalogue = load_catalogue()
    print("folders (evaluate one op on constants):")
    for rule in sorted(catalogue.folders, key=lambda r: r.name):
        until = rule.until if rule.until is not None else ""
        print(f"  {rule.name:28} {rule.domain or 'ai.onnx'}::{rule.op_type} "
              f"opset {rule.since}-{until}  {_where(rule.source)}")
    print("patterns (rewrites that enable folding):")
    for pattern in catalogue.patterns:
        print(f"  {pattern.name:28} on {','.join(pattern.op_types)}  {_where(pattern.source)}")
    print("cleanups (whole-model passes):")
    for cleanup in catalogue.cleanups:
        print(f"  {cleanup.name:28} {_where(cleanup.source)}")
    print("shape steps (what an op does to shape values and dims, followed symbolically):")
    steps: dict[tuple[str, str], list[str]] = {}
    for kind, rules in (("values", catalogue.shape_value_rules),
                        ("dims", catalogue.shape_dims_rules)):
        for step in rules:
            steps.setdefault((f"{kind} {step.fn.__name__}", step.source), []).append(step.op_type)
    for (name, source), ops in steps.items():
        print(f"  {name:32} on {','.join(ops)}  {_where(source)}")
    return 0


def _where(source: str) -> str:
    path, line = source.rsplit(":", 1)
    return f"{os.path.basename(path)}:{line}"


def _coverage(args: argparse.Namespace) -> int:
    from onnxfold.app.conformance import run_all, summarize, write_report

    summary = summarize(run_all(args.jobs))
    totals = summary["totals"]
    print(f"ONNX node test cases: {summary['cases']}")
    for key in ("folded_native", "folded_fallback", "declined", "gap", "wrong"):
        print(f"  {key:16} {totals.get(key, 0)}")
    print(f"  onnxruntime can run {summary['ort_runnable']}, of which onnxfold folds "
          f"{summary['ort_runnable_folded']}")
    for reason, n in sorted(summary["declined_by_reason"].items(), key=lambda kv: -kv[1]):
        print(f"  declined: {reason}: {n}")
    if args.json:
        write_report(args.json, summary)
    return 1 if totals.get("wrong") or totals.get("gap") else 0


def cmd_split(args: argparse.Namespace) -> int:
    from onnxfold.io import load_model
    from onnxfold.runtime.split import optimize_and_split, write_split

    model = load_model(args.input, check=not args.skip_check)
    parts = optimize_and_split(model, args.runtime_const, fold_options(args),
                               "separate" if args.no_compile_time_fold else "fold")
    for path in write_split(parts, args.output):
        print(f"wrote {path}")
    fold = parts.manifest["runtime_fold"]
    print(f"runtime_fold: {len(parts.runtime_fold.graph)} nodes, "
          f"{len(fold['inputs'])} inputs -> {len(fold['outputs'])} folded tensors for entry")
    print(parts.low_rank.summary())
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    from onnxfold.io.feeds import load_arrays
    from onnxfold.io.tempfiles import write_atomic
    from onnxfold.runtime.session import Session

    output = None
    if args.output:
        guard = _guard_inputs([args.model])
        guard.protect([args.inputs, *args.adapter])
        output = guard.pin(args.output, "outputs")
    if args.repeat < 1:
        raise InputError(f"--repeat {args.repeat}: must be at least 1")
    feeds = load_arrays(args.inputs)
    options = _run_session_options(args.threads)
    session = Session(args.model, args.runtime_const, backend=args.backend,
                      cache_dir=args.cache_dir, options=fold_options(args),
                      custom_op_libraries=args.custom_op_library, sess_options=options,
                      adapter=args.adapter[0] if args.adapter else None)
    reached("session")
    constants = set(session.runtime_constants) if args.adapter else set()
    missing = [i.name for i in session.get_inputs()
               if i.name not in feeds and i.name not in constants]
    if missing:
        raise InputError(f"{args.inputs}: no array for input(s) {', '.join(missing)}")
    times = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        outputs = session.run(None, feeds)
        times.append(time.perf_counter() - started)
        reached("ran")
    names = [o.name for o in session.get_outputs()]
    for name, arr in zip(names, outputs):
        print(f"{name}: {arr.dtype} {list(arr.shape)}")
    print(f"backend {args.backend}: first call {times[0] * 1e3:.1f} ms "
          f"(fold {session.fold_seconds * 1e3:.1f} ms)" + (
              f", then median {np.median(times[1:]) * 1e3:.2f} ms over {len(times) - 1} runs"
              if len(times) > 1 else ""))
    print(session.parts.low_rank.summary())
    if args.compare:
        from onnxfold.app.runtime_compare import compare

        print(compare(args.model, session.runtime_constants, feeds, args.backend,
                      max(args.repeat, 5), args.adapter, options, fold_options(args)).render())
    if output is not None:
        arrays = dict(zip(names, outputs))
        write_atomic(output, lambda f: np.savez(f, **arrays))
    return 0


def _run_session_options(threads: int | None):
    """onnxruntime's SessionOptions for ``run``: ``--threads`` intra-op threads, or None."""
    if threads is None:
        return None
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return options


def _on_terminal(stream) -> bool:
    """Whether ``stream`` is a terminal (False where it is closed: ``2>&-`` leaves None)."""
    return stream is not None and not stream.closed and stream.isatty()


COMMANDS = {"optimize": cmd_optimize, "compare": cmd_compare, "verify-folds": cmd_verify_folds,
            "split": cmd_split, "run": cmd_run, "inspect": cmd_inspect, "rules": cmd_rules}


def _output_directories(args: argparse.Namespace) -> list[str]:
    """Where a command writes (its temporary files go beside each output)."""
    found = []
    for name in ("output", "json", "report"):
        path = getattr(args, name, None)
        if isinstance(path, str):
            found.append(os.path.dirname(os.path.abspath(path)))
            if name == "output" and args.command == "split":
                found.append(os.path.abspath(path))
    return found


def main(argv: Sequence[str] | None = None, exiting: bool = False) -> int:
    """Run a command line; ``exiting``: the process ends right after (no garbage collection
    at the end of a fold, see ``collector.long_lived``)."""
    # OpenBLAS worker threads otherwise spin for ~0.1 s after numpy is imported, on the core
    # the prefill and the writer's copies use; matrix products still run multi-threaded.
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    parser = build_parser()
    with printable_streams():  # argparse's errors quote what was typed
        args = parser.parse_args(argv)
    args.collect_after = not exiting
    reached("parsed")
    return run_parsed(args)


def run_parsed(args: argparse.Namespace) -> int:
    """Run a parsed command line; its exit code (errors printed as one line on stderr).
    Everything printed shows control characters escaped (``onnxfold.host.terminal``): model and
    file names are not the terminal's to interpret."""
    with printable_streams():
        return _run_parsed(args)


def _run_parsed(args: argparse.Namespace) -> int:
    # (no parser default for --debug: one would be the subcommands' too, the action being
    # shared through ``parents``, and undo a --debug given before the subcommand)
    debug = getattr(args, "debug", False) or os.environ.get("ONNXFOLD_DEBUG", "") not in ("", "0")
    if not debug:  # stderr is onnxfold's: one line per error (docs/errors.md)
        quiet_onnxruntime_startup()
    try:
        # onnx-ir's warnings (a string attribute that is not UTF-8, kept byte for byte; device
        # configurations it does not write) are shown, except under -q: nothing on success
        silent = getattr(args, "quiet", False) and not debug
        with bus_error_exits(_output_directories(args), EXIT_USAGE), \
                quiet("onnx_ir") if silent else as_warnings("onnx_ir", "onnx-ir"):
            code = COMMANDS[args.command](args)
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


def _one_line_error(e: BaseException, debug: bool) -> int:
    """Print the one line ``e`` ends the run with; its exit code (``e`` raised again if it
    is no error: SystemExit)."""
    if isinstance(e, OnnxfoldError):
        if debug:
            traceback.print_exc()
        print(f"onnxfold: error: {one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(e, BrokenPipeError):  # output piped into e.g. `head`
        sys.stderr.close()
        return 0
    if isinstance(e, MemoryError):
        print(f"onnxfold: error: {describe_limit(e)}; nothing was written", file=sys.stderr)
        return EXIT_USAGE
    if not isinstance(e, Exception):
        raise e
    if debug:  # a bug: one line, the traceback on request
        traceback.print_exc()
    limit = describe_limit(e)
    if limit is not None:  # a resource limit of the machine, not a bug
        print(f"onnxfold: error: {limit}; nothing was written", file=sys.stderr)
        return EXIT_USAGE
    print(f"onnxfold: internal error: {type(e).__name__}: {one_line(e)} (this is a bug; "
          "nothing was written; --debug or ONNXFOLD_DEBUG=1 shows the traceback)",
          file=sys.stderr)
    return EXIT_INTERNAL


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
