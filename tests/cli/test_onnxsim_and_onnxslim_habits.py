"""What onnxsim's and onnxslim's users type works the first time: ``onnxfold IN OUT`` runs
``optimize`` (said in one stderr line), their flags of the same meaning are aliases of
onnxfold's (``--overwrite-input-shape``, ``--test-input-shape`` as the check's dims,
``--skip-optimization NAME`` as ``--disable-rule``, ``--no-large-tensor`` as ``--max-tensor``,
...), the others are refused in one line naming the onnxfold flag that does it; ``optimize
--help`` lists the common flags first, in groups."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.app.peer_flags import REFUSED
from tests.support.cli import assert_no_traceback, assert_one_error_line, run_cli


def _model(path, batch: str = "n") -> str:
    """y = x @ Transpose(W), x [batch, 4]: the Transpose folds; batch is dynamic (named, or
    anonymous for "")."""
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "w")
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
         helper.make_node("MatMul", ["x", "wt"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch or None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch or None, 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    return str(path)


def test_the_bare_form_runs_optimize_and_says_so_once(tmp_path):
    src, out = _model(tmp_path / "m.onnx"), tmp_path / "out.onnx"
    proc = run_cli(src, out, "--overwrite-input-shape", "x:2,4", "--skip-fuse-bn",
                   "--no-large-tensor", "--save-as-external-data", "--json", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"onnxfold: running onnxfold optimize {src} -o {out} (onnxsim's IN OUT: the second "
        "path is the output)"]
    written = onnx.load(str(out), load_external_data=False)
    assert [d.dim_value for d in written.graph.input[0].type.tensor_type.shape.dim] == [2, 4]
    # --save-as-external-data is --external-data yes (options, below); no data file is written
    # that nothing reads, and this model has only small weights
    options = json.loads((tmp_path / "r.json").read_text())["options"]
    assert options["input_shapes"] == ["x:2,4"] and options["max_tensor_bytes"] == 1024
    assert options["disabled_rules"] == ["fuse_batch_norm_into_conv"]
    assert options["external_data"] == "yes"


def test_a_dry_run_and_a_mistyped_command(tmp_path):
    src = _model(tmp_path / "m.onnx")
    proc = run_cli(src)
    assert proc.returncode == 0 and proc.stderr == \
        f"onnxfold: running onnxfold optimize {src}\n"
    assert_one_error_line(run_cli("optimise", src), "invalid choice: 'optimise'")


def test_the_check_runs_at_the_test_input_shape_and_its_tolerances(tmp_path):
    src = _model(tmp_path / "m.onnx")
    proc = run_cli("optimize", src, "--test-input-shape", "x:3,4", "--check", "1",
                   "--check-rtol", "0.01", "--model-check", "--skip-optimization",
                   "fuse_consecutive_transposes", "--json", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    check = report["check"]
    assert check["bindings"][0] == {"n": 3} and check["rtol"] == 0.01 and check["n"] == 1
    assert report["options"]["disabled_rules"] == ["merge_transposes"]  # onnxsim's pass name
    anonymous = _model(tmp_path / "a.onnx", batch="")  # the check names its dim x[0]
    proc = run_cli("optimize", anonymous, "--test-input-shape", "x:5,4", "--check", "1",
                   "--json", tmp_path / "a.json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "a.json").read_text())["check"]["bindings"][0] == {"x[0]": 5}


@pytest.mark.parametrize(("args", "says"), [
    (["--test-input-shape", "x:3,5", "--check", "1"],
     "--test-input-shape x: dim 1 is 4 in the model, not 5"),
    (["--test-input-shape", "z:3,4", "--check", "1"],
     "--test-input-shape z: no such input (inputs: x)"),
    (["--test-input-shape", "x:3,4"], "give --check N too"),
    (["--model-check-inputs", "x:data.npy"], "--inputs FILE.npz"),
    (["--skip-optimization"], "--disable-rule NAME for each"),
    (["--skip-constant-folding"], "is onnxsim's: folding constants is what onnxfold does"),
    (["--inspect"], "is onnxslim's: onnxfold inspect MODEL"),
])
def test_what_has_no_same_meaning_is_refused_naming_the_flag(tmp_path, args, says):
    done = run_cli("optimize", _model(tmp_path / "m.onnx"), *args)
    assert_one_error_line(done, says)


def test_every_refusal_names_an_onnxfold_flag_or_command():
    for flag, (whose, says) in REFUSED.items():
        assert whose in ("onnxsim", "onnxslim"), flag
        assert "--" in says or "onnxfold " in says or "no flag" in says, flag


def test_help_is_grouped_with_the_common_flags_first():
    proc = run_cli("optimize", "--help")
    assert_no_traceback(proc)
    headings = [line for line in proc.stdout.splitlines() if line and not line[0].isspace()
                and line.endswith(":")]
    assert headings[:4] == ["positional arguments:", "options:", "common:",
                            "the check (--check N):"]
    assert headings[-1].startswith("onnxsim's and onnxslim's flags")
    common = proc.stdout.split("common:")[1].split("the check (--check N):")[0]
    for flag in ("--output", "--check N", "--input-shape", "--report", "--keep-metadata"):
        assert flag in common


@pytest.mark.parametrize(("args", "says"), [
    (["--test-input-shape", "x:3,4", "--dim", "n=4"],
     "--dim n=4: --test-input-shape gives n 3; give one"),
    (["--test-input-shape", "x:3,4", "--overwrite-input-shape", "x:2,4"],
     "--test-input-shape gives n 3: --input-shape fixes it at 2"),
    (["--dim", "n=3", "--overwrite-input-shape", "n=2"], "--dim n=3: --input-shape fixes n at 2"),
])
def test_flags_that_bind_a_dim_twice_are_refused_naming_both(tmp_path, args, says):
    """The check ran at --dim's size over --test-input-shape's, silently; a conflict with
    --overwrite-input-shape was said as "--dim n=3", a flag never given."""
    done = run_cli("optimize", _model(tmp_path / "m.onnx"), "-o", tmp_path / "o.onnx",
                   "--check", "1", *args)
    assert_one_error_line(done, says)
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize(("args", "sets"), [
    (["--model-check"], 1), (["--check", "3", "--model-check"], 3),
    (["--model-check", "--check", "2"], 2)])
def test_model_check_runs_the_sets_check_asks_for(tmp_path, args, sets):
    """onnxslim's --model-check with --check N ran 1 input set, whichever came last."""
    proc = run_cli("optimize", _model(tmp_path / "m.onnx"), *args, "--json",
                   tmp_path / "r.json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["check"]["n"] == sets


def test_an_input_named_with_a_slash_takes_a_test_shape(tmp_path):
    """``input/ids:3,4`` was refused as onnxslim's array path; a path is what follows the
    colon. Two such shapes after one flag are two shapes."""
    path = tmp_path / "m.onnx"
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["input/ids", "input/mask"], ["s"]),
         helper.make_node("MatMul", ["s", "w"], ["y"])], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", 4])
         for n in ("input/ids", "input/mask")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    for shapes in (["input/ids:3,4"], ["input/ids:3,4", "input/mask:3,4"]):
        proc = run_cli("optimize", path, "--check", "1", "--test-input-shape", *shapes,
                       "--json", tmp_path / "r.json")
        assert proc.returncode == 0, proc.stderr
        check = json.loads((tmp_path / "r.json").read_text())["check"]
        assert check["bindings"][0] == {"n": 3}
    done = run_cli("optimize", path, "--check", "1", "--test-input-shape", "input/ids:d/a.npy")
    assert_one_error_line(done, "--inputs FILE.npz")


def test_a_bare_shape_is_the_one_inputs(tmp_path):
    """Issue 65: onnxsim's ``--overwrite-input-shape 1,3,224,224`` on a one-input model (and
    ``--test-input-shape`` alike); a model with two inputs refuses it, naming them."""
    src, out = _model(tmp_path / "m.onnx"), tmp_path / "out.onnx"
    proc = run_cli(src, out, "--overwrite-input-shape", "2,4", "--test-input-shape", "2,4",
                   "--check", "1")
    assert proc.returncode == 0, proc.stderr
    model = onnx.load(str(out))
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [2, 4]
    two = tmp_path / "two.onnx"
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(two))
    refused = run_cli("optimize", two, "-o", tmp_path / "o2.onnx",
                      "--overwrite-input-shape", "2")
    assert_one_error_line(refused, "a shape without a name", "this one has 2 (a, b)",
                          "give NAME:2")
    assert not (tmp_path / "o2.onnx").exists()


def test_every_onnxsim_pass_name_is_skipped_or_said_to_have_no_counterpart(tmp_path):
    """Issue 65: onnxsim's own help example, ``--skip-optimization fuse_bn_into_conv
    fuse_pad_into_pool``, and every pass name of onnxoptimizer: an onnxfold rule disabled,
    or one line saying there is nothing to skip; a misspelt name is still refused."""
    from onnxfold.app.peer_flags import NO_COUNTERPART, ONNXSIM_PASSES

    src = _model(tmp_path / "m.onnx")
    proc = run_cli(src, tmp_path / "o.onnx", "--skip-optimization", "fuse_bn_into_conv",
                   "fuse_pad_into_pool")
    assert proc.returncode == 0, proc.stderr
    assert "fuse_pad_into_pool: onnxsim's pass; onnxfold has no such rewrite" in proc.stderr
    every = run_cli(src, "--skip-optimization", *ONNXSIM_PASSES, *NO_COUNTERPART)
    assert every.returncode == 0, every.stderr
    assert sum("onnxsim's pass" in line for line in every.stderr.splitlines()) >= \
        len(NO_COUNTERPART)
    typo = run_cli("optimize", src, "-o", tmp_path / "o3.onnx", "--skip-optimization",
                   "fuse_bn_into_conf")
    assert_one_error_line(typo, "fuse_bn_into_conf")


def test_a_bare_shape_in_python_and_its_words(tmp_path):
    """The adversarial round: ``simplify(m, input_shapes=[1, 3, 8, 8])`` raised AttributeError;
    a bare shape given twice said "--input-shape : given twice"; on a model with no input it
    asked for a name."""
    import onnxfold
    from onnxfold.errors import InputError

    src = _model(tmp_path / "m.onnx")
    for shape in ([2, 4], (2, 4)):
        model, ok = onnxfold.simplify(src, input_shapes=shape)
        assert ok and [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] \
            == [2, 4]
    twice = run_cli(src, tmp_path / "o.onnx", "--overwrite-input-shape", "2,4",
                    "--overwrite-input-shape", "3,4")
    assert "(the one input's, without a name): given twice" in twice.stderr, twice.stderr
    none = tmp_path / "none.onnx"
    graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("c", TensorProto.FLOAT,
                                                                            [1])],
                              [numpy_helper.from_array(np.ones(1, np.float32), "c")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(none))
    with pytest.raises(InputError, match="has no input a caller feeds"):
        onnxfold.simplify(str(none), input_shapes=[1])
