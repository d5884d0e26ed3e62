"""``onnxfold optimize IN OUT``, onnxsim's form: the second path is the output where the line
can mean nothing else (the first path a model, the second nothing yet), and the run says so on
stderr; where it could mean either (the second path exists, a new directory name, onnxsim's
``check_n``) it is one ``onnxfold: error:`` line naming ``-o``, and nothing is written.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from tests.support.cli import assert_one_error_line, run_cli, save_add_model
from tests.support.models import MODELS
from tests.support.running import random_feeds, run_ort

TINY_BERT = os.path.join(MODELS, "tiny_bert_ts.onnx")


def _listing(directory):
    return sorted(os.listdir(directory))


def test_in_out_writes_out_and_says_it_took_it_as_the_output(tmp_path):
    save_add_model(tmp_path / "in.onnx")
    proc = run_cli("optimize", "in.onnx", "out.onnx", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "onnxfold: writing to out.onnx: the second path is taken as the output, as onnxsim "
        "reads IN OUT (-o out.onnx says so)"]
    assert "wrote        out.onnx" in proc.stdout
    onnx.checker.check_model(onnx.load(tmp_path / "out.onnx"))
    assert _listing(tmp_path) == ["in.onnx", "out.onnx"]


def test_in_out_is_quiet_with_q(tmp_path):
    save_add_model(tmp_path / "in.onnx")
    proc = run_cli("optimize", "in.onnx", "out.onnx", "-q", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == proc.stderr == "", proc.stderr
    assert (tmp_path / "out.onnx").is_file()


@pytest.mark.parametrize("second", ["other.onnx", "notes.txt"])
def test_an_existing_second_path_is_refused_naming_o(tmp_path, second):
    save_add_model(tmp_path / "in.onnx")
    save_add_model(tmp_path / "other.onnx")
    (tmp_path / "notes.txt").write_text("keep")
    before = {name: (tmp_path / name).read_bytes() for name in _listing(tmp_path)}
    proc = run_cli("optimize", "in.onnx", second, cwd=tmp_path)
    assert_one_error_line(proc, "both paths exist", f"give -o {second}", "-o DIR/")
    assert {name: (tmp_path / name).read_bytes() for name in _listing(tmp_path)} == before


def test_a_new_directory_name_is_refused_naming_o(tmp_path):
    save_add_model(tmp_path / "in.onnx")
    proc = run_cli("optimize", "in.onnx", "new/", cwd=tmp_path)
    assert_one_error_line(proc, "new/ does not exist", "give -o new/")
    assert _listing(tmp_path) == ["in.onnx"]


def test_onnxsims_check_n_is_the_check(tmp_path):
    """Issue 65: ``IN OUT N`` is onnxsim's check count: ``--check N``, said on one line."""
    save_add_model(tmp_path / "in.onnx")
    proc = run_cli("optimize", "in.onnx", "out.onnx", "3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "-o out.onnx --check 3" in proc.stderr and "on 3 input sets" in proc.stdout
    assert _listing(tmp_path) == ["in.onnx", "out.onnx"]
    both = run_cli("in.onnx", "out2.onnx", "3", "--check", "2", cwd=tmp_path)
    assert_one_error_line(both, "onnxsim's check_n, and --check 2: give one")


def test_onnxsims_command_line_replaces_an_earlier_output(tmp_path):
    """Issue 65: ``onnxfold IN OUT`` run again once OUT exists replaces it, as onnxsim does;
    a file that is not a model's is never replaced."""
    save_add_model(tmp_path / "in.onnx")
    (tmp_path / "notes.txt").write_text("keep")
    for _ in range(2):
        proc = run_cli("in.onnx", "out.onnx", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    assert "it exists: replaced, as onnxsim does" in proc.stderr
    before = (tmp_path / "in.onnx").read_bytes()
    notes = run_cli("in.onnx", "notes.txt", cwd=tmp_path)
    assert notes.returncode == 2 and (tmp_path / "notes.txt").read_text() == "keep"
    assert (tmp_path / "in.onnx").read_bytes() == before
    assert _listing(tmp_path) == ["in.onnx", "notes.txt", "out.onnx"]


def test_an_existing_directory_stays_an_input(tmp_path):
    """``IN DIR`` with DIR a directory of models was, and stays, a dry run of them all."""
    save_add_model(tmp_path / "in.onnx")
    (tmp_path / "zoo").mkdir()
    save_add_model(tmp_path / "zoo" / "m.onnx")
    proc = run_cli("optimize", "in.onnx", "zoo", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "2 of 2 models: 2 ok; dry run: nothing written" in proc.stdout
    assert _listing(tmp_path) == ["in.onnx", "zoo"]


def test_with_o_two_paths_stay_two_inputs(tmp_path):
    """``-o`` given: the paths are inputs, as always (a missing one is named)."""
    save_add_model(tmp_path / "in.onnx")
    proc = run_cli("optimize", "in.onnx", "missing.onnx", "-o", "out/", cwd=tmp_path)
    assert proc.returncode == 2
    assert "missing.onnx: no such file" in proc.stderr + proc.stdout


def test_a_refused_output_is_not_announced_first(tmp_path):
    """``IN OUT`` read as ``IN -o OUT``, OUT refused: the one error line, no "writing to"
    before it."""
    save_add_model(tmp_path / "in.onnx")
    os.mkfifo(tmp_path / "pipe")
    os.symlink("pipe", tmp_path / "out.onnx")
    proc = run_cli("optimize", "in.onnx", "out.onnx", cwd=tmp_path)
    assert_one_error_line(proc, "out.onnx")
    assert "writing to" not in proc.stderr


@pytest.mark.parametrize("n", ["-1", "1e3", "99999999999999999999999", "1_0", "\u0663"])
def test_a_check_count_that_is_no_count_is_refused_in_one_line(tmp_path, n):
    """The adversarial round: ``IN OUT -1`` read three inputs (a batch, several lines), and
    ``IN OUT 99999999999999999999999`` ran a check without end; N is judged as ``--check``
    judges its count."""
    save_add_model(tmp_path / "in.onnx")
    proc = run_cli("in.onnx", "out.onnx", n, cwd=tmp_path)
    assert_one_error_line(proc, "onnxsim's check_n (--check N)")
    assert _listing(tmp_path) == ["in.onnx"]


def test_a_dangling_link_as_the_output_is_said_as_it_is(tmp_path):
    save_add_model(tmp_path / "in.onnx")
    os.symlink("nowhere.onnx", tmp_path / "dang.onnx")
    proc = run_cli("in.onnx", "dang.onnx", cwd=tmp_path)
    assert_one_error_line(proc, "dang.onnx is a symbolic link to nothing", "give -o dang.onnx")


@pytest.mark.parametrize("form", [[], ["optimize"]], ids=["onnxsim", "optimize"])
@pytest.mark.parametrize("suffix", [None, ".data", "_data"])
def test_the_input_twice_is_replaced_in_place(tmp_path, form, suffix):
    """``onnxfold model.onnx model.onnx`` (the form a genai or optimum directory needs, whose
    file names are fixed) is ``-o model.onnx``: written beside, published by a rename, its
    data under the input's own name; said on one line. Both forms: the same path twice can
    mean no batch."""
    model = onnx.load(TINY_BERT)
    src = tmp_path / "model.onnx"
    if suffix is None:
        onnx.save(model, src)
    else:
        onnx.save(model, src, save_as_external_data=True, location="model.onnx" + suffix,
                  size_threshold=1024)
    feeds = random_feeds(TINY_BERT)
    proc = run_cli(*form, "model.onnx", "./model.onnx", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "in place" in proc.stderr.splitlines()[0], proc.stderr
    assert _listing(tmp_path) == ["model.onnx"] + ([] if suffix is None
                                                   else ["model.onnx" + suffix])
    assert len(onnx.load(src).graph.node) < len(model.graph.node)
    for a, b in zip(run_ort(TINY_BERT, feeds), run_ort(str(src), feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_the_input_twice_with_a_refused_option_is_left_as_it_was(tmp_path):
    save_add_model(tmp_path / "in.onnx")
    before = (tmp_path / "in.onnx").read_bytes()
    proc = run_cli("in.onnx", "in.onnx", "--check", "1", "--atol", "-1", cwd=tmp_path)
    assert_one_error_line(proc, "--atol")
    assert (tmp_path / "in.onnx").read_bytes() == before
    assert _listing(tmp_path) == ["in.onnx"]
