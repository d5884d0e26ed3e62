"""The examples of docs/python-api.md and docs/check.md, run as written.

``decoder.onnx`` is a Qwen2-style decoder with a KV cache and ``bert.onnx`` a BERT encoder,
both dynamo exports of transformers configs with random weights (``export_models``), in the
working directory the examples assume. Every ``>>>`` line of python-api.md runs as a doctest
(``...`` in an expected output stands for anything); the sample outputs of check.md are what
the commands beside them print, lines ``...`` standing for any lines. A doc that drifts from
what onnxfold does fails here.
"""

from __future__ import annotations

import doctest
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")
pytest.importorskip("transformers",
                    reason="the exports tier needs transformers (pip install .[exports])")

from tests.support import export_models
from tests.support.cli import run_cli

DOCS = Path(__file__).resolve().parents[2] / "docs"
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A directory holding decoder.onnx and bert.onnx, the examples' working directory."""
    directory = tmp_path_factory.mktemp("docs")
    export_models.qwen2_kv_cache(directory / "decoder.onnx", dynamo=True)
    export_models.bert_dynamo(directory / "bert.onnx")
    return directory


def test_python_api_examples_run_as_written(workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    # a code fence closes an example's expected output, as a blank line does
    text = re.sub(r"(?m)^```\w*$", "", (DOCS / "python-api.md").read_text())
    test = doctest.DocTestParser().get_doctest(text, {}, "python-api.md",
                                               str(DOCS / "python-api.md"), 0)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    out: list[str] = []
    runner.run(test, out=out.append)
    assert test.examples and runner.failures == 0, "".join(out)


def _samples(text: str) -> list[tuple[str, str]]:
    """(command, sample output) of each check.md block that follows a ``$ onnxfold`` line."""
    return re.findall(r"```\n\$ (onnxfold [^\n]+)\n(.*?)```", text, re.S)


def test_check_md_samples_are_what_the_commands_print(workdir):
    samples = _samples((DOCS / "check.md").read_text())
    assert samples
    checker = doctest.OutputChecker()
    for command, want in samples:
        argv = command.split()[1:]
        proc = run_cli(*argv, cwd=workdir, timeout=600, env={**os.environ, "COLUMNS": "200"})
        got = proc.stdout + proc.stderr
        assert checker.check_output(want, got, FLAGS), \
            f"$ {command}\n--- docs/check.md says ---\n{want}--- it prints ---\n{got}"
