"""Symbolic dims whose expressions double at every node end in bounded time.

``s_(k+1) = s_k + s_k`` from ``s_0 = Shape(x)``: 42 nodes, and an expression tree of 2**40
nodes if each were written out. Printing, hashing or ordering such an expression (what
sorting broadcast operands and putting commutative operands in one order do) walked the whole
tree: the run took longer than any limit. A real export does the like with its dims: each layer
of chython's rxnmap builds them from the last layer's twice over (75,000 nodes by layer 16, 10 s
of a 1,000-node model). ``symbolic.expression`` keeps every expression within
``MAX_EXPRESSION_SIZE`` nodes: a larger one is an opaque symbol of the same dims, equal to
itself alone.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxfold.analysis.symbolic import MAX_EXPRESSION_SIZE, Sym, arith, expression
from tests.support.cli import REFUSAL_TIMEOUT, assert_ok, run_cli

LEVELS = 40


def doubling(op: str, levels: int = LEVELS) -> onnx.ModelProto:
    """``s_(k+1) = op(s_k, s_k)`` from ``s_0 = Shape(x)``; ``y = Reshape(x, s_n - s_n + s_0)``,
    which is ``x`` whatever ``op`` gives (an int64 overflow wraps in both terms alike)."""
    nodes = [helper.make_node("Shape", ["x"], ["s0"])]
    nodes += [helper.make_node(op, [f"s{k}", f"s{k}"], [f"s{k + 1}"]) for k in range(levels)]
    nodes += [helper.make_node("Sub", [f"s{levels}", f"s{levels}"], ["zero"]),
              helper.make_node("Add", ["zero", "s0"], ["target"]),
              helper.make_node("Reshape", ["x", "target"], ["y"])]
    graph = helper.make_graph(nodes, "doubling",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _run(path, n: int) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.arange(n, dtype=np.float32)
    result: np.ndarray = session.run(None, {"x": x})[0]
    return result


@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_doubling_shape_values_fold_in_bounded_time(tmp_path, op):
    source, out = tmp_path / "doubling.onnx", tmp_path / "out.onnx"
    onnx.save(doubling(op), source)
    done = run_cli("optimize", source, "-o", out, timeout=REFUSAL_TIMEOUT)
    assert_ok(done)
    folded = onnx.load(out)
    # s_n - s_n is 0 whatever s_n is: the scaffolding folds (the Reshape of x to its own dims
    # stays, being the graph's output)
    assert [n.op_type for n in folded.graph.node] == ["Reshape"], folded.graph.node
    for n in (0, 1, 5):
        np.testing.assert_array_equal(_run(out, n), _run(source, n))


def test_expressions_stay_within_the_bound():
    n = Sym(("dim", "N"))
    d: Sym | int = n
    largest = 0
    for _ in range(LEVELS):
        d = arith("Add", d, d)
        assert isinstance(d, Sym)
        largest = max(largest, d.size)
    assert largest <= MAX_EXPRESSION_SIZE
    assert d.atoms() == (n,)  # what it is made of is still known (the report names it)
    assert arith("Sub", d, d) == 0  # an expression still equals itself


def test_an_opaque_expression_equals_itself_alone():
    n, m = Sym(("dim", "N")), Sym(("dim", "M"))
    big: Sym | int = n
    while isinstance(big, Sym) and big.size * 2 + 1 <= MAX_EXPRESSION_SIZE:
        big = arith("Mul", big, big)
    assert isinstance(big, Sym) and big.expr[0] == "Mul"
    first, second = expression("Add", big, big), expression("Add", big, big)
    assert first.expr[0] == second.expr[0] == "Opaque"
    assert first != second  # two opaque expressions may differ: never taken as equal
    assert first == first and hash(first) == hash(first)
    assert expression("Add", big, m).atoms() == (n, m)
    assert "N" in str(first)
    small = expression("Add", n, m)  # within the bound: the expression itself
    assert small == Sym(("Add", n, m)) and hash(small) == hash(Sym(("Add", n, m)))
