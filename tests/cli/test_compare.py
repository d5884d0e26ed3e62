"""``onnxfold compare`` and ``optimize --check``: real onnxruntime runs, no mocks."""

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.app.checked_save import save_checked
from tests.support.cli import assert_one_error_line, run_cli
from tests.support.models import MODELS, make_model, tensor, vinfo

TINY_BERT = os.path.join(MODELS, "tiny_bert_ts.onnx")


@pytest.fixture(scope="module")
def folded_bert(tmp_path_factory):
    """tiny BERT folded by onnxfold, and a copy with one folded weight nudged by 1e-3."""
    tmp = tmp_path_factory.mktemp("bert")
    folded, corrupted = str(tmp / "folded.onnx"), str(tmp / "corrupted.onnx")
    onnxfold.save_model(onnxfold.optimize(TINY_BERT).model, folded)
    original = {t.name for t in onnx.load(TINY_BERT).graph.initializer}
    proto = onnx.load(folded)
    new = [t for t in proto.graph.initializer if t.name not in original
           and t.data_type == TensorProto.FLOAT and len(t.dims) == 2]
    weight = max(new, key=lambda t: int(np.prod(t.dims)))
    arr = numpy_helper.to_array(weight).copy()
    # the last element: of V where Q, K and V are merged (a Q weight moves the output less)
    arr.flat[-1] += np.float32(1e-3)
    weight.CopyFrom(numpy_helper.from_array(arr, weight.name))
    onnx.save(proto, corrupted)
    return folded, corrupted


def test_identical_models_are_bitwise_equal():
    result = onnxfold.compare(TINY_BERT, TINY_BERT, n=2)
    assert result.ok and bool(result)
    [row] = result.rows
    assert row.name == "output" and row.bitwise_equal and row.mismatches == 0
    assert row.elements == 2 * 16 * 64 and row.shape_a == [1, 16, 64]
    json.dumps(result.to_dict())
    assert "all outputs within tolerance" in result.summary()


def test_folded_passes_and_corrupted_weight_fails(folded_bert, tmp_path):
    folded, corrupted = folded_bert
    assert onnxfold.compare(TINY_BERT, folded, n=2).ok

    result = onnxfold.compare(TINY_BERT, corrupted)
    # the output, and the corrupted weight (a fold) or the window of the file that reads it
    assert not result and result.failing[0] == "output" and len(result.failing) > 1 and all(
        f.startswith(("rewrite rewritten at ", "folded tensor ")) for f in result.failing[1:]), \
        result.failing
    assert result.rows[0].mismatches > 0 and not result.rows[0].bitwise_equal
    assert 1e-6 < result.rows[0].max_abs_diff < 1.0

    report = tmp_path / "r.json"
    proc = run_cli("compare", TINY_BERT, corrupted, "--json", str(report))
    assert proc.returncode == 1, proc.stderr
    assert "output" in proc.stderr and "NO" in proc.stdout and "Traceback" not in proc.stderr
    assert json.loads(report.read_text())["failing"] == result.failing


def test_failed_check_writes_nothing(folded_bert, tmp_path):
    """The refusal path of ``optimize --check``, driven by a really different model."""
    _, corrupted = folded_bert
    existing = tmp_path / "out.onnx"
    existing.write_bytes(b"user data")
    info, result = save_checked(onnxfold.load_model(corrupted), TINY_BERT, str(existing), n=1)
    assert info is None and not result.ok and result.model_b == str(existing)
    assert existing.read_bytes() == b"user data"
    assert os.listdir(tmp_path) == ["out.onnx"]  # no temporary files left behind


def test_optimize_check_passes_and_writes(tmp_path):
    out = tmp_path / "out.onnx"
    proc = run_cli("optimize", TINY_BERT, "-o", str(out), "--check", "2")
    assert proc.returncode == 0, proc.stderr
    assert "all outputs within tolerance" in proc.stdout and "2 input sets" in proc.stdout
    assert "wrote" in proc.stdout and str(out) in proc.stdout
    assert sorted(os.listdir(tmp_path)) == ["out.onnx"]
    assert onnxfold.compare(TINY_BERT, str(out)).ok


def _symbolic_model():
    """y = x @ Transpose(wt) + b with x of shape [batch, 8]: folding removes the Transpose."""
    rng = np.random.default_rng(0)
    return make_model(
        [helper.make_node("Transpose", ["wt"], ["w"]),
         helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
        [vinfo("x", shape=["batch", 8])], [vinfo("y", shape=["batch", 4])],
        [tensor("wt", rng.standard_normal((4, 8)).astype(np.float32)),
         tensor("b", rng.standard_normal(4).astype(np.float32))])


@pytest.fixture
def symbolic_pair(tmp_path):
    a = str(tmp_path / "a.onnx")
    onnx.save(_symbolic_model(), a)
    b = str(tmp_path / "b.onnx")
    onnxfold.save_model(onnxfold.optimize(a).model, b)
    assert not any(n.op_type == "Transpose" for n in onnx.load(b).graph.node)
    return a, b


def test_symbolic_dims_bound_with_dim(symbolic_pair, tmp_path):
    a, b = symbolic_pair
    report = tmp_path / "r.json"
    proc = run_cli("compare", a, b, "--dim", "batch=3", "-n", "2", "--json", str(report))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert data["outputs"][0]["shape"] == [3, 4] and data["inputs"][0]["shape"] == [3, 8]
    assert data["dims"] == {"batch": 3} and data["defaulted_dims"] == []

    result = onnxfold.compare(a, b)  # unbound: 1, and the result says so
    assert result.ok and result.rows[0].shape_a == [1, 4]
    assert result.defaulted_dims == ["batch"]
    assert "dims guessed (--dim NAME=VALUE sets one): batch=1" in result.summary()


def test_inputs_npz_and_nan_in_the_same_place(symbolic_pair, tmp_path):
    a, b = symbolic_pair
    x = np.random.default_rng(1).standard_normal((5, 8))  # float64: cast to the model's float32
    x[2, 3] = np.nan
    npz = tmp_path / "inputs.npz"
    np.savez(npz, x=x)
    result = onnxfold.compare(a, b, inputs=str(npz), n=2)
    assert result.ok and result.dims == {"batch": 5}
    assert result.rows[0].shape_a == [5, 4] and result.inputs[0].source == "from --inputs"
    with pytest.raises(onnxfold.InputError, match="not an input"):
        onnxfold.compare(a, b, inputs={"nope": x})


def test_integer_input_heuristics():
    """A model echoing its int inputs vs one returning the expected constants."""
    names = ["input_ids", "attention_mask", "token_type_ids", "position_ids", "ids"]
    shape = [2, 50]
    inputs = [vinfo(n, TensorProto.INT64, shape) for n in names]
    echo = [helper.make_node("Identity", [n], [f"{n}_out"]) for n in names[:4]]
    echo += [helper.make_node("ReduceMin", ["ids"], ["lo"], keepdims=0),
             helper.make_node("ReduceMax", ["ids"], ["hi"], keepdims=0),
             helper.make_node("Constant", [], ["zero"], value=tensor("z", np.int64(0))),
             helper.make_node("Constant", [], ["top"], value=tensor("t", np.int64(1000))),
             helper.make_node("GreaterOrEqual", ["lo", "zero"], ["ge"]),
             helper.make_node("Less", ["hi", "top"], ["lt"]),
             helper.make_node("And", ["ge", "lt"], ["ids_out"])]
    outputs = [vinfo(f"{n}_out", TensorProto.INT64, shape) for n in names[:4]]
    outputs.append(vinfo("ids_out", TensorProto.BOOL, []))
    a = make_model(echo, inputs, outputs)
    mask = np.ones(shape)
    mask[1, -1] = 0  # the second row padded by one
    expected = {"input_ids": np.full(shape, 7), "attention_mask": mask,
                "token_type_ids": np.zeros(shape),
                "position_ids": np.broadcast_to(np.arange(50), shape)}
    consts = [helper.make_node("Constant", [], [f"{n}_out"],
                               value=tensor(n, np.asarray(v, np.int64)))
              for n, v in expected.items()]
    consts.append(helper.make_node("Constant", [], ["ids_out"], value=tensor("t", np.bool_(1))))
    b = make_model(consts, inputs, outputs)
    result = onnxfold.compare(a, b, n=3, int_ranges={"input_ids": (7, 8)}, verify=False)
    assert result.ok, result.summary()
    # B's Constant nodes bake what A reads from its inputs: the fold verification says so
    baked = onnxfold.compare(a, b, n=3, int_ranges={"input_ids": (7, 8)})
    assert not baked.ok and set(baked.folds.failing) == {f"{n}_out" for n in names}


def test_mismatched_input_names(symbolic_pair, tmp_path):
    a, _ = symbolic_pair
    proto = _symbolic_model()
    proto.graph.input[0].name = "z"
    proto.graph.node[1].input[0] = "z"
    other = tmp_path / "other.onnx"
    onnx.save(proto, str(other))
    assert_one_error_line(run_cli("compare", a, str(other)), "inputs differ",
                       "only in A: x", "only in B: z")


@pytest.mark.parametrize("args, fragment", [
    (["--dim", "batch"], "NAME=VALUE"),
    (["--dim", "seq=2"], "no input"),
    (["--int-range", "x=5"], "NAME=LO:HI"),
])
def test_bad_options(symbolic_pair, args, fragment):
    a, b = symbolic_pair
    assert_one_error_line(run_cli("compare", a, b, *args), fragment)


def test_missing_file(tmp_path):
    assert_one_error_line(run_cli("compare", TINY_BERT, str(tmp_path / "nope.onnx")),
                       "no such file")


def test_model_onnxruntime_cannot_run(tmp_path):
    proto = make_model([helper.make_node("Foo", ["x"], ["y"], domain="my.ops")],
                       [vinfo("x", shape=[2])], [vinfo("y", shape=[2])])
    proto.opset_import.append(helper.make_opsetid("my.ops", 1))
    path = tmp_path / "custom.onnx"
    onnx.save(proto, str(path))
    assert_one_error_line(run_cli("compare", str(path), str(path)), "onnxruntime cannot load")


def test_the_failure_line_names_three_and_counts_the_rest(tmp_path):
    """Seven outputs off: the one stderr line names three and says how many more; the summary
    on stdout lists every one."""
    names = [f"y{k}" for k in range(7)]
    x = [vinfo("x", TensorProto.FLOAT, [2])]
    outs = [vinfo(n, TensorProto.FLOAT, [2]) for n in names]
    a = make_model([helper.make_node("Identity", ["x"], [n]) for n in names], x, outs)
    b = make_model([helper.make_node("Neg", ["x"], [n]) for n in names], x, outs)
    pa, pb = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(a, pa)
    onnx.save(b, pb)
    done = run_cli("compare", pa, pb, "-n", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    # the seven outputs, then the seven windows of the file that differ (each Neg)
    assert line.endswith("y0, y1, y2 and 11 more"), line
    assert all(n in done.stdout for n in names), done.stdout
