"""``optimize --check``'s last line says "(not a full verification: see above)" exactly when
something was sampled, not verifiable, not validated, fixed or seen at one value only, and
never when everything was shown for every input: one small model per case, each run as a user
runs it (the suffix was mutated away for sampled folds and unvalidated rewrites and no test
noticed)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.support.cli import run_cli
from tests.support.models import make_model, tensor, vinfo

F32 = TensorProto.FLOAT
SUFFIX = " (not a full verification: see above)"
W = np.arange(12, dtype=np.float32).reshape(3, 4) / 7


def _full(path):
    """A weight transposed at run time: folded, re-derived once (it reads no dim)."""
    make = make_model([helper.make_node("Transpose", ["W"], ["wt"]),
                       helper.make_node("MatMul", ["x", "wt"], ["y"])],
                      [vinfo("x", F32, ["b", 4])], [vinfo("y", F32, ["b", 3])], [tensor("W", W)])
    onnx.save(make, path)


def _sampled(path):
    """``5 + (n of a - n of c)``: 5 under --assume-named-dims-equal, which the check does not
    assume: equal at every binding it ran, not shown for every dims."""
    nodes = [helper.make_node("Shape", ["a"], ["sa"]), helper.make_node("Shape", ["c"], ["sc"]),
             helper.make_node("Gather", ["sa", "i1"], ["na"]),
             helper.make_node("Gather", ["sc", "i1"], ["nc"]),
             helper.make_node("Sub", ["na", "nc"], ["d"]),
             helper.make_node("Cast", ["d"], ["df"], to=F32),
             helper.make_node("Add", ["df", "five"], ["t"]),
             helper.make_node("Add", ["a", "t"], ["y"]), helper.make_node("Add", ["y", "c"], ["z"])]
    onnx.save(make_model(nodes, [vinfo("a", F32, ["b", "n"]), vinfo("c", F32, ["b", "n"])],
                         [vinfo("z", F32, ["b", "n"])],
                         [tensor("i1", np.array([1], np.int64)),
                          tensor("five", np.array(5.0, np.float32))]), path)


def _loop(path):
    """A Loop whose body folds a chain of its constants (not verifiable: a constant inside a
    subgraph) and drops a pair of transposes (a rewrite in a subgraph: not validated)."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["c", "two"], ["m"]),
         helper.make_node("Transpose", ["v_in"], ["t1"], perm=[1, 0]),
         helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0]),
         helper.make_node("Add", ["t2", "m"], ["v_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])], "body",
        [vinfo("i", TensorProto.INT64, []), vinfo("cond", TensorProto.BOOL, []),
         vinfo("v_in", F32, [2, 2])],
        [vinfo("cond_out", TensorProto.BOOL, []), vinfo("v_out", F32, [2, 2])],
        [tensor("two", np.float32(2))])
    nodes = [helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body)]
    onnx.save(make_model(nodes, [vinfo("x", F32, [2, 2])], [vinfo("y", F32, [2, 2])],
                         [tensor("trips", np.array(3, np.int64)),
                          tensor("c", np.array([[0.5, 1.0], [-2.0, 4.0]], np.float32))]), path)


def _single(path):
    """A Reshape to [1, 1]: the guessed dim n runs at 1 only."""
    onnx.save(make_model([helper.make_node("Reshape", ["x", "s"], ["r"]),
                          helper.make_node("Relu", ["r"], ["y"])],
                         [vinfo("x", F32, [1, "n"])], [vinfo("y", F32, [1, 1])],
                         [tensor("s", np.array([1, 1], np.int64))]), path)


def _overridable(path):
    """A weight that is also an input (a caller may override it): --inputs-are-constant
    fixes it, and the check compares at its default only."""
    graph = helper.make_graph([helper.make_node("Transpose", ["W"], ["wt"]),
                               helper.make_node("MatMul", ["x", "wt"], ["y"])], "g",
                              [vinfo("x", F32, ["b", 4]), vinfo("W", F32, [3, 4])],
                              [vinfo("y", F32, ["b", 3])], [tensor("W", W)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


CASES = {  # name -> (builder, flags, what the last line says, whether the suffix is due)
    "full": (_full, (), "every folded tensor verified for every input", False),
    "sampled": (_sampled, ("--assume-named-dims-equal",), "1 sampled", True),
    "not verifiable": (_loop, (), "1 not verifiable", True),
    "not validated": (_loop, (), "not validated", True),
    "one value": (_single, (), "dims n=1 took one value only", True),
    "fixed default": (_overridable, ("--inputs-are-constant",),
                      "W (overridable in the original) fixed by the second model", True),
}


@pytest.mark.parametrize("case", CASES)
def test_the_last_line_is_a_full_verification_exactly_when_everything_was_shown(tmp_path,
                                                                               case):
    build, flags, said, partial = CASES[case]
    source, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    build(source)
    done = run_cli("optimize", source, "-o", out, "--check", "2", *flags)
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert said in last, done.stdout
    assert last.endswith(SUFFIX) == partial, last


@pytest.mark.parametrize("case", ["full", "not verifiable"])
def test_verify_folds_ends_with_its_verdict_line(tmp_path, case):
    """``verify-folds`` printed no verdict: its last line now says what it showed."""
    build, flags, _, partial = CASES[case]
    source, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    build(source)
    assert run_cli("optimize", source, "-o", out, *flags).returncode == 0
    done = run_cli("verify-folds", source, out)
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("every folded tensor verified" if not partial else "folds: "), last
    assert last.endswith(SUFFIX) == partial, last
