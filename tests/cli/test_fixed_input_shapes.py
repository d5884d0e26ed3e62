"""``--input-shape`` as users mean it: a shape fixes the dims it names in every input that
shares the name (and says so), several shapes follow one flag as in onnxsim, and the check
compares the original at the shapes fixed; a dim the optimized model fixes that nobody asked
to fix fails the check."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.check.compare import compare_models
from onnxfold.check.running.options import CompareOptions
from onnxfold.pipeline.evidence import RunEvidence
from tests.support.cli import run_cli
from tests.support.models import make_model, tensor, vinfo

I64, F32 = TensorProto.INT64, TensorProto.FLOAT


def _encoder(path) -> None:
    """ids and a mask, both ``[batch, seq]``: embeddings masked, their shape read back
    (``Shape`` of the embeddings feeds a Reshape: what a fixed shape lets fold)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gather", ["E", "input_ids"], ["e"]),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=F32),
             helper.make_node("Unsqueeze", ["m", "minus1"], ["m3"]),
             helper.make_node("Mul", ["e", "m3"], ["h"]),
             helper.make_node("Shape", ["h"], ["s"]),
             helper.make_node("Reshape", ["h", "s"], ["out"])]
    onnx.save(make_model(nodes, [vinfo("input_ids", I64, ["batch", "seq"]),
                                 vinfo("attention_mask", I64, ["batch", "seq"])],
                         [vinfo("out", F32, ["batch", "seq", 8])],
                         [tensor("E", rng.standard_normal((50, 8)).astype(np.float32)),
                          tensor("minus1", np.array([-1], np.int64))]), path)


def test_a_shape_fixes_the_dims_it_shares_by_name_and_says_so(tmp_path):
    model, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    _encoder(model)
    proc = run_cli("optimize", model, "-o", out, "--input-shape", "input_ids:1,128",
                   "--check", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("inputs       input_ids [1,128], attention_mask [1,128] (batch=1, seq=128 fixed "
            "on input_ids, attention_mask)") in proc.stdout
    written = onnx.load(out)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*written.graph.input, *written.graph.output]}
    assert shapes == {"input_ids": [1, 128], "attention_mask": [1, 128], "out": [1, 128, 8]}
    assert "--input-shape fixes dims the original leaves dynamic: batch=1" in proc.stdout
    assert "input input_ids: int64[1,128] random" in proc.stdout  # the check's feeds


def test_several_shapes_after_one_flag_as_onnxsim_takes_them(tmp_path):
    model, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    _encoder(model)
    proc = run_cli("optimize", model, "-o", out, "--input-shape", "input_ids:2,8",
                   "attention_mask:2,8", "--check", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "inputs       input_ids [2,8], attention_mask [2,8]" in proc.stdout
    assert "unrecognized arguments" not in proc.stderr


def test_a_dim_fixed_that_no_input_shape_fixed_fails_the_check(tmp_path):
    """A fold that wrote the batch of its inputs as 1 (dynamic axes must stay dynamic):
    ``compare`` alone fails it where the file's own record says no --input-shape was given
    (a record may make a verdict stricter), and compares at batch 1 and says so where the
    file carries no record (another tool's); the check of the run that was asked to fix
    nothing fails it."""
    model, folded = tmp_path / "m.onnx", tmp_path / "o.onnx"
    _encoder(model)
    onnxfold.optimize(str(model)).save(str(folded))
    proto = onnx.load(folded)
    for value in proto.graph.input:
        value.type.tensor_type.shape.dim[0].dim_value = 1  # batch baked
    onnx.save(proto, folded)
    recorded = onnxfold.compare(str(model), str(folded), n=2)
    assert not recorded.ok and "its own record of the run that wrote it says no " \
        "--input-shape fixed them: batch=1 of input_ids (axis 0)" in recorded.failure
    del proto.metadata_props[:]
    onnx.save(proto, folded)
    alone = onnxfold.compare(str(model), str(folded), n=2)
    assert alone.ok and any("the second model fixes dims" in n for n in alone.notes)
    checked = compare_models(str(model), str(folded), 2, CompareOptions(),
                             evidence=RunEvidence())
    assert not checked.ok and "no --input-shape fixed: batch=1 of input_ids (axis 0)" in \
        checked.failure, checked.summary()
    asked = compare_models(str(model), str(folded), 2, CompareOptions(),
                           evidence=RunEvidence(fixed={"input_ids": (0,),
                                                       "attention_mask": (0,)}))
    assert asked.ok, asked.summary()


def test_shapes_the_model_cannot_run_at_are_bad_input_not_a_bug(tmp_path):
    """A position table of 8 sliced to the sequence and expanded to [batch, seq]: at seq=16
    the original fails in onnxruntime, and the folded model (its shapes now static) is refused
    at load. That is --input-shape's fault, one line, exit 2 (it was an internal error: the
    README's own example on a tiny BERT whose table holds 64 positions)."""
    nodes = [helper.make_node("Shape", ["ids"], ["shape"]),
             helper.make_node("Slice", ["shape", "one", "two"], ["seq"]),
             helper.make_node("Slice", ["table", "zero", "seq", "one"], ["positions"]),
             helper.make_node("Expand", ["positions", "shape"], ["y"])]
    inits = [numpy_helper.from_array(np.arange(8, dtype=np.int64).reshape(1, 8), "table"),
             *(numpy_helper.from_array(np.array([v], np.int64), n)
               for n, v in (("zero", 0), ("one", 1), ("two", 2)))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "ids", TensorProto.INT64, ["batch", "seq"])], [helper.make_tensor_value_info(
            "y", TensorProto.INT64, ["batch", "seq"])], inits)
    model, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    proc = run_cli("optimize", model, "-o", out, "--input-shape", "ids:1,16")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("onnxfold: error: --input-shape ids:1,16: the model does not "
                                  "run at those shapes (the original fails there too"), proc.stderr
    assert not out.exists()
    assert run_cli("optimize", model, "-o", out, "--input-shape", "ids:1,8").returncode == 0


def test_one_input_given_two_shapes_is_refused(tmp_path):
    """The last one won, silently; a dim name given two values too."""
    src = tmp_path / "m.onnx"
    onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"])], [vinfo("x", shape=["n", 2])],
                         [vinfo("y", shape=["n", 2])]), str(src))
    for specs, says in ((["x:1,2", "x:3,2"], "x: given twice, as 1,2 and 3,2"),
                        (["n=1", "n=3"], "n: given twice, as 1 and 3")):
        flags = [flag for spec in specs for flag in ("--input-shape", spec)]
        proc = run_cli("optimize", src, "-o", tmp_path / "o.onnx", *flags)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
        with pytest.raises(onnxfold.InputError, match=rf"\[{says[0]}\]: {says[3:]}"):
            onnxfold.optimize(str(src), input_shapes=specs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    assert run_cli("optimize", src, "-q", "--input-shape", "x:1,2", "--input-shape",
                   "x:1,2").returncode == 0  # the same shape twice is one shape


def test_a_dim_name_with_a_terminal_escape_never_goes_into_the_model(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"])], [vinfo("x", shape=["n", 2])],
                         [vinfo("y", shape=["n", 2])]), str(src))
    proc = run_cli("optimize", src, "-o", tmp_path / "o.onnx", "--input-shape",
                   "x:b\x1b[31m,2")
    assert proc.returncode == 2 and "\\x1b[31m holds control or invisible" in proc.stderr, \
        proc.stderr
    assert "\x1b" not in proc.stderr and not (tmp_path / "o.onnx").exists()
