"""``expansion.py``: the size of a model with every local function call expanded, counted once
per function (memoized), saturating above the cap, without recursion."""

from __future__ import annotations

import sys

import onnx_ir as ir
from onnx import TensorProto, helper

from onnxfold.analysis.expansion import expanded_size, function_sizes

DOMAIN = "local"
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]


def _model(bodies: dict[str, list[str]], top: str) -> ir.Model:
    """Functions named by ``bodies``: each a chain of nodes, an op starting with ``f`` a call
    of that local function, anything else an ONNX op; the graph calls ``top``."""
    functions = []
    for name, ops in bodies.items():
        nodes, previous = [], "x"
        for i, op in enumerate(ops):
            out = "y" if i == len(ops) - 1 else f"t{i}"
            nodes.append(helper.make_node(op, [previous], [out],
                                          domain=DOMAIN if op.startswith("f") else ""))
            previous = out
        functions.append(helper.make_function(DOMAIN, name, ["x"], ["y"], nodes, OPSETS))
    graph = helper.make_graph(
        [helper.make_node(top, ["x"], ["y"], domain=DOMAIN), helper.make_node("Neg", ["y"], ["z"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])])
    return ir.serde.deserialize_model(
        helper.make_model(graph, functions=functions, opset_imports=OPSETS))


def test_doubling_nest_is_counted_exactly_below_the_cap_and_saturates_above():
    bodies = {"f0": ["Relu", "Abs"]} | {f"f{k}": [f"f{k - 1}", f"f{k - 1}"] for k in range(1, 60)}
    model = _model(bodies, "f59")
    # f0 is 2 nodes, f_k 2 calls + 2 f_(k-1): f_k = 2**(k+2) - 2; the graph adds its 2 nodes
    assert expanded_size(model, cap=10**30) == 2**61 - 2 + 2
    assert expanded_size(model, cap=1000) == 1001
    assert function_sizes(model, cap=1000)["local", "f3", ""] == 30
    assert expanded_size(model, cap=1000, functions=False) == 2


def test_recursive_functions_are_over_any_cap():
    model = _model({"f0": ["Relu", "f1"], "f1": ["f0"], "f2": ["Abs"]}, "f0")
    sizes = function_sizes(model, cap=10**9)
    assert sizes["local", "f0", ""] == sizes["local", "f1", ""] == 10**9 + 1
    assert sizes["local", "f2", ""] == 1
    assert expanded_size(model, cap=10**9) == 10**9 + 1


def test_a_chain_of_calls_deeper_than_the_recursion_limit_is_counted():
    depth = 3 * sys.getrecursionlimit()
    bodies = {"f0": ["Relu"]} | {f"f{k}": [f"f{k - 1}", "Abs"] for k in range(1, depth)}
    model = _model(bodies, f"f{depth - 1}")
    # a Relu, depth - 1 calls and as many Abs, the graph's call and Neg
    assert expanded_size(model, cap=10**9) == 1 + 2 * (depth - 1) + 2
