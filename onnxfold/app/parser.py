"""The ``onnxfold`` command line's parser: every subcommand and flag, with its help, and the
parsed line as typed values (``onnxfold.app.commands``).

The command line is parsed once, here (:func:`parse`): the argparse namespace is read by
:func:`command_line` and goes no further. The fold flags are built from ``FoldOptions``' field
metadata (``onnxfold.pipeline.options``: name, help, how the text is parsed), so they are
written once, there; :func:`fold_options` reads them back. An argparse error (unknown flag,
bad choice, bad value) is one line ``onnxfold: error: ...`` and exit 2, like every other bad
input.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any, NoReturn

from onnxfold._version import __version__
from onnxfold.app.commands import (
    BatchRequest,
    CheckRequest,
    Command,
    CommandLine,
    CompareCommand,
    ComparisonFlags,
    InspectCommand,
    OptimizeCommand,
    OptimizeSettings,
    ReportRequest,
    RulesCommand,
    RunCommand,
    SaveRequest,
    SplitAdapterCommand,
    SplitCommand,
    VerifyFoldsCommand,
)
from onnxfold.app.peer_flags import add_peer_flags, names
from onnxfold.app.shards import Shard
from onnxfold.check.running.levels import DEFAULT_LEVEL, LEVELS
from onnxfold.errors import InputError, one_line
from onnxfold.host.interruptible import DEFAULT_LIMIT
from onnxfold.host.machine import checked_threads
from onnxfold.latency import MAX_RUNS
from onnxfold.numbers import NumberError, parse_float, parse_int
from onnxfold.pipeline.options import FoldOptions, flag_of

EXIT_USAGE = 2


def argument(parse: Callable[..., object], **bounds: float | None) -> Callable[[str], object]:
    """``parse`` (one of ``onnxfold.numbers``' parsers) as an argparse ``type=``: the parser
    names the flag in its error line."""

    def convert(text: str) -> object:
        try:
            return parse(text, **bounds)
        except NumberError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = parse.__name__.removeprefix("parse_")
    return convert


class _OneLineParser(argparse.ArgumentParser):
    """argparse with its errors (unknown flag, bad choice, bad value) as one line
    ``onnxfold: error: ...`` and exit 2, like every other bad input (no usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"onnxfold: error: {one_line(ValueError(message))} "
                              f"(see {self.prog} --help)\n")


COUNT = argument(parse_int, minimum=0)  # a number of things, 0 allowed
POSITIVE = argument(parse_int, minimum=1)
NON_NEGATIVE_FLOAT = argument(parse_float, minimum=0.0)
JOB_SECONDS = argument(parse_float, minimum=1.0)  # below that, Python has not even started
INFERENCE_SECONDS = argument(parse_float, minimum=0.001)


def path(text: str) -> str:
    """A file or directory named on the command line: an empty one names nothing (``--json
    ''`` was taken as no ``--json`` at all, and nothing was written)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names no file")
    return text


def threads(text: str) -> int:
    """onnxruntime's intra-op threads: from 1 to the cores this process may run on (a thread
    per core asked for is started: 100,000 grew past 16 GB and crashed)."""
    try:
        return checked_threads(parse_int(text, minimum=1), "threads")
    except (NumberError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_inference_timeout(p: Flags, what: str) -> None:
    """``--inference-timeout``: how long one onnxruntime inference of ``what`` may take."""
    p.add_argument("--inference-timeout", type=INFERENCE_SECONDS, default=DEFAULT_LIMIT,
                   metavar="SECONDS",
                   help=f"stop an onnxruntime inference of {what} running longer than this "
                        f"(one line, exit 2; default {DEFAULT_LIMIT:g})")


def _shard(text: str) -> Shard:
    """``--shard K/N`` as an argparse ``type=``: its error names the flag, one line."""
    try:
        return Shard.parse(text)
    except InputError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix(f"--shard {text}: ")) from None


Flags = argparse._ActionsContainer  # a parser or one of its --help groups


def add_fold_flags(parser: Flags, group: Callable[[str], Flags] | None = None) -> None:
    """A flag for every ``FoldOptions`` field (``dest`` is the field's name); nothing else, so
    that a command given these flags honours each one (``--skip-check`` is each command's
    own: ``run`` has none, its Session loading the model checked). ``group``: the ``--help``
    group of each field's flag (None: all on ``parser``)."""
    for f in fields(FoldOptions):
        flag = flag_of(f)
        parser = group(f.name) if group is not None else parser
        if flag.switch:
            parser.add_argument(*names(flag.name), dest=f.name, action="store_const",
                                const=not f.default, default=f.default, help=flag.help)
        elif flag.choices:
            parser.add_argument(*names(flag.name), dest=f.name, nargs="?", const=flag.choices[0],
                                choices=flag.choices, default=f.default,
                                metavar=flag.metavar, help=flag.help)
        elif flag.repeat:
            parser.add_argument(*names(flag.name), dest=f.name, action="append", default=[],
                                metavar=flag.metavar, help=flag.help)
        else:
            parse: Callable[[str], Any] = str
            if flag.parse is not None:
                parse = argument(flag.parse) if flag.minimum is None else \
                    argument(flag.parse, minimum=flag.minimum)
            parser.add_argument(*names(flag.name), dest=f.name, type=parse, default=f.default,
                                metavar=flag.metavar or "X", help=flag.help)
        if flag.none_flag is not None:
            parser.add_argument(flag.none_flag[0], dest=f.name, action="store_const",
                                const=None, help=flag.none_flag[1])


def add_skip_check(parser: Flags) -> None:
    """``--skip-check``: onnx's checker not run on the input (``check_input``)."""
    parser.add_argument("--skip-check", action="store_true",
                        help="do not run the ONNX checker on the input")


def fold_options(args: argparse.Namespace) -> FoldOptions:
    """The ``FoldOptions`` the parsed command line asks for (a repeated flag's list is stored
    as the field's own collection by ``FoldOptions``)."""
    return FoldOptions(**{f.name: getattr(args, f.name) for f in fields(FoldOptions)})


def add_compare_flags(p: Flags) -> None:
    """The flags of how two models are compared in onnxruntime (``compare``, ``--check``)."""
    p.add_argument("--inputs", type=path, metavar="FILE.npz",
                   help="an .npz of input arrays, used in every input set (the rest random); "
                        "string inputs as <U or S arrays")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE",
                   help="bind a symbolic input dimension; repeatable (unbound ones follow the "
                        "relations the graph states, else are guessed: see docs/check.md)")
    p.add_argument("--int-range", action="append", default=[], metavar="NAME=LO:HI",
                   help="random values in [LO, HI) for this integer input; repeatable")
    p.add_argument("--seed", type=COUNT, default=0, help="seed of the first random input set")
    p.add_argument(*names("--custom-op-library"), type=path, action="append", default=[],
                   metavar="PATH",
                   help="a shared library of custom ops for onnxruntime to load when it runs "
                        "the models; repeatable")
    p.add_argument(*names("--rtol"), type=NON_NEGATIVE_FLOAT, default=None,
                   help="relative tolerance for every float output (default: by dtype, "
                        "float32 1e-4, float16/bfloat16 2 ulp + 1 ulp of the output's max)")
    p.add_argument(*names("--atol"), type=NON_NEGATIVE_FLOAT, default=None,
                   help="absolute tolerance for every float output (default: by dtype, "
                        "float32 1e-5)")
    p.add_argument("--ort-level", choices=LEVELS, default=DEFAULT_LEVEL,
                   help="onnxruntime's graph optimization level for both models (default "
                        f"{DEFAULT_LEVEL}: onnxruntime's own default, how a model is deployed)")
    p.add_argument("--no-fold-verification", action="store_true",
                   help="do not re-derive every folded tensor from the original (done by "
                        "default when the second model was written by onnxfold)")
    add_inference_timeout(p, "the comparison (and of --latency)")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand (``args.command`` names the one given)."""
    common = _OneLineParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="print the traceback of an error (also ONNXFOLD_DEBUG=1)")
    parser = _OneLineParser(
        prog="onnxfold", description="ONNX constant folding.", parents=[common],
        epilog="exit codes: 0 ok, 1 a check or comparison failed, 2 bad input, 3 internal error")
    parser.add_argument("--version", action="version", version=f"onnxfold {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, **kwargs) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kwargs)

    p = add("optimize", help="fold constants and write the optimized model (the default "
            "command: onnxfold IN OUT)",
            usage="%(prog)s IN [OUT] [-o OUT] [--check N] [--input-shape NAME:D0,D1,..] "
                  "[--report FILE.html] [options]")
    p.add_argument("input", nargs="+",
                   help="the .onnx model; several models or directories (their .onnx files) "
                        "are optimized one process each into the directory -o names")
    _optimize_flags(p)

    p = add("compare", help="run two models in onnxruntime and compare their outputs")
    p.add_argument("a", help="the reference model")
    p.add_argument("b", help="the model to check (e.g. the folded one)")
    p.add_argument("-n", type=POSITIVE, default=1, help="number of input sets (seeds S..S+N-1)")
    p.add_argument("--json", type=path, metavar="FILE", help="also write the comparison as JSON")
    p.add_argument("--report", type=path, metavar="FILE.html",
                   help="also write it as a self-contained HTML page (optimize --report's "
                        "check section)")
    add_compare_flags(p)

    p = add("verify-folds", help="re-derive every folded tensor of an onnxfold output from "
            "the original in onnxruntime, at every binding of its dynamic dims")
    p.add_argument("a", help="the original model")
    p.add_argument("b", help="the model onnxfold wrote from it")
    p.add_argument("--json", type=path, metavar="FILE",
                   help="also write the verdict per tensor as JSON")
    p.add_argument("--report", type=path, metavar="FILE.html",
                   help="also write it as a self-contained HTML page (optimize --report's "
                        "fold verification)")
    add_compare_flags(p)

    p = add("split", help="split around runtime constants into runtime_fold + entry")
    p.add_argument("input")
    p.add_argument("--runtime-const", nargs="+", required=True, metavar="NAME",
                   help="graph inputs constant at run time (names or patterns like 'w*')")
    p.add_argument("-o", "--output", type=path, required=True, metavar="DIR",
                   help="output directory")
    p.add_argument("--no-compile-time-fold", action="store_true",
                   help="write compile-time constants as a compiletime_fold model instead")
    add_fold_flags(p)
    add_skip_check(p)

    p = add("split-adapter", help="lift a model's LoRA weights to inputs of a base model and "
            "write them to an onnxruntime adapter file (onnxfold.Session(BASE, adapter=FILE))")
    p.add_argument("input", help="the model exported with its LoRA adapter in it")
    p.add_argument("-o", "--output", required=True, metavar="BASE.onnx",
                   help="the base model: the LoRA weights become its inputs")
    p.add_argument("--adapter", required=True, metavar="FILE.onnx_adapter",
                   help="the adapter file: the LoRA weights, by their input names")
    add_skip_check(p)

    p = add("run", help="run a model with runtime constants folded once")
    p.add_argument("model")
    p.add_argument("--runtime-const", nargs="*", default=[], metavar="NAME")
    p.add_argument("--inputs", type=path, required=True, metavar="FILE.npz",
                   help="every input's array")
    p.add_argument("--backend", default="ort", choices=["ort", "numpy", "mlir", "onnx-mlir"])
    p.add_argument("--repeat", type=POSITIVE, default=1, help="run this many times, report timing")
    p.add_argument("--cache-dir", type=path, help="keep folded tensors here for later processes")
    p.add_argument("--adapter", type=path, action="append", default=[],
                   metavar="FILE.onnx_adapter",
                   help="an onnxruntime adapter file whose tensors are the runtime constants "
                        "(the first is run; with several, --compare times switching among "
                        "them); repeatable")
    p.add_argument("--compare", action="store_true",
                   help="also time onnxruntime with the runtime constants as inputs, as "
                        "initializers and (with --adapter) its multi-LoRA, interleaved with "
                        "the Session, and print the comparison")
    p.add_argument("--threads", type=threads, default=None, metavar="N",
                   help="onnxruntime's intra-op threads, at most the cores this process may "
                        "run on (default: onnxruntime's)")
    p.add_argument("-o", "--output", type=path, metavar="FILE.npz", help="write the outputs")
    p.add_argument("--custom-op-library", type=path, action="append", default=[],
                   metavar="PATH",
                   help="a shared library of custom ops for onnxruntime to load; repeatable")
    add_inference_timeout(p, "the fold or a call")
    add_fold_flags(p)

    p = add("inspect", help="opsets, counts and what is still foldable")
    p.add_argument("input")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_skip_check(p)

    p = add("rules", help="list the rules, or measure coverage on the ONNX node tests")
    p.add_argument("--coverage", action="store_true",
                   help="fold every case of the ONNX node test suite and report the outcome")
    p.add_argument("--json", type=path, metavar="FILE",
                   help="with --coverage: write the full report")
    p.add_argument("--jobs", type=POSITIVE, default=None, help="with --coverage: processes to use")
    # named in "the following arguments are required" when no command is given
    sub.metavar = "{" + ",".join(sub.choices) + "}"
    return parser


def _optimize_flags(p: argparse.ArgumentParser) -> None:
    """``optimize``'s flags, in ``--help`` groups: the common ones first."""
    common = p.add_argument_group("common")
    common.add_argument("-o", "--output", type=path, default=None,
                        help="where to write the optimized model (a directory, ending in /, "
                             "for several); without -o, a dry run: fold, print the report, "
                             "write no model")
    common.add_argument("--check", type=COUNT, default=0, metavar="N",
                        help="compare with the input in onnxruntime on N input sets and write "
                             "nothing (exit 1) if an output is outside tolerance")
    check = p.add_argument_group("the check (--check N)")
    fold = p.add_argument_group("what is folded")
    sizes = p.add_argument_group("size bounds of a fold")
    limits = p.add_argument_group("memory and time")
    output = p.add_argument_group("the output and the run")
    groups = {**dict.fromkeys(("input_shapes", "target_opset", "strip_metadata"), common),
              **dict.fromkeys(("expansion_factor", "expansion_min_bytes", "max_tensor_bytes",
                               "growth_factor", "growth_min_bytes", "max_growth_bytes"), sizes),
              **dict.fromkeys(("memory_limit", "pool_budget", "fold_timeout"), limits),
              "strict": output}
    add_fold_flags(p, lambda name: groups.get(name, fold))
    common.add_argument("--report", type=path, metavar="FILE.html",
                        help="also write a self-contained HTML report (charts, what folded, "
                             "what stayed and why)")
    common.add_argument("--json", type=path, metavar="FILE",
                        help="also write the report as JSON (docs/report-json.md)")
    common.add_argument("--latency", type=argument(parse_int, minimum=0, maximum=MAX_RUNS),
                        default=0, metavar="N",
                        help="time session creation and inference of the original and the "
                             "output in onnxruntime (N interleaved runs, at its default level "
                             "and with optimizations off); sizes and dynamic dims too")
    common.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    common.add_argument("-v", "--verbose", action="store_true",
                        help="also say how the run went: fold counts, the buffer pool, each "
                             "phase's time, the rewrites")
    common.add_argument("--explain", action="store_true",
                        help="say why each constant-foldable node that was left alone was not "
                             "folded")
    add_compare_flags(check)
    output.add_argument("--external-data", choices=["auto", "yes", "no"], default="auto",
                        help="weights in OUTPUT.data: auto = where the input had external "
                             "data, or over protobuf's 2 GB limit")
    output.add_argument("--no-verify", action="store_true",
                        help="do not load the output in onnxruntime before it replaces "
                             "anything (done by default for outputs up to 64 MiB and 5000 "
                             "nodes)")
    output.add_argument("--no-prefill", action="store_true",
                        help="do not warm the output file's pages on a second thread while "
                             "folding")
    add_skip_check(output)
    output.add_argument("--latency-threads", type=threads, default=1, metavar="T",
                        help="onnxruntime's intra-op threads for --latency (default 1)")
    batch = p.add_argument_group("several models")
    batch.add_argument("-j", "--jobs", type=POSITIVE, default=None, metavar="N",
                       help="optimize N at a time (default 1)")
    batch.add_argument("--job-timeout", type=JOB_SECONDS, default=None, metavar="SECONDS",
                       help="kill a model's job still running after this long; it is reported "
                            "as timed out (exit 3), the others go on (default: no limit)")
    batch.add_argument("--shard", type=_shard, default=None, metavar="K/N",
                       help="only the models of shard K (from 0) of N, split by their paths, "
                            "the same on every host; run N copies (a Kubernetes indexed Job, a "
                            "Slurm array), each with its K and its own --json manifest "
                            "(docs/cli.md)")
    batch.add_argument("-r", "--recursive", action="store_true",
                       help="with a directory as input: also the .onnx files in its "
                            "subdirectories (written to the same relative paths under -o)")
    add_peer_flags(p.add_argument_group(
        "onnxsim's and onnxslim's flags (their other names of onnxfold's above; docs/cli.md "
        "maps every one)"))


def parse(argv: Sequence[str] | None = None) -> CommandLine:
    """The command line ``argv`` (default: the process's) as typed values; argparse's
    errors exit 2 with one line. Without a command, a model file first is ``optimize``'s
    (onnxsim's ``onnxsim IN OUT``: :func:`implied`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    given = implied(argv)
    args = build_parser().parse_args(spread(given))
    args.implied = given is not argv
    return command_line(args)


def implied(argv: list[str]) -> list[str]:
    """``argv`` with ``optimize`` put first where it names no command and its first argument
    that is not a flag is a model (a file or directory that exists, or a ``.onnx`` name):
    ``onnxfold IN OUT`` is ``onnxfold optimize IN OUT``. Else ``argv`` itself (a mistyped
    command stays argparse's "invalid choice")."""
    for arg in argv:
        if arg in ("-h", "--help", "--version"):
            return argv
        if not arg.startswith("-"):
            model = arg not in _COMMANDS and (os.path.exists(arg) or arg.endswith(".onnx"))
            return ["optimize", *argv] if model else argv
    return argv


# flags that take several values after one (onnxsim's ``--input-shape a:1,2 b:1,2``), each
# value recognized by its form (a path is never one; an input's name may hold a ``/`` where
# only dims follow its colon: ``input/ids:1,8``)
_SHAPE = re.compile(r"^[^-/][^/]*[:=][^/]*$|^[^-/][^:=]*:[\w?, +-]*$")
_SEVERAL = {"--input-shape": _SHAPE, "--overwrite-input-shape": _SHAPE,
            "--input-shapes": _SHAPE, "--test-input-shape": _SHAPE,
            "--model-check-inputs": _SHAPE,
            "--skip-optimization": re.compile(r"^[A-Za-z_]\w*$"),
            "--skip-optimizer": re.compile(r"^[A-Za-z_]\w*$"),
            "--dim": re.compile(r"^[^-/][^/=]*=[^/]*$"),
            "--int-range": re.compile(r"^[^-/][^/=]*=[^/]*:[^/]*$")}


def spread(argv: list[str]) -> list[str]:
    """``argv`` with the values that follow one of :data:`_SEVERAL`'s flags each given its
    own flag (``--input-shape a:1 b:2`` is ``--input-shape a:1 --input-shape b:2``), as long
    as they have a value's form and name no existing file."""
    out: list[str] = []
    flag: str | None = None  # the flag whose values are being read
    first = False  # the next value is the flag's own
    for arg in argv:
        if flag is not None and _SEVERAL[flag].match(arg) and not os.path.exists(arg):
            out.extend([arg] if first else [flag, arg])
            first = False
            continue
        flag = arg if arg in _SEVERAL else None
        first = flag is not None
        out.append(arg)
    return out


def command_line(args: argparse.Namespace) -> CommandLine:
    """The parsed namespace as the command's typed values: the only place that reads it."""
    # (no parser default for --debug: one would be the subcommands' too, the action being
    # shared through ``parents``, and undo a --debug given before the subcommand)
    return CommandLine(_COMMANDS[args.command](args), getattr(args, "debug", False))


def _comparison(args: argparse.Namespace) -> ComparisonFlags:
    return ComparisonFlags(
        inputs=args.inputs, dims=tuple(args.dim), int_ranges=tuple(args.int_range),
        seed=args.seed, custom_op_libraries=tuple(args.custom_op_library), rtol=args.rtol,
        atol=args.atol, level=args.ort_level, fold_verification=not args.no_fold_verification,
        inference_timeout=args.inference_timeout)


def _optimize(args: argparse.Namespace) -> OptimizeCommand:
    settings = OptimizeSettings(
        fold=fold_options(args), check_input=not args.skip_check,
        save=SaveRequest(args.external_data, verify=not args.no_verify,
                         prefill=not args.no_prefill),
        # onnxslim's --model-check asks for a check; --check N says on how many sets
        check=CheckRequest(args.check or int(args.model_check), _comparison(args),
                           tuple(args.test_shapes)),
        report=ReportRequest(args.json, args.report, args.quiet, args.verbose, args.explain,
                             args.latency, args.latency_threads))
    return OptimizeCommand(tuple(args.input), args.output, settings,
                           BatchRequest(args.jobs, args.job_timeout, args.recursive, args.shard),
                           implied=getattr(args, "implied", False),
                           notes=tuple(getattr(args, "peer_notes", ())))


def _compare(args: argparse.Namespace) -> CompareCommand:
    return CompareCommand(args.a, args.b, args.n, args.json, _comparison(args), args.report)


def _verify_folds(args: argparse.Namespace) -> VerifyFoldsCommand:
    return VerifyFoldsCommand(args.a, args.b, args.json, _comparison(args), args.report)


def _split(args: argparse.Namespace) -> SplitCommand:
    return SplitCommand(args.input, tuple(args.runtime_const), args.output,
                        fold_compile_time=not args.no_compile_time_fold,
                        fold=fold_options(args), check_input=not args.skip_check)


def _split_adapter(args: argparse.Namespace) -> SplitAdapterCommand:
    return SplitAdapterCommand(args.input, args.output, args.adapter,
                               check_input=not args.skip_check)


def _run(args: argparse.Namespace) -> RunCommand:
    return RunCommand(args.model, args.inputs, tuple(args.runtime_const), args.backend,
                      args.repeat, args.cache_dir, tuple(args.adapter), args.compare,
                      args.threads, args.output, tuple(args.custom_op_library),
                      fold_options(args), args.inference_timeout)


def _inspect(args: argparse.Namespace) -> InspectCommand:
    return InspectCommand(args.input, args.json, check_input=not args.skip_check)


def _rules(args: argparse.Namespace) -> RulesCommand:
    return RulesCommand(args.coverage, args.json, args.jobs)


_COMMANDS: dict[str, Callable[[argparse.Namespace], Command]] = {
    "optimize": _optimize, "compare": _compare, "verify-folds": _verify_folds,
    "split": _split, "split-adapter": _split_adapter, "run": _run, "inspect": _inspect,
    "rules": _rules}
