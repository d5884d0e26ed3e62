"""``inlining.py``: onnx-ir's inliner with linear-time naming gives the very names it gives
alone, and a model over the budget is left as it is, with the reason."""

from __future__ import annotations

import onnx_ir as ir
from onnx import TensorProto, helper
from onnx_ir.passes.common import InlinePass

from onnxfold.pipeline.inlining import inline_functions

DOMAIN = "local"
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]


def _nest(levels: int) -> ir.Model:
    functions = [helper.make_function(DOMAIN, "f0", ["x"], ["y"], [
        helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Neg", ["t"], ["y"])], OPSETS)]
    functions.extend(helper.make_function(DOMAIN, f"f{k}", ["x"], ["y"], [
        helper.make_node(f"f{k - 1}", ["x"], ["a"], domain=DOMAIN),
        helper.make_node(f"f{k - 1}", ["a"], ["y"], domain=DOMAIN)], OPSETS)
        for k in range(1, levels))
    graph = helper.make_graph(
        [helper.make_node(f"f{levels - 1}", ["x"], ["t"], domain=DOMAIN),
         helper.make_node("Abs", ["t"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return ir.serde.deserialize_model(
        helper.make_model(graph, functions=functions, opset_imports=OPSETS))


def _names(model: ir.Model) -> list[tuple[str | None, list[str | None]]]:
    return [(node.name, [v.name for v in node.outputs]) for node in model.graph]


def test_the_names_are_onnx_irs():
    ours, theirs = _nest(6), _nest(6)
    assert inline_functions(ours) == (True, None)
    InlinePass()(theirs)
    assert _names(ours) == _names(theirs)
    assert len(_names(ours)) == 2 * 2**5 + 1


def test_over_the_budget_nothing_is_inlined():
    model = _nest(6)
    changed, why = inline_functions(model, budget=100)
    assert not changed and why is not None and "the budget is 100" in why
    assert len(model.functions) == 6 and len(model.graph) == 2
