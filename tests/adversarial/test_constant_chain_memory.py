"""A long chain of constant nodes, each reading a weight of its own, folds in memory linear in
its length.

The size policy judges a kept result against the source constants it is computed from
(``fold.policy.Origins``). Those sets were kept for every value: a chain of n Adds, node k
reading the chain so far and weight k, kept n**2 / 2 entries (8,000 Adds: 1.5 GB of peak RSS,
32,000 would not fit this machine). A set of more than ``MAX_KEPT_ORIGINS`` sources is now
traced again when asked for (only the results a fold keeps are), and gives the same sources.
"""

from __future__ import annotations

import random
import resource

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.analysis.constness import plan_graph
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.fold import policy
from tests.support.cli import assert_ok
from tests.support.measured_child import run_measured

LENGTH = 8000
PEAK_LIMIT = 400 << 20  # measured: ~120 MiB (1.5 GB when every set was kept)
CAP = 3 << 30  # the child's address space: a regression fails instead of taking the machine


def chain(length: int) -> onnx.ModelProto:
    """``x_(k+1) = x_k + w_k`` from ``x_0 = 0.5``, every ``w_k`` an initializer;
    ``y = x_n + inp``."""
    weights = [numpy_helper.from_array(np.full([1], 0.5, np.float32), "x0")]
    weights += [numpy_helper.from_array(np.full([1], k % 7, np.float32), f"w{k}")
                for k in range(length)]
    nodes = [helper.make_node("Add", [f"x{k}", f"w{k}"], [f"x{k + 1}"]) for k in range(length)]
    nodes.append(helper.make_node("Add", [f"x{length}", "inp"], ["y"]))
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("inp", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
                              initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _run(path) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    result: np.ndarray = session.run(None, {"inp": np.array([1.25], np.float32)})[0]
    return result


def test_a_long_constant_chain_folds_in_linear_memory(tmp_path):
    source, out = tmp_path / "chain.onnx", tmp_path / "out.onnx"
    onnx.save(chain(LENGTH), source)

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))

    done, peak = run_measured(["optimize", source, "-o", out, "-q"], cap)
    assert_ok(done)
    assert 0 < peak < PEAK_LIMIT, f"peak RSS {peak >> 20} MiB"
    assert [n.op_type for n in onnx.load(out).graph.node] == ["Add"]  # the chain folded
    np.testing.assert_allclose(_run(out), _run(source), rtol=1e-6)


def _random_constant_dag(seed: int, size: int) -> ir.Model:
    """Constant nodes reading 1-3 earlier values (weights or results) at random."""
    rng = random.Random(seed)
    weights = [numpy_helper.from_array(np.full([1], k, np.float32), f"w{k}") for k in range(8)]
    names = [w.name for w in weights]
    nodes = []
    for k in range(size):
        ins = rng.sample(names, rng.randint(1, min(3, len(names))))
        op = {1: "Neg", 2: "Add", 3: "Sum"}[len(ins)]
        nodes.append(helper.make_node(op, ins, [f"v{k}"]))
        names.append(f"v{k}")
    graph = helper.make_graph(nodes, "dag", [],
                              [helper.make_tensor_value_info(f"v{size - 1}", TensorProto.FLOAT,
                                                             [1])],
                              initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return ir.serde.deserialize_model(model)


@pytest.mark.parametrize("seed", range(5))
def test_traced_origins_are_the_kept_ones(monkeypatch, seed):
    """With room for 2 sources per kept set most values are traced anew: each gives the
    sources a set kept without bound gives."""
    model = _random_constant_dag(seed, 60)
    plan = plan_graph(model.graph, model.ir_version, facts=load_catalogue())
    assert len(plan.foldable) == 60
    kept = policy.Origins(plan)
    monkeypatch.setattr(policy, "MAX_KEPT_ORIGINS", 2)
    traced = policy.Origins(plan)
    values = [*plan.sources, *(v for node in plan.foldable for v in node.outputs)]
    assert sum(traced._sets[v] is None for v in values) > 10  # the traces ran
    for value in values:
        assert traced.get(value) == kept.get(value), value.name
    outside = ir.Value(name="not constant")
    assert traced.get(outside) is None and traced.get(outside, frozenset()) == frozenset()
