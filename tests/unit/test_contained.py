"""Contained steps: a rule or pass that raises is left out, the run goes on from the untouched
model, and the report says so; strict runs fail instead."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import onnxfold
from onnxfold.ir.provenance import RUN
from onnxfold.pipeline.options import FoldOptions
from tests.support.bugged_rules import broken, with_rule
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import run_ort


def _model():
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
             helper.make_node("Transpose", ["xt"], ["xtt"], perm=[1, 0]),
             helper.make_node("Add", ["xtt", "wt"], ["y"])]
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    return make_model(nodes, [vinfo("x", shape=[2, 3])], [vinfo("y", shape=[2, 3])],
                      [tensor("w", w)])


def test_a_failing_rule_is_skipped_and_the_run_succeeds(tmp_path, save):
    patched = with_rule(broken())
    path = save(_model())
    result = onnxfold.optimize(path, FoldOptions(), catalogue=patched)
    (step,) = result.report.skipped_steps
    assert step.startswith("broken_pattern: ValueError: a bug in a rule")
    assert step.endswith("please report")
    assert "skipped" in result.report.summary()
    assert result.report.pattern_hits.get("merge_transposes") == 1  # the rest still ran
    out = str(tmp_path / "out.onnx")
    onnxfold.save_model(result.model, out)
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(run_ort(_model(), {"x": x})[0], run_ort(out, {"x": x})[0])
    with pytest.raises(ValueError, match="a bug in a rule"):
        onnxfold.optimize(path, FoldOptions(strict=True), catalogue=patched)


def test_an_in_memory_model_is_restored_in_place(save):
    import onnx_ir as ir

    patched = with_rule(broken())
    model = ir.serde.deserialize_model(_model())
    result = onnxfold.optimize(model, FoldOptions(), catalogue=patched)
    assert result.model is model and result.report.skipped_steps
    assert [n.op_type for n in model.graph] == ["Add"]


def _model_with_function_and_metadata():
    """y = local.Twice(x) (a model-local function), with metadata_props and a declared
    ``value_info`` for an intermediate value."""
    body = [helper.make_node("Add", ["a", "a"], ["b"])]
    twice = helper.make_function("local", "Twice", ["a"], ["b"], body,
                                 [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Twice", ["r"], ["y"], domain="local")]
    proto = make_model(nodes, [vinfo("x", shape=[2])], [vinfo("y", shape=[2])])
    proto.opset_import.append(helper.make_opsetid("local", 1))
    proto.functions.append(twice)
    proto.metadata_props.add(key="author", value="test")
    proto.graph.value_info.append(vinfo("r", shape=[2]))
    return proto


def _restored():
    """``_model_with_function_and_metadata`` as an ``ir.Model``, optimized with a rule that
    fails: the run starts again from a copy taken first, restored into this object."""
    import onnx_ir as ir

    patched = with_rule(broken("Relu"))
    model = ir.serde.deserialize_model(_model_with_function_and_metadata())
    result = onnxfold.optimize(model, FoldOptions(), catalogue=patched)
    assert result.model is model and result.report.skipped_steps
    return model


def test_a_restored_model_keeps_its_functions_and_metadata(tmp_path):
    model = _restored()
    assert list(model.functions) == [("local", "Twice", "")]
    # the model's own metadata, and the record of the run that wrote it (``onnxfold.run``)
    assert model.metadata_props.pop(RUN).startswith('{') and \
        model.metadata_props == {"author": "test"}
    out = tmp_path / "out.onnx"
    onnxfold.save_model(model, out)
    x = np.array([-1, 2], np.float32)
    np.testing.assert_array_equal(run_ort(str(out), {"x": x})[0], [0, 4])


def test_a_restored_model_keeps_the_types_it_declared(tmp_path):
    import onnx

    out = tmp_path / "out.onnx"
    onnxfold.save_model(_restored(), out)
    assert [v.name for v in onnx.load(out).graph.value_info] == ["r"]  # as without the failure


def _broken(*_args, **_kwargs):
    raise ValueError("a bug in a rule")


def test_a_failing_installed_cleanup_is_skipped_by_its_name(save, monkeypatch):
    """The installed cleanups are passes of their own: one that raises is contained under
    its name, the run starts again without it, and the cleanups after it still run."""
    from onnxfold.pipeline import cleanups

    monkeypatch.setattr(cleanups.DedupeInitializers, "clean", _broken)
    nodes = [helper.make_node("Identity", ["x"], ["i"]),
             helper.make_node("Relu", ["i"], ["a"]), helper.make_node("Relu", ["i"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    path = save(make_model(nodes, [vinfo("x", shape=[2])], [vinfo("y", shape=[2])]))
    report = onnxfold.optimize(path, FoldOptions()).report
    (step,) = report.skipped_steps
    assert step.startswith("dedupe_initializers: ValueError: a bug in a rule")
    assert report.cleanup_hits == {"remove_identity": 1, "merge_duplicates": 1}
    with pytest.raises(ValueError, match="a bug in a rule"):
        onnxfold.optimize(path, FoldOptions(strict=True))


def test_the_installed_cleanups_run_in_order_and_an_op_type_turns_one_off():
    """``--disable-rule OP`` and ``--keep OP`` turn off the cleanup that removes OP."""
    from onnxfold.analysis.settings import RunSettings
    from onnxfold.pipeline.cleanups import CLEANUPS, cleanup_passes

    names = [c.name for c in CLEANUPS]
    assert names == ["remove_identity", "constants_to_initializers", "dedupe_initializers",
                     "prune_subgraph_initializers", "merge_duplicates"]
    running = [c.name for c in cleanup_passes({"Identity", "merge_duplicates"}, RunSettings(),
                                              strict=True)]
    assert running == names[1:4]
    nodes = [helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Relu", ["i"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[2])], [vinfo("y", shape=[2])])
    kept = onnxfold.optimize(model, FoldOptions(keep=("Identity",))).model
    assert [n.op_type for n in kept.graph] == ["Identity", "Relu"]
