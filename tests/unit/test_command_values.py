"""The command line is parsed once into typed values (``onnxfold.app.commands``): the parser is
the only module that imports argparse or reads its namespace, a batch's job receives a
``JobOrder`` of those values, and the values say what the JSON report records."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import pickle
from pathlib import Path

import pytest

from onnxfold.app.commands import (
    CompareCommand,
    JobOrder,
    ModelJob,
    OptimizeCommand,
    RunCommand,
    SplitCommand,
    written_directories,
)
from onnxfold.app.parser import build_parser, parse
from onnxfold.app.peer_flags import SAME_BY_DEFAULT
from onnxfold.pipeline.options import FoldOptions

ONNXFOLD = Path(__file__).resolve().parents[2] / "onnxfold"


def _imports_argparse(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "argparse":
            return True
    return False


def test_only_the_parser_imports_argparse():
    """The command line is parsed in one place: the parser and the flags of onnxsim and
    onnxslim it also answers to (``app/peer_flags.py``, which only the parser imports)."""
    importers = sorted(str(p.relative_to(ONNXFOLD)) for p in ONNXFOLD.rglob("*.py")
                       if _imports_argparse(p))
    assert importers == ["app/parser.py", "app/peer_flags.py"]
    users = sorted(str(p.relative_to(ONNXFOLD)) for p in ONNXFOLD.rglob("*.py")
                   if "peer_flags import" in p.read_text() or "import peer_flags" in
                   p.read_text())
    assert all(u in ("app/parser.py", "app/optimize_command.py") for u in users), users


def test_an_optimize_line_becomes_its_typed_values(tmp_path):
    line = parse(["optimize", "m.onnx", "-o", "out.onnx", "--check", "2", "--dim", "batch=2",
                  "--keep", "Gather", "--allow-growth", "--json", "r.json", "-q",
                  "--external-data", "yes", "--no-verify", "--debug"])
    command = line.command
    assert isinstance(command, OptimizeCommand) and line.debug
    assert (command.sources, command.output) == (("m.onnx",), "out.onnx")
    settings = command.settings
    assert settings.fold == FoldOptions(keep=("Gather",), growth_factor=None)
    assert settings.check.n == 2 and settings.check.comparison.dims == ("batch=2",)
    assert settings.report.json == "r.json" and settings.report.quiet
    assert settings.save.external is True and not settings.save.verify
    assert settings.check.comparison.resolved().dims == {"batch": 2}


def test_the_report_records_the_flags_by_name():
    command = parse(["optimize", "m.onnx", "--skip-check", "--int-range", "ids=0:9"]).command
    assert isinstance(command, OptimizeCommand)
    reported = command.settings.reported()
    assert list(reported) == ["check", "inputs", "seed", "rtol", "atol", "dim", "int_range",
                              "external_data", "skip_check", "no_verify", "ort_level",
                              "no_fold_verification", "latency", "latency_threads"]
    assert reported["skip_check"] and reported["int_range"] == ["ids=0:9"]
    assert not reported["no_verify"] and reported["ort_level"] == "all"


def test_a_batch_job_order_is_typed_values_that_survive_pickling(tmp_path):
    command = parse(["optimize", "a.onnx", "b.onnx", "-o", "out/", "--fold-qdq"]).command
    assert isinstance(command, OptimizeCommand)
    order = JobOrder(ModelJob("a.onnx", str(tmp_path / "a.onnx")), command.settings, debug=True)
    again = pickle.loads(pickle.dumps(order))
    assert again == order and again.settings.fold.fold_qdq
    for value in (again, again.job, again.settings, again.settings.check):
        assert dataclasses.is_dataclass(value)


def test_a_job_may_replace_only_the_input_it_is_written_over(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    assert ModelJob.of(str(model), str(model)).replaces == (str(model), f"{model}_data",
                                                             f"{model}.data")
    assert ModelJob.of(str(model), str(tmp_path / "o.onnx")).replaces == ()
    assert ModelJob.of(str(model), None) == ModelJob(str(model), None)


def test_each_command_names_the_directories_it_writes(tmp_path):
    out = tmp_path / "parts"
    split = parse(["split", "m.onnx", "--runtime-const", "w", "-o", str(out)]).command
    assert isinstance(split, SplitCommand)
    assert written_directories(split) == [str(tmp_path), str(out)]
    compare = parse(["compare", "a.onnx", "b.onnx"]).command
    assert isinstance(compare, CompareCommand) and written_directories(compare) == []
    run = parse(["run", "m.onnx", "--inputs", "f.npz", "-o", str(tmp_path / "o.npz")]).command
    assert isinstance(run, RunCommand) and written_directories(run) == [str(tmp_path)]


# the fewest arguments each subcommand takes
_BARE = {"optimize": ["m.onnx"], "compare": ["a.onnx", "b.onnx"],
         "verify-folds": ["a.onnx", "b.onnx"], "split": ["m.onnx", "--runtime-const", "w", "-o",
                                                         "out"],
         "split-adapter": ["m.onnx", "-o", "b.onnx", "--adapter", "a.onnx_adapter"],
         "run": ["m.onnx", "--inputs", "i.npz"], "inspect": ["m.onnx"], "rules": []}


def _switches(command: str) -> list[str]:
    """The flags of ``command`` that take no value (``--skip-check``, ``--no-fallback``)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a.option_strings[-1] for a in sub.choices[command]._actions
            if a.option_strings and a.nargs == 0 and a.dest not in ("help", "debug")]


def test_every_switch_a_subcommand_accepts_changes_what_it_does():
    """A flag a command takes is read by it: each switch of each subcommand gives a command
    value other than the one without it (``run --skip-check`` was accepted, shared with the
    fold flags, and ignored; ``run`` now refuses it)."""
    assert set(_BARE) == set(next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices)
    for name, bare in _BARE.items():
        plain = parse([name, *bare]).command
        for switch in _switches(name):
            if switch in SAME_BY_DEFAULT:  # onnxsim's or onnxslim's name of a default
                continue
            assert parse([name, *bare, switch]).command != plain, f"{name} {switch}"
    assert "--skip-check" not in _switches("run")
    assert {"--skip-check"} <= set(_switches("optimize")) & set(_switches("split"))


def test_run_refuses_skip_check_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        parse(["run", "m.onnx", "--inputs", "i.npz", "--skip-check"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "--skip-check" in err[0], err
