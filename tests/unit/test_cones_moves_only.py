"""``Cones.moves_only``: whether a value's cone only moves data (its weights then read where
they lie): data movement of weights and inputs yes; any node that computes, or of another
domain, no; a large Constant is a weight, not a node that computes; a chain deeper than
Python's recursion limit is walked."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxfold.check.running.cones import Cones


def _weight(name: str, array: np.ndarray) -> ir.Value:
    return ir.Value(name=name, const_value=ir.Tensor(array, name=name),
                    shape=ir.Shape(array.shape), type=ir.TensorType(ir.DataType.FLOAT))


def _cones() -> tuple[Cones, dict[str, ir.Value]]:
    w = _weight("w", np.ones((64, 64), np.float32))
    x = ir.Value(name="x", shape=ir.Shape([64]), type=ir.TensorType(ir.DataType.FLOAT))
    big = ir.node("Constant", [], attributes={
        "value": ir.Tensor(np.ones((512, 64), np.float32), name="big")}, name="big")
    big.outputs[0].name = "big_out"
    t = ir.node("Transpose", [w], attributes={"perm": [1, 0]}, name="t")
    c = ir.node("Concat", [t.outputs[0], big.outputs[0]], attributes={"axis": 0}, name="c")
    m = ir.node("Mul", [t.outputs[0], t.outputs[0]], name="m")
    r = ir.node("Relu", [x], name="r", domain="custom")
    nodes = [big, t, c, m, r]
    chain = [ir.node("Identity", [t.outputs[0]], name="i0")]
    for k in range(1, 5000):
        chain.append(ir.node("Identity", [chain[-1].outputs[0]], name=f"i{k}"))
    graph = ir.Graph([x], [c.outputs[0], m.outputs[0], r.outputs[0], chain[-1].outputs[0]],
                     nodes=[*nodes, *chain], initializers=[w], opset_imports={"": 17})
    model = ir.Model(graph, ir_version=8)
    named = {"w": w, "x": x, "t": t.outputs[0], "c": c.outputs[0], "m": m.outputs[0],
             "r": r.outputs[0], "deep": chain[-1].outputs[0]}
    return Cones(model, [x]), named


def test_moving_and_computing_cones_are_told_apart():
    cones, v = _cones()
    assert cones.moves_only(v["w"]) and cones.moves_only(v["x"])
    assert cones.moves_only(v["t"]) and cones.moves_only(v["c"])  # (a large Constant: a weight)
    assert not cones.moves_only(v["m"]) and not cones.moves_only(v["r"])
    assert cones.moves_only(v["deep"])  # 5,000 nodes deep


def test_the_run_of_a_cone_says_the_same():
    cones, v = _cones()
    for names, moving in ((["t", "c"], True), (["t", "m"], False), (["deep"], True)):
        assert cones._prepared([v[n] for n in names]).moved_only is moving, names
