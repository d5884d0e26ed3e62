"""Values of map type (a ZipMap's sequence of maps, as scikit-learn classifiers converted by
skl2onnx output): onnx-ir cannot represent them, so the reader sets their declared types aside
and the writer gives them back. Such a model folds, its output declares the same types, and the
check compares the maps' values with their dtype's tolerance. Real onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import onnxfold
from tests.support.cli import assert_ok, assert_one_error_line, run_cli
from tests.support.models import tensor, vinfo

MAPS = helper.make_sequence_type_proto(helper.make_map_type_proto(
    TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, None)))


def _classifier(intercepts=(0.25, 0.5, -0.75)):
    """x [n, 4] * (half + half) -> LinearClassifier -> ZipMap: a label [n] and a sequence of
    maps {class: probability}."""
    nodes = [helper.make_node("Add", ["half", "half"], ["one"]),
             helper.make_node("Mul", ["x", "one"], ["xs"]),
             helper.make_node("LinearClassifier", ["xs"], ["label", "scores"],
                              domain="ai.onnx.ml", classlabels_ints=[0, 1, 2],
                              coefficients=list(np.linspace(-1, 1, 12)),
                              intercepts=list(intercepts), post_transform="LOGISTIC"),
             helper.make_node("ZipMap", ["scores"], ["probabilities"], domain="ai.onnx.ml",
                              classlabels_int64s=[0, 1, 2])]
    graph = helper.make_graph(
        nodes, "classifier", [vinfo("x", shape=["n", 4])],
        [vinfo("label", TensorProto.INT64, ["n"]),
         helper.make_value_info("probabilities", MAPS)],
        [tensor("half", np.full([4], 0.5, np.float32))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    return model


def _declared(path, name):
    graph = onnx.load(path).graph
    return next(v.type for v in [*graph.output, *graph.value_info] if v.name == name)


def test_a_zipmap_model_folds_and_checks(tmp_path):
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_classifier(), path)
    done = run_cli("optimize", path, "-o", out, "--check", "2")
    assert_ok(done)
    assert "output probabilities is a sequence of maps" in done.stdout
    assert "all outputs within tolerance" in done.stdout
    assert _declared(out, "probabilities") == MAPS
    assert not any(n.op_type == "Add" for n in onnx.load(out).graph.node)  # it folded
    x = {"x": np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)}
    want = ort.InferenceSession(str(path)).run(None, x)
    got = ort.InferenceSession(str(out)).run(None, x)
    assert np.array_equal(want[0], got[0]) and want[1] == got[1]


def test_the_callers_proto_keeps_its_map_types():
    proto = _classifier()
    before = proto.SerializeToString()
    result = onnxfold.optimize(proto)
    assert proto.SerializeToString() == before
    out = result.to_proto()
    assert next(v.type for v in out.graph.output if v.name == "probabilities") == MAPS


def test_maps_whose_values_differ_fail_the_comparison(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(_classifier(), a)
    onnx.save(_classifier(intercepts=(0.25, 0.5, -0.74)), b)
    done = run_cli("compare", a, b, "-n", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("probabilities"))
    assert row.split()[1] == "float64" and row.endswith("NO"), row


def test_a_zipmap_model_converts_to_another_opset(tmp_path):
    """onnx's converter writes the types it infers (maps too) into the model it returns: set
    aside again, and the written output declares its maps."""
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_classifier(), path)
    assert_ok(run_cli("optimize", path, "-o", out, "--target-opset", "18", "--check", "1"))
    assert _declared(out, "probabilities") == MAPS
    assert {o.domain: o.version for o in onnx.load(out).opset_import}[""] == 18


def test_a_map_input_folds_and_the_check_says_it_cannot_feed_it(tmp_path):
    """A graph input of map type: the fold keeps it, typed; the check cannot feed a map and
    says so in one line."""
    model = _classifier()
    model.graph.input.append(helper.make_value_info("table", MAPS))
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(model, path)
    assert_ok(run_cli("optimize", path, "-o", out))
    assert _declared_input(out, "table") == MAPS
    done = run_cli("compare", path, out, "-n", "1")
    assert_one_error_line(done, "table", "cannot feed")


def _declared_input(path, name):
    return next(v.type for v in onnx.load(path).graph.input if v.name == name)
