"""The run's settings (``--keep``, ``--assume-named-dims-equal``, the plugin ops the reader found)
reach the rules and passes as a value (``RunSettings``), never through ``model.meta``: a model
carries no option after ``optimize``, and code given the settings directly honours them."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper

from onnxfold import FoldOptions, optimize
from onnxfold.analysis.settings import RunSettings
from onnxfold.analysis.shapes import MARKED_KEY
from onnxfold.analysis.step_inputs import shared_dim_names
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.io.map_types import MAP_TYPES_KEY
from onnxfold.io.reader import DATA_FILES_KEY, SOURCE_KEY, UNKNOWN_OPS_KEY
from onnxfold.ir.edits import NAMES_KEY
from onnxfold.pipeline.cleanups import MergeDuplicates, RemoveIdentity
from onnxfold.runtime.split import optimize_and_split
from tests.support.models import make_model, tensor, vinfo

# what the reader and the name allocator may leave on a model (docs/state.md)
ANNOTATIONS = {SOURCE_KEY, DATA_FILES_KEY, UNKNOWN_OPS_KEY, NAMES_KEY, MARKED_KEY, MAP_TYPES_KEY}


def _identity_model() -> ir.Model:
    """y = Relu(Identity(x)), the Identity named ``ident``."""
    nodes = [helper.make_node("Identity", ["x"], ["i"], name="ident"),
             helper.make_node("Relu", ["i"], ["y"], name="relu")]
    proto = make_model(nodes, [vinfo("x", shape=[2])], [vinfo("y", shape=[2])])
    return ir.serde.deserialize_model(proto)


def test_optimize_leaves_no_option_in_the_model_s_meta(tmp_path):
    nodes = [helper.make_node("Neg", ["w"], ["n"], name="neg"),
             helper.make_node("Add", ["x", "n"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2])], [vinfo("y", shape=[2])],
                       [tensor("w", np.ones(2, np.float32))])
    path = tmp_path / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    options = FoldOptions(keep=("neg",), assume_named_dims_equal=True)
    for model in (str(path), proto, ir.serde.deserialize_model(proto)):
        result = optimize(model, options)
        assert set(result.model.meta) <= ANNOTATIONS, sorted(result.model.meta)
        assert "neg" in {n.name for n in result.model.graph}


def test_a_cleanup_honours_the_keep_it_is_given():
    kept = _identity_model()
    RemoveIdentity(RunSettings(keep=frozenset({"ident"})), strict=True)(kept)
    assert [n.op_type for n in kept.graph] == ["Identity", "Relu"]
    removed = _identity_model()
    RemoveIdentity(RunSettings(), strict=True)(removed)
    assert [n.op_type for n in removed.graph] == ["Relu"]


def test_duplicates_of_an_op_the_settings_name_unknown_are_never_merged():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["x"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2])], [vinfo("y", shape=[2])])
    plugin = ir.serde.deserialize_model(proto)
    MergeDuplicates(RunSettings(unknown_ops=frozenset({"Relu"})), strict=True)(plugin)
    assert [n.op_type for n in plugin.graph] == ["Relu", "Relu", "Add"]
    known = ir.serde.deserialize_model(proto)
    MergeDuplicates(RunSettings(), strict=True)(known)
    assert [n.op_type for n in known.graph] == ["Relu", "Add"]


def test_named_dims_are_one_symbol_only_when_the_caller_says_so():
    proto = make_model([helper.make_node("Add", ["a", "b"], ["y"])],
                       [vinfo("a", shape=["N"]), vinfo("b", shape=["N"])],
                       [vinfo("y", TensorProto.FLOAT, shape=["N"])])
    model = ir.serde.deserialize_model(proto)
    assert shared_dim_names(model) == {"N"}
    assert shared_dim_names(model, assume_equal=True) == frozenset()


def test_split_keeps_a_kept_node_nothing_reads_whatever_the_compile_time_mode():
    nodes = [helper.make_node("Neg", ["x"], ["unread"], name="keep_me"),
             helper.make_node("Relu", ["x"], ["y"], name="relu")]
    proto = make_model(nodes, [vinfo("x", shape=[2]), vinfo("w", shape=[2])],
                       [vinfo("y", shape=[2])])
    for mode in ("fold", "keep"):
        parts = optimize_and_split(ir.serde.deserialize_model(proto), ["w"], load_catalogue(),
                                   FoldOptions(keep=("keep_me",)), compile_time=mode)
        assert "keep_me" in {n.name for n in parts.entry.graph}, mode
