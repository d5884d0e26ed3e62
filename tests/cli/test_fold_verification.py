"""Fold verification: every folded tensor re-derived from the original in onnxruntime, without
inputs; planted wrong folds (a few ulps, a Reshape target off by one) fail it, and with it
``compare`` and ``optimize --check``. Real onnxruntime, real models."""

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.check.folds.verification import BITWISE, DIFFERS, UNVERIFIABLE, verify_folds
from onnxfold.pipeline.report_schema import validate
from tests.support import breadth
from tests.support.cli import assert_one_error_line, run_cli
from tests.support.models import MODELS, make_model, tensor, vinfo

MODELS_FOLDED = [os.path.join(MODELS, name) for name in ("tiny_bert_ts.onnx",
                                                        "tiny_gpt2_ts.onnx")]


# CI folds the BERT; the GPT-2 runs the same checks in the breadth tier (51 s in CI)
@pytest.fixture(scope="module", params=breadth.over(MODELS_FOLDED, lambda p: "bert" in p),
                ids=os.path.basename)
def folded(request, tmp_path_factory):
    """(original, its folded copy written by onnxfold)."""
    path = str(tmp_path_factory.mktemp("folded") / "folded.onnx")
    onnxfold.save_model(onnxfold.optimize(request.param).model, path)
    return request.param, path


def _plant(original: str, folded_path: str, out: str, pick, change) -> str:
    """A copy of ``folded_path`` whose initializer ``pick(verification)`` names is
    ``change``d in place; returns its name."""
    proto = onnx.load(folded_path)
    name = pick(verify_folds(original, folded_path))
    init = next(t for t in proto.graph.initializer if t.name == name)
    arr = numpy_helper.to_array(init).copy()
    change(arr)
    new = numpy_helper.from_array(arr, init.name)
    new.metadata_props.extend(init.metadata_props)
    init.CopyFrom(new)
    onnx.save(proto, out)
    return name


def test_every_fold_of_a_real_export_verifies(folded):
    original, path = folded
    result = verify_folds(original, path)
    assert result.ok, result.summary()
    assert result.count(BITWISE) >= 5
    for verdict in result.tensors:  # every tensor said what it is, and the unverified why
        assert verdict.state != DIFFERS
        assert verdict.state == BITWISE or verdict.reason or verdict.max_ulps is not None


def _nudge_four_ulps(arr: np.ndarray) -> None:
    flat = arr.reshape(-1)
    for _ in range(4):
        flat[0] = np.nextafter(flat[0], np.float32(np.inf))


def _reshape_target_off_by_one(arr: np.ndarray) -> None:
    arr[int(np.argmax(arr > 1))] += 1


def _float_verified(result) -> str:
    return next(t.name for t in result.tensors if t.state == BITWISE and t.dtype == "float")


def _reshape_target(folded_path: str):
    targets = {n.input[1] for n in onnx.load(folded_path).graph.node if n.op_type == "Reshape"}

    def pick(result) -> str:
        return next(t.name for t in result.tensors if t.state == BITWISE and t.name in targets
                    and t.dtype == "int64")
    return pick


@pytest.mark.parametrize("mutation", ["four_ulps", "reshape_target"])
def test_a_planted_wrong_fold_fails_verify_compare_and_check(folded, mutation, tmp_path):
    original, path = folded
    planted = str(tmp_path / "planted.onnx")
    if mutation == "four_ulps":
        name = _plant(original, path, planted, _float_verified, _nudge_four_ulps)
    else:
        name = _plant(original, path, planted, _reshape_target(path),
                      _reshape_target_off_by_one)
    result = verify_folds(original, planted)
    assert not result.ok and result.failing == [name]
    proc = run_cli("verify-folds", original, planted, "--json", str(tmp_path / "v.json"))
    assert proc.returncode == 1 and name in proc.stderr
    report = json.loads((tmp_path / "v.json").read_text())
    assert report["counts"]["differs"] == 1 and not report["ok"]
    proc = run_cli("compare", original, planted)
    assert proc.returncode == 1 and f"folded tensor {name}" in proc.stderr, proc.stdout


def test_check_reports_the_verification_in_json_and_html(tmp_path):
    original = MODELS_FOLDED[0]
    out, report, html = tmp_path / "o.onnx", tmp_path / "r.json", tmp_path / "r.html"
    proc = run_cli("optimize", original, "-o", str(out), "--check", "1", "--json", str(report),
                   "--report", str(html))
    assert proc.returncode == 0, proc.stderr
    assert "fold verification:" in proc.stdout and " 0 differ" in proc.stdout
    data = json.loads(report.read_text())
    assert validate(data) == []  # the published schema (docs/report-json.md)
    check = data["check"]
    assert check["state"] == "passed" and check["level"] == "all"
    assert check["folds"]["counts"]["bitwise"] >= 5 and check["folds"]["ok"]
    assert [i["name"] for i in check["inputs"]] == ["input_ids", "attention_mask"]
    page = html.read_text()
    assert "Fold verification" in page and "What was fed" in page


def test_compare_verifies_unless_told_and_a_model_without_provenance_says_so(folded, tmp_path):
    """Every initializer the original does not hold as it is gets a verdict, onnxfold's
    provenance or not: one with a name the original does not have is not verifiable, said."""
    original, path = folded
    same = onnxfold.compare(original, original)
    assert same.folds is not None and same.folds.tensors == [] and same.folds.complete
    assert onnxfold.compare(original, path).folds is not None
    assert onnxfold.compare(original, path, verify=False).folds is None
    proto = onnx.load(path)
    stripped = next(t for t in proto.graph.initializer if t.metadata_props)
    del stripped.metadata_props[:]
    old_name, stripped.name = stripped.name, stripped.name + "_renamed"
    for node in proto.graph.node:
        node.input[:] = [stripped.name if i == old_name else i for i in node.input]
    renamed = tmp_path / "renamed.onnx"
    onnx.save(proto, renamed)
    result = onnxfold.compare(original, str(renamed), n=2)
    verdict = next(t for t in result.folds.tensors if t.name == stripped.name)
    assert verdict.state == "not verifiable" and "no onnxfold provenance" in verdict.reason
    assert result.ok and not result.folds.complete
    assert "not a full verification" in result.summary().splitlines()[-1]


def test_a_fold_of_a_static_input_shape_verifies_and_a_dynamic_one_says_why(tmp_path):
    """Shape(x) of a static input re-derives on zeros of that shape; the static tail of a
    dynamic input's shape needs a binding (the comparison's feeds give one), else says why."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["sf", "two"], ["m"]),
             helper.make_node("Shape", ["y"], ["t"], start=1),
             helper.make_node("Cast", ["t"], ["tf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["tf", "two"], ["m2"]),
             helper.make_node("Add", ["y", "m"], ["a"]),
             helper.make_node("Add", ["a", "m2"], ["out"])]
    model = make_model(nodes, [vinfo("x", TensorProto.FLOAT, [2, 3]),
                               vinfo("y", TensorProto.FLOAT, ["n", 2])],
                       [vinfo("out", TensorProto.FLOAT, ["n", 2])],
                       [tensor("two", np.array([2.0], np.float32))])
    original, folded = tmp_path / "m.onnx", tmp_path / "f.onnx"
    onnx.save(model, original)
    onnxfold.save_model(onnxfold.optimize(str(original)).model, str(folded))
    unbound = {t.name: t for t in verify_folds(str(original), str(folded)).tensors}
    assert unbound["m"].state == BITWISE and unbound["m"].dims == "static"
    # Shape(y)[1:] reads y's dynamic dim n: shown constant over it (the symbolic dims)
    assert unbound["m2"].state == BITWISE and unbound["m2"].dims == "proved"
    bound = verify_folds(str(original), str(folded), bindings=[{"y": (5, 2)}, {"y": (1, 2)}])
    assert {t.name: t.state for t in bound.tensors} == {"m": BITWISE, "m2": BITWISE}
    assert {t.name: t.bindings for t in bound.tensors} == {"m": 1, "m2": 2}


def test_a_check_that_cannot_run_keeps_its_products(tmp_path):
    """The reference cannot run any guessed size (a Reshape to 7x3 of a dynamic vector): exit 2
    in one line, nothing written, yet the table is printed and --json/--report written."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]),
             helper.make_node("Add", ["r", "c"], ["y"])]
    model = make_model(nodes, [vinfo("x", TensorProto.FLOAT, ["N"])],
                       [vinfo("y", TensorProto.FLOAT, [7, 3])],
                       [tensor("s", np.array([7, 3], np.int64)),
                        tensor("c", np.ones((7, 3), np.float32))])
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(model, path)
    report, html = tmp_path / "r.json", tmp_path / "r.html"
    proc = run_cli("optimize", path, "-o", out, "--check", "1", "--json", report,
                   "--report", html)
    assert_one_error_line(proc, "the check could not run", "Reshape")
    assert proc.returncode == 2 and not out.exists()
    assert "nodes" in proc.stdout and "op" in proc.stdout  # the table was printed
    data = json.loads(report.read_text())
    assert validate(data) == []
    check = data["check"]
    assert check["state"] == "could not run" and "Reshape" in check["reason"]
    assert "could not run" in html.read_text()


def _conv_batchnorm(path) -> None:
    """x -> Conv -> BatchNormalization: the batch norm folds into the Conv's weight and bias
    (tensors a rewrite makes: no original value has their names)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"])]
    inits = [tensor("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
             *(tensor(n, rng.standard_normal(8).astype(np.float32)) for n in "gbm"),
             tensor("v", rng.uniform(0.5, 2, 8).astype(np.float32))]
    onnx.save(make_model(nodes, [vinfo("x", TensorProto.FLOAT, ["n", 3, 16, 16])],
                         [vinfo("y", TensorProto.FLOAT, ["n", 8, 16, 16])], inits), path)


def test_tensors_a_rewrite_made_verify_from_their_saved_recipes(tmp_path):
    """The fused Conv weight and bias are re-derived from the recipe saved on each tensor:
    optimize --check (its own run's record, its rewrites validated beside) calls them bitwise;
    verify-folds in another process re-runs the recipes the file carries, and since a file's
    own record proves nothing, calls a match not verifiable (and would call a mismatch a
    difference)."""
    original, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    _conv_batchnorm(original)
    proc = run_cli("optimize", original, "-o", out, "--check", "1", "--json",
                   tmp_path / "r.json")
    assert proc.returncode == 0, proc.stderr
    folds = json.loads((tmp_path / "r.json").read_text())["check"]["folds"]
    by_recipe = [t for t in folds["tensors"] if t["via"] == "recipe"]
    assert len(by_recipe) == 2 and all(t["state"] == BITWISE for t in by_recipe), folds
    alone = verify_folds(str(original), str(out))
    assert alone.ok and [t.via for t in alone.tensors] == ["recipe", "recipe"]
    assert {t.state for t in alone.tensors} == {UNVERIFIABLE} and not alone.complete, \
        alone.summary()
    assert "only optimize --check validates the rewrite" in alone.summary()


def test_a_wrong_rewrite_made_tensor_fails_the_check_and_nothing_is_written(tmp_path):
    """The fused weight moved by 4 ulps after the fold: the recipe's bits differ."""
    import onnx_ir as ir

    from onnxfold.app.checked_save import save_checked

    original, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    _conv_batchnorm(original)
    result = onnxfold.optimize(str(original))
    (name, value), = [(n, v) for n, v in result.model.graph.initializers.items()
                      if v.const_value is not None and len(v.const_value.shape) == 4]
    arr = value.const_value.numpy().copy()
    _nudge_four_ulps(arr)
    tensor_ = ir.tensor(arr, name=name)
    tensor_.metadata_props.update(value.const_value.metadata_props)
    value.const_value = tensor_
    info, check = save_checked(result.model, str(original), str(out), n=1)
    assert info is None and not out.exists()
    assert not check.ok and check.failing == [f"folded tensor {name}"], check.summary()
    assert check.rows and all(row.ok for row in check.rows)  # the outputs alone would pass


def _matmul_relu(path, w):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    onnx.save(make_model(nodes, [vinfo("x", shape=["n", 8])], [vinfo("z", shape=["n", 8])],
                         [tensor("w", w)]), str(path))
    return str(path)


@pytest.mark.parametrize("command", ["compare", "verify-folds"])
def test_an_edited_weight_is_no_folded_tensor_and_a_failure_is_said_once(tmp_path, command):
    """``compare`` of a model with one weight edited (another tool's output, no onnxfold
    record) counted the weight among the "initializers re-derived" and printed its verdict
    twice, on stdout and as the error line."""
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    edited = w.copy()
    edited[0, 0] += 1
    a = _matmul_relu(tmp_path / "a.onnx", w)
    b = _matmul_relu(tmp_path / "b.onnx", edited)
    page = tmp_path / "page.html"
    proc = run_cli(command, a, b, "--report", page)
    if command == "compare":
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "outside tolerance: z" not in proc.stdout  # the error line says it
        assert proc.stderr.strip() == "onnxfold: outside tolerance: z"
    else:  # nothing folded differs: the verdict says what it could not verify, and why
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.splitlines()[-1] == (
            "folds: 0 verified for every input, 1 weight of the original with other values "
            "(not folds) (not a full verification: see above)")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("fold verification:"))
    assert line.startswith("fold verification: 0 initializers re-derived"), line
    assert "1 more is a weight of the original under its name with other values" in line
    assert "not verifiable" not in line
    html = page.read_text()  # the page: no green pass, and its reasons below, not "above"
    assert "see above" not in html and "0 folded tensors judged" in html
    assert "1 weight of the original with other values under the same name" in html
    if command == "verify-folds":
        assert '<p class="warn">folds: 0 verified' in html and "see below" in html
