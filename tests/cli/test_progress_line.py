"""The progress line: one line per phase on a terminal's stderr, nothing on a pipe or with -q.

The 2 s threshold is set to 0 with ONNXFOLD_PROGRESS_AFTER so that a small model shows it;
the terminal is a real pseudo-terminal (``pty``)."""

import io
import os

from onnxfold.app.progress import TerminalProgress
from onnxfold.pipeline.phases import Phases
from tests.support.cli import run_cli, run_on_terminal

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BERT = os.path.join(ROOT, "models", "tiny_bert_ts.onnx")


def _env(after="0"):
    return {**os.environ, "ONNXFOLD_PROGRESS_AFTER": after}


def _on_terminal(args, env):
    """(exit code, what the terminal got) of the CLI with stderr on a pseudo-terminal."""
    code, _, terminal = run_on_terminal(args, env, timeout=120)
    return code, terminal


def phase_lines(text):
    """The phases named at the start of each redraw, in order of first appearance."""
    names = []
    for part in text.replace("\r\n", "\n").replace("\x1b[K", "").replace("\r", "\n").split("\n"):
        word = part.split(" ", 1)[0]
        if word and word not in names:
            names.append(word)
    return names


def test_each_phase_gets_a_line_on_a_terminal(tmp_path):
    code, terminal = _on_terminal(
        ["optimize", BERT, "-o", str(tmp_path / "o.onnx"), "--check", "1"], _env())
    assert code == 0, terminal
    names = phase_lines(terminal)
    # the signature reads the input's compute profile after the first shape inference
    assert names[:5] == ["load", "shapes", "signature", "rewrite", "fold"], names
    assert "check" in names, names
    # what the phase does, then its seconds (its last step: the rewrites validated)
    assert "check validating rewrites 1/1 " in terminal
    assert terminal.rstrip("\r\n").endswith(" s")  # the last line was finished
    assert "Traceback" not in terminal


def test_the_terminal_line_waits_for_the_threshold(tmp_path):
    code, terminal = _on_terminal(["optimize", BERT, "-o", str(tmp_path / "o.onnx")],
                                     _env(after="60"))
    assert code == 0 and terminal == ""
    code, terminal = _on_terminal(["optimize", BERT, "-o", str(tmp_path / "p.onnx")], _env())
    assert code == 0 and "save 0.4/0.4 MiB " in terminal  # the weights it wrote, of all


def test_nothing_on_a_pipe_or_with_quiet(tmp_path):
    piped = run_cli("optimize", BERT, "-o", tmp_path / "a.onnx", env=_env(), timeout=120)
    assert piped.returncode == 0 and piped.stderr == ""
    code, terminal = _on_terminal(["optimize", BERT, "-o", str(tmp_path / "b.onnx"), "-q"],
                                     _env())
    assert code == 0 and terminal == ""


def test_phase_seconds_count_once_when_nested():
    phases = Phases()
    with phases.phase("check"):
        with phases.phase("save"):
            pass
        with phases.phase("check"):  # the same phase again: not counted twice
            pass
    assert list(phases.seconds) == ["check", "save"]
    assert all(s >= 0 for s in phases.seconds.values())


def test_progress_draws_fold_detail_and_finishes_each_line():
    stream = io.StringIO()
    progress = TerminalProgress(stream, after=0)
    phases = Phases(progress)
    with phases.phase("fold"):
        phases.fold_progress(3, 9)
    with phases.phase("save"):
        pass
    progress.close()
    lines = [line.split("\r\x1b[K")[-1] for line in stream.getvalue().split("\n") if line]
    assert lines[0].startswith("fold 3/9 ") and lines[1].startswith("save ")
    assert stream.getvalue().endswith("\n")
