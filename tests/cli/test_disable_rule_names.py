"""``--disable-rule NAME`` with a name that is no rule, cleanup or op type is refused (exit 2,
one line, the nearest rule named): it would turn nothing off, silently (a rule renamed, such
as ``drop_symbolic_noop``, now part of ``drop_noop``, or a typo). Rule names, cleanup names,
ONNX op types and an op type only the model uses (a plugin's) are taken."""

from __future__ import annotations

import os

import onnx
import pytest
from onnx import helper

import onnxfold
from onnxfold.errors import InputError
from tests.support.cli import assert_ok, assert_one_error_line, run_cli
from tests.support.models import MODELS, make_model, vinfo

BUNDLED = os.path.join(MODELS, "tiny_bert_ts.onnx")


@pytest.mark.parametrize("name", ["drop_noop", "remove_identity", "MatMul", "LabelEncoder"])
def test_a_rule_cleanup_or_op_type_is_taken(name):
    assert onnxfold.optimize(BUNDLED, disabled_rules={name}).report.nodes_after > 0


@pytest.mark.parametrize(("name", "hint"), [("drop_symbolic_noop", "did you mean drop_noop?"),
                                            ("fuse_batchnorm_into_conv",
                                             "did you mean fuse_batch_norm_into_conv?")])
def test_an_unknown_name_is_one_line_naming_the_nearest_rule(tmp_path, name, hint):
    done = run_cli("optimize", BUNDLED, "-o", tmp_path / "o.onnx", "--disable-rule", name)
    assert_one_error_line(done, name, hint)
    assert not (tmp_path / "o.onnx").exists()
    with pytest.raises(InputError, match=hint):
        onnxfold.optimize(BUNDLED, disabled_rules={name})


def test_an_op_type_only_the_model_uses_is_taken(tmp_path):
    model = make_model([helper.make_node("Twist", ["x"], ["y"], domain="my.ops")],
                       [vinfo("x", shape=[2])], [vinfo("y", shape=[2])])
    model.opset_import.append(helper.make_opsetid("my.ops", 1))
    onnx.save(model, tmp_path / "m.onnx")
    done = run_cli("optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx",
                   "--disable-rule", "Twist", "--no-verify")
    assert_ok(done)


def test_an_op_type_only_a_local_function_uses_is_taken(tmp_path):
    body = [helper.make_node("Twirl", ["a"], ["b"], domain="my.ops")]
    function = helper.make_function("my.fn", "F", ["a"], ["b"], body,
                                    [helper.make_opsetid("my.ops", 1),
                                     helper.make_opsetid("", 17)])
    model = make_model([helper.make_node("F", ["x"], ["y"], domain="my.fn")],
                       [vinfo("x", shape=[2])], [vinfo("y", shape=[2])])
    model.opset_import.extend([helper.make_opsetid("my.fn", 1), helper.make_opsetid("my.ops", 1)])
    model.functions.append(function)
    onnx.save(model, tmp_path / "m.onnx")
    assert onnxfold.optimize(str(tmp_path / "m.onnx"), disabled_rules={"Twirl"}).report
    with pytest.raises(InputError, match="Twirlx"):
        onnxfold.optimize(str(tmp_path / "m.onnx"), disabled_rules={"Twirlx"})
