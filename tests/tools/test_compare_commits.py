"""``python -m tools.compare_commits`` finds a one-rule change between two commits, and none
between a commit and itself.

A shared clone of this repository (objects borrowed, nothing copied) gets one extra commit in
which the Add folder adds 1 to its result; a model whose only foldable node is such an Add is
folded by both commits with their own code.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.cli import Finished, run_python

ROOT = Path(__file__).resolve().parents[2]
RULE = "rules/elementwise.py"
ADD = "    return np.add(a, b)\n"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A clone whose HEAD changes the Add folder's output and HEAD~1 is this repository's HEAD."""
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode:
        pytest.skip("not a git checkout")
    clone = tmp_path_factory.mktemp("compare") / "repo"
    _git(ROOT, "clone", "--quiet", "--shared", str(ROOT), str(clone))
    rule = clone / RULE
    text = rule.read_text()
    assert ADD in text, f"{RULE} no longer folds Add with {ADD.strip()!r}"
    rule.write_text(text.replace(ADD, "    return np.add(a, b) + np.ones((), a.dtype)\n"))
    _git(clone, "-c", "user.name=test", "-c", "user.email=test@example.invalid",
         "commit", "--quiet", "-am", "Add folds to a + b + 1")
    return clone


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """y = x * (c1 + c2): the Add of two initializers is what onnxfold folds."""
    c1 = numpy_helper.from_array(np.arange(4, dtype=np.float32), "c1")
    c2 = numpy_helper.from_array(np.full(4, 0.5, dtype=np.float32), "c2")
    graph = helper.make_graph(
        [helper.make_node("Add", ["c1", "c2"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [c1, c2])
    path = tmp_path_factory.mktemp("model") / "add.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _compare(repo: Path, model: Path, base: str, head: str) -> Finished:
    return run_python("-m", "tools.compare_commits", base, head, "--repo", repo, "--no-models",
                      "--no-wild", "--model", model, cwd=ROOT, timeout=120)


def test_a_changed_rule_output_is_a_difference(repo, model):
    proc = _compare(repo, model, "HEAD~1", "HEAD")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 folds: 0 identical, 1 different" in proc.stdout
    assert "different: model/add.onnx: graph model.onnx differs" in proc.stdout
    # each side imported onnxfold from its own temporary checkout, which is gone afterwards
    origins = [line.split("onnxfold from ")[1] for line in proc.stdout.splitlines()
               if "onnxfold from " in line]
    assert len(origins) == 2 and origins[0] != origins[1]
    assert all(not Path(origin).exists() for origin in origins)
    assert len(_git(repo, "worktree", "list").splitlines()) == 1  # the clone only


def test_a_commit_against_itself_is_identical(repo, model):
    proc = _compare(repo, model, "HEAD", "HEAD")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 folds: 1 identical, 0 different, 0 failed-same, 0 failed-differently" in proc.stdout


def test_an_unknown_commit_is_one_error_line(repo, model):
    proc = _compare(repo, model, "no-such-branch", "HEAD")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "compare_commits: error: not a commit: no-such-branch"


def test_a_model_both_commits_refuse_fails_the_same_way(repo, tmp_path):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x07not a model")
    proc = _compare(repo, garbage, "HEAD~1", "HEAD~1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 folds: 0 identical, 0 different, 1 failed-same, 0 failed-differently" in proc.stdout
    assert "failed on both (1): InputError: " in proc.stdout
