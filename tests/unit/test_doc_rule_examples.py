"""The example rules of docs/ARCHITECTURE.md and docs/rewrite-driver.md run as written (and
ARCHITECTURE.md's size rule refuses what its text says).

Each ``python`` block that declares a ``@pattern`` is executed with the rule API in scope,
its rule is put into a catalogue (in place of an installed rule of the same name) and
``optimize`` folds a model with it: the rule must fire and the result must compute what the
original computes in onnxruntime. An example that drifts from the API fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

import onnxfold
import onnxfold.declare
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.declare.pattern_rules import PatternRule
from onnxfold.declare.registry import RULES_ATTR
from onnxfold.declare.sizes import SizeRule
from tests.support.models import make_model, vinfo
from tests.support.running import run_ort

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _declared_rules(doc: str) -> list[PatternRule]:
    """The pattern rules the doc's python blocks declare, executed with the rule API."""
    rules: list[PatternRule] = []
    for code in BLOCK.findall((ROOT / "docs" / doc).read_text()):
        if "@pattern(" not in code:
            continue
        scope: dict[str, object] = {"ir": ir, "np": np, **vars(onnxfold.declare)}
        exec(compile(code, doc, "exec"), scope)
        rules += [rule for obj in scope.values() for rule in getattr(obj, RULES_ATTR, ())
                  if isinstance(rule, PatternRule)]
    return rules


def _sub_of_neg() -> onnx.ModelProto:
    nodes = [helper.make_node("Neg", ["y"], ["ny"]), helper.make_node("Sub", ["x", "ny"], ["z"])]
    return make_model(nodes, [vinfo("x", shape=[2, 3]), vinfo("y", shape=[2, 3])],
                      [vinfo("z", shape=[2, 3])])


def _two_transposes() -> onnx.ModelProto:
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             helper.make_node("Transpose", ["t"], ["z"], perm=[0, 2, 1])]
    return make_model(nodes, [vinfo("x", shape=[2, 3, 4])], [vinfo("z", shape=[3, 4, 2])])


@pytest.mark.parametrize(("doc", "model", "left"), [
    ("ARCHITECTURE.md", _sub_of_neg, ["Add"]),
    ("rewrite-driver.md", _two_transposes, ["Transpose"]),
])
def test_the_doc_rule_runs_as_written(doc, model, left) -> None:
    rules = _declared_rules(doc)
    assert len(rules) == 1, [r.name for r in rules]
    (rule,) = rules
    catalogue = load_catalogue().without([rule.name]) + Catalogue((rule,))
    original = model()
    result = onnxfold.optimize(original, catalogue=catalogue)
    assert result.report.pattern_hits == {rule.name: 1}
    folded = result.to_proto()
    assert [n.op_type for n in folded.graph.node] == left
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal(
        [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
        for i in original.graph.input}
    for want, got in zip(run_ort(original, feeds), run_ort(folded, feeds)):
        np.testing.assert_array_equal(want, got)


def _nonzero_of_ones(shape: tuple[int, ...]) -> onnx.ModelProto:
    """y = x + the count of NonZero(ones(shape))'s indices: the NonZero folds if it may."""
    nodes = [helper.make_node("NonZero", ["c"], ["nz"]),
             helper.make_node("Cast", ["nz"], ["f"], to=onnx.TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["f"], ["s"], keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"])]
    ones = onnx.numpy_helper.from_array(np.ones(shape, np.float32), "c")
    return make_model(nodes, [vinfo("x", shape=[1])], [vinfo("y", shape=[1])], [ones])


def test_the_size_rule_example_refuses_what_the_page_says():
    """ARCHITECTURE.md's size rule, executed as written, refuses the NonZero its text names
    under the budget it names, with the bytes it names, and lets the 1-D one it says fits
    fold (without the rule, nothing is refused: the example is what refuses)."""
    (code,) = [c for c in BLOCK.findall((ROOT / "docs" / "ARCHITECTURE.md").read_text())
               if "@output_bytes(" in c]
    scope: dict[str, object] = {"np": np, **vars(onnxfold.declare)}
    exec(compile(code, "ARCHITECTURE.md", "exec"), scope)
    (rule,) = [r for obj in scope.values() for r in getattr(obj, RULES_ATTR, ())
               if isinstance(r, SizeRule)]
    page = " ".join((ROOT / "docs" / "ARCHITECTURE.md").read_text().split())
    claim = re.search(r"a `NonZero` of a (\d+) x (\d+) tensor is refused under "
                      r"`--pool-budget (\d+)` .*?([\d,]+) bytes \(a 1-D tensor of ([\d,]+) "
                      r"elements, ([\d,]+) bytes, fits\)", page)
    assert claim, "the size rule's example sentence changed: update this test with it"
    rows, cols, budget, refused, elements, fits = (int(g.replace(",", ""))
                                                   for g in claim.groups())
    catalogue = load_catalogue() + Catalogue((rule,))
    report = onnxfold.optimize(_nonzero_of_ones((rows, cols)), catalogue=catalogue,
                               pool_budget=budget).report
    assert report.declined == {"size": 1}
    assert f"outputs of {refused} B would exceed the pool budget of {budget} B" in \
        report.declined_nodes[0]["reason"]
    one_d = onnxfold.optimize(_nonzero_of_ones((elements,)), catalogue=catalogue,
                              pool_budget=budget).report
    assert one_d.declined == {} and one_d.nodes_after == 1
    assert rule.fn(np.ones(elements, np.float32)) == fits
    plain = onnxfold.optimize(_nonzero_of_ones((rows, cols)), pool_budget=budget).report
    assert plain.declined == {}
