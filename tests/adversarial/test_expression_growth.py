"""Symbolic dims whose expressions double at every node end in bounded time.

``s_(k+1) = s_k + s_k`` from ``s_0 = Shape(x)``: 42 nodes, and an expression tree of 2**40
nodes if each were written out. Printing, hashing or ordering such an expression (what
sorting broadcast operands and putting commutative operands in one order do) walked the whole
tree: the run took longer than any limit. A real export does the like with its dims: each layer
of chython's rxnmap builds them from the last layer's twice over (75,000 nodes by layer 16, 10 s
of a 1,000-node model). ``symbolic.expression`` keeps every expression within
``MAX_EXPRESSION_SIZE`` nodes: a larger one is an opaque symbol of the same dims, equal to
itself alone.

Expressions within the bound were still costly where they were printed: commutative operands
were put in order by their ``repr`` and broadcast operands by their text, rebuilt whole at every
comparison, so a 1,000-node expression of a dim named with a million characters made a 19-node
model run 88 s and 816 MB. They are ordered by ``Sym.order_key``, made once of the parts' own
keys. A ``Shape`` of a value whose rank doubles every three nodes read its dims once an axis
(rank squared), and all of them though no shape value is longer than 64 elements.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxfold.analysis import dim_algebra, step_inputs
from onnxfold.analysis.dim_algebra import MAX_EXPRESSION_SIZE, Sym, arith, expression
from onnxfold.analysis.step_inputs import StepInputs
from onnxfold.declare.catalogue import load_catalogue
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


def long_name_sums(length: int, sums: int = 4, levels: int = 9) -> onnx.ModelProto:
    """``s_9`` doubled 9 times from ``Shape(x)`` (1,023 nodes, the dim's name 512 times in it)
    plus ``sums`` constants, each cast and concatenated: ``x`` is ``[name]`` with ``name``
    ``length`` characters long."""
    name = "N" * length
    nodes = [helper.make_node("Shape", ["x"], ["s0"])]
    nodes += [helper.make_node("Add", [f"s{k}", f"s{k}"], [f"s{k + 1}"]) for k in range(levels)]
    weights, parts = [], []
    for i in range(sums):
        weights.append(onnx.numpy_helper.from_array(np.array([i + 1], np.int64), f"k{i}"))
        nodes += [helper.make_node("Add", [f"s{levels}", f"k{i}"], [f"y{i}"]),
                  helper.make_node("Cast", [f"y{i}"], [f"f{i}"], to=TensorProto.FLOAT)]
        parts.append(f"f{i}")
    nodes.append(helper.make_node("Concat", parts, ["z"], axis=0))
    graph = helper.make_graph(nodes, "long_name",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [name])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [None])],
                              initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_a_long_dim_name_in_large_expressions_is_never_printed_whole(tmp_path):
    source, out = tmp_path / "long_name.onnx", tmp_path / "out.onnx"
    onnx.save(long_name_sums(1_000_000), source)
    done = run_cli("optimize", source, "-o", out, timeout=REFUSAL_TIMEOUT)
    assert_ok(done)
    for n in (0, 1, 3):
        np.testing.assert_array_equal(_run_z(out, n), _run_z(source, n))


def _run_z(path, n: int) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    result: np.ndarray = session.run(None, {"x": np.zeros(n, np.float32)})[0]
    return result


def test_order_keys_are_made_once_of_the_parts_keys():
    n = Sym(("dim", "N" * 10_000))
    d: Sym | int = n
    for _ in range(9):
        d = arith("Add", d, d)
    assert isinstance(d, Sym) and d.size == 1023
    key = d.order_key
    assert key[3][1] is key[4][1]  # the two operands' keys, the very same tuple: no copy
    half = d.expr[1]
    assert arith("Add", half, n) == arith("Add", n, half)  # one form for both orders
    assert dim_algebra.dim_order(3) < dim_algebra.dim_order(n)  # ints first


@pytest.mark.parametrize("rank", [5, 5_000])
def test_shape_reads_its_input_dims_once_and_only_for_a_shape_value(monkeypatch, rank):
    x = ir.Value(name="x", shape=ir.Shape(["N"] + [1] * (rank - 1)),
                 type=ir.TensorType(ir.DataType.FLOAT))
    node = ir.Node("", "Shape", [x])
    read = []
    axis_dim = step_inputs._axis_dim
    monkeypatch.setattr(step_inputs, "_axis_dim", lambda *a: read.append(a) or axis_dim(*a))
    step = load_catalogue().shape_steps.values["Shape"]
    found = step(StepInputs(node, {}, lambda v: None, frozenset()))
    if rank > dim_algebra.MAX_ELEMENTS:
        assert found is None and read == []  # data, not a shape: no dim read
    else:
        assert found is not None and found.elements == (Sym(("dim", "N")), 1, 1, 1, 1)
        assert len(read) == rank
