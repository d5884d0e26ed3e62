"""Every option of ``optimize`` is judged before anything is written, whatever is printed.

``--dim``, ``--int-range`` and ``--custom-op-library`` (onnxsim's ``--custom-lib``) were first
parsed by the signature, once the output was written: a run refused them in one line with the
output already replaced, and with ``-q`` (no signature) exited 0 without a word. A ``--dim``
naming no dim of the model passed without ``--check`` and failed with it. Now each is judged
before the output is claimed (what names a part of the model, as the model is read, before any
pass): one line, exit 2, the existing output untouched, no temporary file left, on every entry
point (``optimize -o``, ``-q``, onnxsim's ``IN OUT``, a batch, a shard) and in
``onnxfold.simplify``.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.errors import InputError
from tests.support.cli import assert_one_error_line, run_cli
from tests.support.files import assert_unchanged, snapshot

OLD = b"OLD"

# (flags, what the line says)
BAD = [
    (["--dim", "batch=abc"], "--dim batch: 'abc': not an integer"),
    (["--dim", "batch=0"], "--dim batch: '0': must be between 1 and"),
    (["--dim", "batch=10^20"], "--dim batch: '10^20': not an integer"),
    (["--dim", "batch=100000000000000000000"], "must be between 1 and"),
    (["--int-range", "x=5:1"], "--int-range x=5:1: expected NAME=LO:HI"),
    (["--custom-op-library", "missing.so"], "custom-op library missing.so: no such file"),
    (["--custom-lib", "missing.so"], "custom-op library missing.so: no such file"),
    (["--dim", "nosuch=3"], "--dim nosuch: no input of"),
    (["--dim", "nosuch=3", "--check", "1"], "--dim nosuch: no input of"),
    (["--int-range", "x=0:5"], "--int-range x: the input is float, not an integer"),
    (["--int-range", "z=0:5"], "--int-range z: not an input of"),
]


def _model(path) -> str:
    """y = x @ Transpose(W), x float [batch, 4]: the Transpose folds."""
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "w")
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
         helper.make_node("MatMul", ["x", "wt"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    return str(path)


def _refused_untouched(tmp_path, args, says) -> None:
    """``args`` run in ``tmp_path``: one error line holding ``says``, nothing changed there."""
    before = snapshot(tmp_path)
    done = run_cli(*args, cwd=tmp_path)
    assert_one_error_line(done, says)
    assert_unchanged(before, snapshot(tmp_path))


@pytest.mark.parametrize("quiet", [False, True], ids=["shown", "quiet"])
@pytest.mark.parametrize(("flags", "says"), BAD, ids=[" ".join(f) for f, _ in BAD])
def test_a_refused_option_leaves_the_existing_output(tmp_path, flags, says, quiet):
    src = _model(tmp_path / "m.onnx")
    (tmp_path / "keep.onnx").write_bytes(OLD)
    _refused_untouched(tmp_path, ["optimize", src, "-o", "keep.onnx", *flags,
                                  *(["-q"] if quiet else [])], says)


@pytest.mark.parametrize("form", ["bare", "batch", "shard"])
@pytest.mark.parametrize(("flags", "says"), [BAD[0], BAD[6], BAD[7]],
                         ids=["value", "custom-lib", "name"])
def test_every_entry_point_judges_first(tmp_path, form, flags, says):
    """onnxsim's ``IN OUT`` (a new output: not made), a batch into a directory holding an
    old output, one shard of it (the directory of outputs not made where it is missing)."""
    src = _model(tmp_path / "m.onnx")
    if form == "bare":
        args = [src, "new.onnx", *flags]
    else:
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "m.onnx").write_bytes(OLD)
        (tmp_path / "n.onnx").write_bytes((tmp_path / "m.onnx").read_bytes())
        args = ["optimize", src, "n.onnx", "-o", "out/", *flags,
                *(["--shard", "0/1"] if form == "shard" else [])]
    if says.startswith("--dim nosuch"):  # judged as each model is read
        before = snapshot(tmp_path)
        done = run_cli(*args, cwd=tmp_path)
        lines = done.stderr.splitlines()
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        if form == "bare":  # one line: how IN OUT was read is said once the model is written
            assert len(lines) == 1, done.stderr
            assert lines[0].startswith("onnxfold: error: " + says), done.stderr
        else:  # each model's line
            assert done.stderr.count("onnxfold: error: ") == 2, done.stderr
            assert done.stderr.count(says) == 2, done.stderr
        assert_unchanged(before, snapshot(tmp_path))
        return
    _refused_untouched(tmp_path, args, says)


@pytest.mark.parametrize(("keywords", "says"), [
    ({"dims": {"batch": 0}}, "dims[batch]"),
    ({"int_ranges": {"x": (5, 1)}}, "int_ranges[x]"),
    ({"custom_op_libraries": ["missing.so"]}, "custom-op library missing.so: no such file"),
    ({"dims": {"nosuch": 3}}, "dims[nosuch]: no input of the model given"),
])
def test_simplify_judges_its_check_before_folding(tmp_path, keywords, says):
    """The model given as an ``ir.Model``, which the fold changes in place: refused before
    any pass, it is as it was."""
    model = ir.load(_model(tmp_path / "m.onnx"))
    with pytest.raises(InputError, match=r"^" + re.escape(says)):
        onnxfold.simplify(model, check_n=1, **keywords)
    assert [n.op_type for n in model.graph] == ["Transpose", "MatMul"]
