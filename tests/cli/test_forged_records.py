"""A record says where to look, never what to excuse (issue 82, items 1 and 3).

onnxfold's output of ``y = Relu(x @ Transpose(W) + b) @ V`` (the Transpose folded under its
own name, ``b`` and ``V`` copied through) with one value planted wrong, and a tag an attacker
would write beside it: a ``rewired``, ``made_by`` or ``stands_for`` claim, or a recipe. Each
planted value fails ``verify-folds``, ``compare`` and ``compare`` in stages with exit 1,
whatever the tag; and an output where nothing was folded still says it is onnxfold's (its
model-level record), so a weight changed in it differs too. A file whose record was stripped
is said to carry none.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnxfold
from onnxfold.ir import provenance
from tests.support import breadth
from tests.support.cli import run_cli
from tests.support.models import make_model, tensor, vinfo


def _original(path) -> None:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0], name="t"),
             helper.make_node("MatMul", ["x", "Wt"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["hb"], name="add"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "V"], ["y"], name="out")]
    onnx.save(make_model(nodes, [vinfo("x", shape=["n", 8])], [vinfo("y", shape=["n", 4])],
                         [tensor("W", rng.standard_normal((16, 8)).astype(np.float32)),
                          tensor("b", rng.standard_normal(16).astype(np.float32)),
                          tensor("V", rng.standard_normal((16, 4)).astype(np.float32))]), path)


def _ulps(array: np.ndarray, n: int) -> np.ndarray:
    moved = array.copy()
    flat = moved.reshape(-1)
    for _ in range(n):
        flat[0] = np.nextafter(flat[0], np.float32(np.inf))
    return moved


def _plant(folded, bad, name: str, change, tags: dict[str, str]) -> None:
    """``folded`` with initializer ``name`` changed by ``change`` and its records replaced by
    ``tags``."""
    proto = onnx.load(folded)
    (init,) = [t for t in proto.graph.initializer if t.name == name]
    planted = numpy_helper.from_array(change(numpy_helper.to_array(init)), name)
    for key, value in tags.items():
        planted.metadata_props.add(key=key, value=value)
    init.CopyFrom(planted)
    onnx.save(proto, bad)


TAGS = {"none": {},
        "rewired": {provenance.REWIRED: "merge_transposes"},
        "made_by": {provenance.MADE_BY: "merge_shared_input_matmuls"},
        "stands_for": {provenance.STANDS_FOR: "Wt"},
        "all": {provenance.REWIRED: "elementwise_between_reshapes",
                provenance.MADE_BY: "fuse_batch_norm_into_gemm",
                provenance.STANDS_FOR: "hb"}}
CHANGES = {"1-ulp": lambda a: _ulps(a, 1), "100000-ulps": lambda a: _ulps(a, 100000),
           "swapped": lambda a: np.ascontiguousarray(a.reshape(-1)[::-1].reshape(a.shape))}


@pytest.fixture(scope="module")
def folded(tmp_path_factory):
    work = tmp_path_factory.mktemp("forged")
    a, b = work / "a.onnx", work / "b.onnx"
    _original(a)
    assert run_cli("optimize", a, "-o", b).returncode == 0
    names = {t.name for t in onnx.load(b).graph.initializer}
    assert {"Wt", "b", "V"} <= names, names  # folded under its name; weights copied through
    return a, b


def _fails_everywhere(a, bad, name: str) -> None:
    for command in (("verify-folds", a, bad), ("compare", a, bad, "-n", "1")):
        proc = run_cli(*command)
        assert proc.returncode == 1 and name in proc.stdout, (command[0], proc.stdout)
        assert name in proc.stderr.splitlines()[-1], proc.stderr  # the one line names it
    for window in (None, 1):
        result = onnxfold.compare(str(a), str(bad), n=1, window_bytes=window)
        (verdict,) = [t for t in result.folds.tensors if t.name == name]
        assert verdict.state == "differs" and not result.ok, result.summary()


NAMES = ["Wt", "b"]  # a folded tensor, a weight copied through


def _in_core(case: tuple[str, str, str]) -> bool:
    """CI: each tag once, the changes and names in turn beside it (the breadth tier: all)."""
    name, change, tag = case
    k = sorted(TAGS).index(tag)
    return change == sorted(CHANGES)[k % len(CHANGES)] and name == NAMES[k % len(NAMES)]


@pytest.mark.parametrize(("name", "change", "tag"), breadth.over(
    [(n, c, t) for n in NAMES for c in sorted(CHANGES) for t in sorted(TAGS)], _in_core))
def test_no_tag_excuses_a_changed_value_under_an_original_name(folded, tmp_path, name,
                                                               change, tag):
    a, b = folded
    bad = tmp_path / "bad.onnx"
    _plant(b, bad, name, CHANGES[change], TAGS[tag])
    _fails_everywhere(a, bad, name)


def _rewritten_only(path) -> None:
    """A Conv whose weight is data, behind a Dropout a rewrite drops: nothing folds."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Dropout", ["x"], ["d"], name="dropout"),
             helper.make_node("Conv", ["d", "K"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    onnx.save(make_model(nodes, [vinfo("x", shape=["n", 2, 6, 6])],
                         [vinfo("y", shape=["n", 3, 6, 6])],
                         [tensor("K", rng.standard_normal((3, 2, 3, 3)).astype(np.float32))]),
              path)


def test_an_output_where_nothing_folded_still_says_it_is_onnxfolds(tmp_path):
    """Issue 82 Why 3: two elements of a convolution weight swapped in an output with no
    folded tensor differ (the output's model-level record says onnxfold wrote it); with that
    record stripped the file is another tool's, and the verdict says so and is not full."""
    a, b, bad = tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path / "bad.onnx"
    _rewritten_only(a)
    assert run_cli("optimize", a, "-o", b).returncode == 0
    proto = onnx.load(b)
    assert "Dropout" not in {n.op_type for n in proto.graph.node}
    assert not any(p.key.startswith("onnxfold.") for t in proto.graph.initializer
                   for p in t.metadata_props)
    assert any(p.key == provenance.RUN for p in proto.metadata_props)

    def swap(k: np.ndarray) -> np.ndarray:
        k = k.copy()
        k[0, 0, 0, 0], k[0, 0, 0, 1] = k[0, 0, 0, 1], k[0, 0, 0, 0]
        return k

    _plant(b, bad, "K", swap, {})
    _fails_everywhere(a, bad, "K")
    proto = onnx.load(bad)
    del proto.metadata_props[:]
    onnx.save(proto, bad)
    proc = run_cli("verify-folds", a, bad)
    assert "no record of onnxfold" in proc.stdout, proc.stdout
    # the file's window that reads the weight, run against the original's nodes, differs
    assert proc.returncode == 1 and "rewritten at conv" in proc.stderr, proc.stderr


def _as_literal(folded, bad, name: str, change) -> None:
    """``folded`` with initializer ``name`` (1-D float) written as a ``Constant`` node's
    ``value_floats`` instead, its values changed by ``change``."""
    proto = onnx.load(folded)
    (init,) = [t for t in proto.graph.initializer if t.name == name]
    values = change(numpy_helper.to_array(init))
    proto.graph.initializer.remove(init)
    proto.graph.node.insert(0, helper.make_node("Constant", [], [name], name=f"{name}_literal",
                                                value_floats=values.tolist()))
    onnx.save(proto, bad)


def test_a_constant_written_as_a_literal_list_is_judged_as_one_in_value(folded, tmp_path):
    """The adversarial round of issue 82 (item 7): a copied-through weight written as
    ``Constant(value_floats=...)`` and moved 900 ulps (inside the outputs' tolerance) passed
    every check with a full verdict: only ``value`` was read as a Constant's tensor."""
    a, b = folded
    bad = tmp_path / "bad.onnx"
    _as_literal(b, bad, "b", lambda v: _ulps(v, 900))
    _fails_everywhere(a, bad, "b")


def _renamed(folded, bad, tags: dict[str, str]) -> None:
    """``folded`` with the folded ``Wt`` renamed (its reader rewired to the new name), one
    element moved 300 ulps, and ``tags`` written on it."""
    proto = onnx.load(folded)
    (init,) = [t for t in proto.graph.initializer if t.name == "Wt"]
    planted = numpy_helper.from_array(_ulps(numpy_helper.to_array(init), 300), "Wt_new")
    for key, value in tags.items():
        planted.metadata_props.add(key=key, value=value)
    init.CopyFrom(planted)
    for node in proto.graph.node:
        node.input[:] = ["Wt_new" if i == "Wt" else i for i in node.input]
    onnx.save(proto, bad)


@pytest.mark.parametrize("tag", ["none", "made_by", "rewired", "rewired+stands_for"])
def test_a_tag_on_a_renamed_float_tensor_never_loosens_its_verdict(folded, tmp_path, tag):
    """Issue 82 item 7: renamed and moved 300 ulps, the folded ``Wt`` is not verifiable
    without a tag (a full verdict is not given); a ``made_by`` or ``rewired`` tag made it a
    parameter of the validated windows that read it (a full verdict), and ``rewired`` hid a
    ``stands_for`` that compares it with the original's ``Wt``. Now a tag leaves it as
    strict as none, and ``stands_for`` is always compared."""
    tags = {"none": {}, "made_by": {provenance.MADE_BY: "merge_shared_input_matmuls"},
            "rewired": {provenance.REWIRED: "merge_transposes"},
            "rewired+stands_for": {provenance.REWIRED: "merge_transposes",
                                   provenance.STANDS_FOR: "Wt"}}[tag]
    a, b = folded
    bad = tmp_path / "bad.onnx"
    _renamed(b, bad, tags)
    if provenance.STANDS_FOR in tags:
        _fails_everywhere(a, bad, "Wt_new")
        return
    for window in (None, 1):
        result = onnxfold.compare(str(a), str(bad), n=1, window_bytes=window)
        (verdict,) = [t for t in result.folds.tensors if t.name == "Wt_new"]
        assert verdict.state == "not verifiable", result.summary()
        assert not result.ok or "not a full verification" in result.verdict(), result.summary()
    proc = run_cli("verify-folds", a, bad)
    assert proc.returncode == 1 or "not a full verification" in proc.stdout, proc.stdout


def test_a_fixed_dim_the_files_own_record_does_not_account_for_fails(tmp_path):
    """Issue 82 item 7: an output that fixes a dim the original leaves dynamic is compared
    where it fixes it; where its own record of the run says no --input-shape was given, the
    record makes the verdict stricter: the comparison fails naming the dim. Without a record
    (another tool's file) it is compared there, as before."""
    a, b, bad = tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path / "bad.onnx"
    _original(a)
    assert run_cli("optimize", a, "-o", b, "--input-shape", "x:2,8").returncode == 0
    assert run_cli("compare", a, b, "-n", "1").returncode == 0
    proto = onnx.load(b)
    (record,) = [p for p in proto.metadata_props if p.key == provenance.RUN]
    record.value = provenance.run_record("0.1.0", {})
    onnx.save(proto, bad)
    proc = run_cli("compare", a, bad, "-n", "1")
    assert proc.returncode == 1 and "its own record of the run that wrote it says no " \
        "--input-shape fixed them: n=2 of x (axis 0)" in proc.stdout, proc.stdout
    del proto.metadata_props[:]
    onnx.save(proto, bad)
    assert run_cli("compare", a, bad, "-n", "1").returncode == 0
