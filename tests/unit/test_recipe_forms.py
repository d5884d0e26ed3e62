"""Which recipes a file may carry (``onnxfold/check/folds/recipe_forms.py``): a rule's ops
over the original's tensors, the original's own nodes, integer constants and numbers the
original holds; anything else is said, and the tensor is not verifiable."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper

from onnxfold.check.folds.recipe_forms import foreign
from onnxfold.ir.recipes import Leaf, Recipe
from tests.support.models import make_model, tensor, vinfo


def _original() -> ir.Model:
    """y = BatchNormalization(Conv(x, W), ...) with epsilon 1e-3, W read through an Abs node
    named ``t``."""
    c = 2
    nodes = [helper.make_node("Abs", ["K"], ["W"], name="t"),
             helper.make_node("Conv", ["x", "W"], ["h"], name="conv"),
             helper.make_node("BatchNormalization", ["h", "s", "b", "m", "v"], ["y"],
                              epsilon=1e-3, name="bn")]
    inits = [tensor("K", np.ones((c, c, 1, 1), np.float32))] + [
        tensor(n, np.full(c, 0.5, np.float32)) for n in "sbmv"]
    return ir.from_proto(make_model(nodes, [vinfo("x", shape=[1, c, 4, 4])],
                                    [vinfo("y", shape=[1, c, 4, 4])], inits))


def _recipe(*nodes, leaves=()) -> Recipe:
    return Recipe(nodes[-1].output[0], tuple(nodes), tuple(leaves))


ORIGINAL = _original()
EPSILON = np.float32(1e-3)


def test_a_rule_s_ops_over_the_original_s_tensors_and_numbers_are_its_computation():
    recipe = _recipe(helper.make_node("Add", ["v", "eps"], ["ve"]),
                     helper.make_node("Sqrt", ["ve"], ["sd"]),
                     helper.make_node("Div", ["s", "sd"], ["k"]),
                     helper.make_node("Reshape", ["k", "shape"], ["kk"]),
                     helper.make_node("Mul", ["W", "kk"], ["made"]),
                     leaves=[Leaf("v"), Leaf("s"), Leaf("W"), Leaf("eps", value=EPSILON),
                             Leaf("shape", value=np.array([-1, 1, 1, 1], np.int64))])
    assert foreign("w_fused", recipe, ORIGINAL) is None


def test_the_original_s_own_node_is_its_computation():
    node = helper.make_node("Abs", ["K"], ["W"], name="t")
    recipe = _recipe(node, helper.make_node("Concat", ["W", "W"], ["made"], axis=0),
                     leaves=[Leaf("K")])
    assert foreign("merged", recipe, ORIGINAL) is None
    other = helper.make_node("Abs", ["b"], ["W"], name="t")  # another input
    said = foreign("merged", _recipe(other, helper.make_node("Concat", ["W", "W"], ["made"],
                                                             axis=0)),
                   ORIGINAL)
    assert said is not None and "Abs" in said


def test_a_number_the_original_does_not_hold_is_said():
    recipe = _recipe(helper.make_node("Add", ["v", "eps"], ["made"]),
                     leaves=[Leaf("v"), Leaf("eps", value=np.float32(2e-3))])
    said = foreign("x", recipe, ORIGINAL)
    assert said is not None and "constant eps" in said
    many = _recipe(helper.make_node("Add", ["v", "d"], ["made"]),
                   leaves=[Leaf("v"), Leaf("d", value=np.full(2, EPSILON))])
    assert foreign("x", many, ORIGINAL) is not None


def test_a_circular_recipe_is_said():
    circular = _recipe(helper.make_node("Mul", ["x", "s"], ["made"]),
                       leaves=[Leaf("x"), Leaf("s")])
    assert "reads the tensor it makes" in foreign("x", circular, ORIGINAL)


def test_a_number_the_re_run_takes_from_a_model_is_no_number_of_the_recipe_s_own():
    recipe = _recipe(helper.make_node("Mul", ["s", "scale"], ["made"]),
                     leaves=[Leaf("s"), Leaf("scale", value=np.float32(0.125))])
    assert foreign("x", recipe, ORIGINAL) is not None
    assert foreign("x", recipe, ORIGINAL, resolved=lambda name: name == "scale") is None


def test_integers_of_its_own_cast_to_a_float_are_not_the_originals():
    """Issue 82 item 7: integer constants are allowed a recipe as axes and shapes; cast to a
    float they make any factor (``Cast(2**23 + 40) / Cast(2**23)`` moves a weight 40 ulps)."""
    nodes = (helper.make_node("Cast", ["num"], ["n"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["den"], ["d"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["n", "d"], ["f"]),
             helper.make_node("Mul", ["W", "f"], ["out"]))
    leaves = (Leaf("W", dtype=TensorProto.FLOAT),
              Leaf("num", dtype=TensorProto.INT64, value=np.array(2**23 + 40)),
              Leaf("den", dtype=TensorProto.INT64, value=np.array(2**23)))
    original = ir.Model(ir.Graph([], [], nodes=[]), ir_version=10)
    said = foreign("out", Recipe("out", nodes, leaves), original, lambda leaf: leaf == "W")
    assert said is not None and "casts integers of its own (num)" in said
