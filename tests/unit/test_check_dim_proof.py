"""The check's own dim prover (``onnxfold.check.folds.dim_proof``): what it shows constant over
the dynamic dims is constant in onnxruntime at every binding, on random shape graphs; the cases
it must not show (a dim reached, an overridable index, a random op) are not shown.

A proof decides whether a fold's match holds "for every input" without the fold's symbolic dims
or the rules' shape steps: a fault in that shape code which is wrong only at dims the check
does not sample must not be certified by the same code.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxfold.check.folds.dim_proof import DimProof
from onnxfold.check.running.cones import reinferred

I64 = TensorProto.INT64
DIMS = ["batch", "seq", 4, 6]


def _model(nodes, initializers, outputs, inputs=None) -> onnx.ModelProto:
    inputs = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, DIMS)]
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info(o, I64, None) for o in outputs],
                              initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _proofs(proto: onnx.ModelProto, names) -> dict[str, bool]:
    model = reinferred(ir.serde.deserialize_model(proto))
    fed = list(model.graph.inputs)
    values = {o.name: o for n in model.graph for o in n.outputs}
    proof = DimProof(model, fed)
    return {name: proof.proved(values[name]) for name in names}


def _runs(proto: onnx.ModelProto, names, bindings) -> dict[str, list[np.ndarray]]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    found: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for batch, seq in bindings:
        x = np.zeros((batch, seq, *DIMS[2:]), np.float32)
        for name, got in zip(names, session.run(list(names), {"x": x})):
            found[name].append(got)
    return found


def _const(name: str, values) -> TensorProto:
    return helper.make_tensor(name, I64, [len(values)] if isinstance(values, list) else [],
                              values if isinstance(values, list) else [values])


def _random_shape_graph(rng: np.random.Generator):
    """Shape(x) and a chain of ops over int vectors and scalars built from it and constants."""
    nodes = [helper.make_node("Shape", ["x"], ["s"])]
    inits = []
    vectors, scalars = ["s"], []
    for k in range(rng.integers(4, 12)):
        out = f"v{k}"
        kind = rng.choice(["gather", "slice", "concat", "arith", "unsq", "shape_part",
                           "where", "reshape"])
        if kind == "gather" or (not scalars and kind in ("arith", "unsq")):
            index = int(rng.integers(-4, 4))
            inits.append(_const(f"i{k}", index))
            nodes.append(helper.make_node("Gather", [rng.choice(vectors), f"i{k}"], [out]))
            scalars.append(out)
        elif kind == "slice":
            start, end = int(rng.integers(-4, 4)), int(rng.integers(-4, 5))
            inits += [_const(f"b{k}", [start]), _const(f"e{k}", [end])]
            nodes.append(helper.make_node("Slice", ["s", f"b{k}", f"e{k}"], [out]))
            vectors.append(out)
        elif kind == "concat":
            parts = [str(rng.choice(vectors)) for _ in range(rng.integers(1, 3))]
            nodes.append(helper.make_node("Concat", parts, [out], axis=0))
            vectors.append(out)
        elif kind == "arith":
            op = str(rng.choice(["Add", "Mul", "Sub", "Max"]))
            a, b = rng.choice(scalars), rng.choice(scalars)
            nodes.append(helper.make_node(op, [a, b], [out]))
            scalars.append(out)
        elif kind == "unsq":
            inits.append(_const(f"a{k}", [0]))
            nodes.append(helper.make_node("Unsqueeze", [rng.choice(scalars), f"a{k}"], [out]))
            vectors.append(out)
        elif kind == "shape_part":
            start = int(rng.integers(-4, 4))
            nodes.append(helper.make_node("Shape", ["x"], [out], start=start))
            vectors.append(out)
        elif kind == "where" and scalars:
            a, b = rng.choice(scalars), rng.choice(scalars)
            nodes += [helper.make_node("Equal", [a, b], [f"c{k}"]),
                      helper.make_node("Where", [f"c{k}", a, b], [out])]
            scalars.append(out)
        else:
            inits.append(_const(f"r{k}", [-1]))
            nodes.append(helper.make_node("Reshape", [rng.choice(vectors), f"r{k}"], [out]))
            vectors.append(out)
    outputs = [n.output[0] for n in nodes if not n.output[0].startswith("c")]  # (ints only)
    return nodes, inits, list(dict.fromkeys(outputs))


@pytest.mark.parametrize("seed", range(60))
def test_what_it_shows_constant_is_constant_in_onnxruntime_at_every_binding(seed):
    rng = np.random.default_rng(seed)
    nodes, inits, names = _random_shape_graph(rng)
    proto = _model(nodes, inits, names)
    bindings = [(1, 1), (2, 3), (5, 2), (7, 9)]
    try:
        runs = _runs(proto, names, bindings)
    except Exception:  # an out-of-range Gather at some binding: nothing to prove there
        pytest.skip("onnxruntime refuses the random graph")
    proved = _proofs(proto, names)
    for name in names:
        if proved[name]:
            first = runs[name][0]
            assert all(np.array_equal(first, got) for got in runs[name]), (name, runs[name])


def test_the_static_part_of_a_shape_is_shown_and_the_dynamic_part_is_not():
    """Shape(x)[2:] and Shape(x)[-1] are shown (4 and 6 for every batch and seq), and so is
    what is computed from them; Shape(x)[:2], a concatenation with it and Shape(x) are not."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "two", "big"], ["tail"]),
             helper.make_node("Gather", ["s", "last"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["dd"]),
             helper.make_node("Unsqueeze", ["dd", "zero"], ["ddv"]),
             helper.make_node("Concat", ["tail", "ddv"], ["target"], axis=0),
             helper.make_node("Shape", ["x"], ["head"], end=2),
             helper.make_node("Concat", ["head", "tail"], ["mixed"], axis=0),
             helper.make_node("Shape", ["x"], ["late"], start=-2),
             helper.make_node("Gather", ["mixed", "two_s"], ["picked"])]
    proto = _model(nodes, [_const("two", [2]), _const("big", [2**62]), _const("last", -1),
                           _const("zero", [0]), _const("two_s", 2)],
                   ["tail", "d", "dd", "target", "head", "mixed", "late", "s", "picked"])
    assert _proofs(proto, ["tail", "d", "dd", "target", "late", "picked", "head", "mixed",
                           "s"]) == {
        "tail": True, "d": True, "dd": True, "target": True, "late": True, "picked": True,
        "head": False, "mixed": False, "s": False}


def test_a_slice_keeps_the_positions_it_takes():
    """Over [4, batch, 6, seq]: Shape(x)[0:1] and [2:3] are shown, [0:2] and [1:3] are not,
    nor what a Gather takes from where a dim went."""
    nodes = [helper.make_node("Shape", ["x"], ["s"])]
    cuts = {"a": (0, 1), "b": (2, 3), "c": (0, 2), "d": (1, 3), "e": (-2, -1)}
    inits = []
    for name, (start, end) in cuts.items():
        inits += [_const(f"{name}0", [start]), _const(f"{name}1", [end])]
        nodes.append(helper.make_node("Slice", ["s", f"{name}0", f"{name}1"], [name]))
    nodes.append(helper.make_node("Gather", ["c", "one"], ["cg"]))
    nodes.append(helper.make_node("Gather", ["c", "zero"], ["cz"]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, "batch", 6, "seq"])]
    proto = _model(nodes, [*inits, _const("one", 1), _const("zero", 0)],
                   [*cuts, "cg", "cz"], inputs)
    assert _proofs(proto, [*cuts, "cg", "cz"]) == {
        "a": True, "b": True, "c": False, "d": False, "e": True, "cg": False, "cz": True}


def test_an_index_a_caller_may_override_gives_no_position():
    """Gather(Shape(x), i) with i an initializer that is also a graph input: the caller may
    feed i = 0 (the batch), so nothing is shown constant."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i"], ["d"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, DIMS),
              helper.make_tensor_value_info("i", I64, [])]
    proto = _model(nodes, [_const("i", 2)], ["d"], inputs)
    model = reinferred(ir.serde.deserialize_model(proto))
    fed = list(model.graph.inputs)
    d = next(o for n in model.graph for o in n.outputs if o.name == "d")
    assert not DimProof(model, fed).proved(d)
    held = [v for v in fed if v.name != "i"]  # the same graph where i is a constant
    assert DimProof(model, held).proved(d)


@pytest.mark.parametrize("random_op", ["RandomUniform", "inside an If"])
def test_a_value_no_input_decides_is_never_shown_constant(random_op):
    """A random op reads nothing that varies with the dims, and is still no constant: neither
    alone nor inside a subgraph."""
    if random_op == "RandomUniform":
        nodes = [helper.make_node("RandomUniform", [], ["r"], shape=[2], dtype=I64)]
    else:
        inner = helper.make_graph(
            [helper.make_node("RandomUniform", [], ["u"], shape=[2], dtype=I64)], "branch", [],
            [helper.make_tensor_value_info("u", I64, [2])])
        nodes = [helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
                     "c", TensorProto.BOOL, [], [True])),
                 helper.make_node("If", ["c"], ["r"], then_branch=inner, else_branch=inner)]
    proto = _model(nodes, [], ["r"])
    assert _proofs(proto, ["r"]) == {"r": False}
