"""An output's directory is resolved and opened once: a swap of a symlink on its way, or a
rename of the directory, after the run began changes nothing.

The output directory (or the symlinked output file) is swapped through a test hook while the
run folds, once it has written its temporary files, and while ``--check`` compares: the output
and its report land in the directory resolved at the start, the new target is untouched (a file
there is never replaced), and no temporary file or lock is left anywhere. Before, a swap during
the save stranded complete temporaries in the old directory and exited 2; a swap during the
fold sent the output into the new target, replacing a file there.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest

from tests.support.files import assert_unchanged, snapshot
from tests.support.interrupts import leftovers, run_acted_on
from tests.support.models import transposed_weight

POINTS = ["folding", "written"]


def _swap(link: Path, target: Path) -> None:
    """Point the symlink ``link`` at ``target`` in one step (a rename over it)."""
    staged = link.with_name(link.name + ".new")
    os.symlink(target, staged)
    os.replace(staged, link)


def _setup(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """The model, the directories A (the link's target at the start) and B (later), and the
    link; B holds a file of the output's name that must never be replaced."""
    source = transposed_weight(tmp_path / "in", rows=256, cols=1024)
    first, second = tmp_path / "A", tmp_path / "B"
    first.mkdir()
    second.mkdir()
    (second / "m.onnx").write_bytes(b"someone else's model")
    link = tmp_path / "out"
    os.symlink(first, link)
    return source, first, second, link


def _assert_written_to(directory: Path, *names: str) -> None:
    assert sorted(os.listdir(directory)) == sorted(names), os.listdir(directory)
    model = onnx.load(directory / "m.onnx")  # whole, its data beside it
    assert [n.op_type for n in model.graph.node] == ["MatMul"]


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("external", [False, True], ids=["embedded", "external data"])
def test_a_swapped_output_directory_link_does_not_redirect_the_output(tmp_path, point,
                                                                       external):
    source, first, second, link = _setup(tmp_path)
    before = snapshot(second)
    flags = ["--external-data", "yes" if external else "no"]
    (tmp_path / "pauses").mkdir()
    ending = run_acted_on(["optimize", source, "-o", link / "m.onnx", "--json",
                           link / "r.json", *flags], point, lambda proc: _swap(link, second),
                          tmp_path / "pauses")
    assert ending.paused and ending.code == 0, ending.stderr
    _assert_written_to(first, "m.onnx", "r.json", *(["m.onnx.data"] if external else []))
    assert_unchanged(before, snapshot(second))
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("point", ["folding", "check-saved", "check-compared"])
def test_a_swap_while_checking_does_not_redirect_the_output(tmp_path, point):
    source, first, second, link = _setup(tmp_path)
    before = snapshot(second)
    (tmp_path / "pauses").mkdir()
    ending = run_acted_on(["optimize", source, "-o", link / "m.onnx", "--check", "1"], point,
                          lambda proc: _swap(link, second), tmp_path / "pauses")
    assert ending.paused and ending.code == 0, ending.stderr
    _assert_written_to(first, "m.onnx", "m.onnx.data")  # (the layout follows the input)
    assert_unchanged(before, snapshot(second))
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("point", POINTS)
def test_a_swapped_output_file_link_does_not_redirect_the_output(tmp_path, point):
    """``-o link.onnx``: the link's target at the start gets the model (the link stays)."""
    source, first, second, _ = _setup(tmp_path)
    link = tmp_path / "m.onnx"
    os.symlink(first / "m.onnx", link)
    before = snapshot(second)
    (tmp_path / "pauses").mkdir()
    ending = run_acted_on(["optimize", source, "-o", link], point,
                          lambda proc: _swap(link, second / "m.onnx"), tmp_path / "pauses")
    assert ending.paused and ending.code == 0, ending.stderr
    _assert_written_to(first, "m.onnx", "m.onnx.data")  # (the layout follows the input)
    assert_unchanged(before, snapshot(second))
    assert leftovers(tmp_path) == []


def test_a_renamed_output_directory_keeps_the_output(tmp_path):
    """The directory itself renamed while the run folds: the output follows it, under its
    new name; nothing appears under the old one."""
    source = transposed_weight(tmp_path / "in", rows=256, cols=1024)
    (tmp_path / "out").mkdir()
    (tmp_path / "pauses").mkdir()
    ending = run_acted_on(["optimize", source, "-o", tmp_path / "out" / "m.onnx"], "folding",
                          lambda proc: os.rename(tmp_path / "out", tmp_path / "moved"),
                          tmp_path / "pauses")
    assert ending.paused and ending.code == 0, ending.stderr
    assert not (tmp_path / "out").exists()
    _assert_written_to(tmp_path / "moved", "m.onnx", "m.onnx.data")
    assert leftovers(tmp_path) == []
