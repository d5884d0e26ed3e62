"""The check's runners (``onnxfold.check.running.runner.Runner``): a whole session
(``WholeSession``) and a chain of stages (``stages.Chain``) run by ``run_model`` and
``run_reference`` without the caller asking which: the same values, the same errors, every
run bounded."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.check.inputs.feeds import FeedPlan
from onnxfold.check.outputs.reference_runs import run_optimized, run_reference
from onnxfold.check.running import memory
from onnxfold.check.running.models import graph_of
from onnxfold.check.running.runner import MachineShort, WholeSession, open_session, run_model
from onnxfold.check.running.stage_plan import plan_alone
from onnxfold.check.running.stages import Chain
from onnxfold.errors import InputError

WIDTH = 64


def _layers(path, layers: int = 4) -> None:
    """``layers`` MatMul + Add + Relu of ``WIDTH`` square float32 weights, batch dynamic."""
    rng = np.random.default_rng(0)
    nodes, weights, last = [], [], "x"
    for k in range(layers):
        weights += [numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH), np.float32)
                                            .astype(np.float32), f"w{k}"),
                    numpy_helper.from_array(rng.standard_normal(WIDTH).astype(np.float32),
                                            f"b{k}")]
        nodes += [helper.make_node("MatMul", [last, f"w{k}"], [f"m{k}"]),
                  helper.make_node("Add", [f"m{k}", f"b{k}"], [f"a{k}"]),
                  helper.make_node("Relu", [f"a{k}"], [f"h{k}"])]
        last = f"h{k}"
    graph = helper.make_graph(
        nodes, "layers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", WIDTH])],
        [helper.make_tensor_value_info(last, TensorProto.FLOAT, ["n", WIDTH])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.fixture
def runners(tmp_path):
    """The model at ``tmp_path/m.onnx``, as a whole session and as a chain of several stages
    (both without onnxruntime's rewrites: the same kernels, the same bits)."""
    path = tmp_path / "m.onnx"
    _layers(path)
    model = graph_of(str(path), "m")
    stages = plan_alone(model, WIDTH * WIDTH * 4 + 1024)  # one layer's weights a stage
    assert len(stages) >= 4
    return open_session(str(path), "m", level="disable"), Chain(model, stages, "m", (),
                                                               "disable"), model


def test_a_chain_and_a_whole_session_run_alike(runners):
    whole, chain, _ = runners
    assert not whole.in_stages and chain.in_stages
    assert [a.name for a in whole.get_inputs()] == [a.name for a in chain.get_inputs()]
    assert [a.name for a in whole.get_outputs()] == [a.name for a in chain.get_outputs()]
    feeds = {"x": np.random.default_rng(1).standard_normal((3, WIDTH)).astype(np.float32)}
    outputs = [a.name for a in whole.get_outputs()]
    got = [run_model(r, "m", outputs, feeds, None) for r in (whole, chain)]
    assert got[0][0].tobytes() == got[1][0].tobytes()
    assert whole.results(feeds) == {}  # a whole session keeps nothing of a set
    assert set(chain.results(feeds)) >= set(outputs)


def test_the_reference_and_the_optimized_runs_take_either_runner(runners):
    """``run_reference`` runs a chain's sets at once and a session's one by one; the values
    are the same, and ``run_optimized`` takes either as model B."""
    whole, chain, model = runners
    told: list[str] = []
    chain.tell = told.append
    got = {}
    for runner in (whole, chain):
        plan = FeedPlan(runner, "m", model, {}, {}, {})
        reference = run_reference(runner, "m", ["h3"], plan, 0, 2, None, every_binding=False)
        ran = run_optimized(runner, "m", ["h3"], reference, None)
        assert not ran.failure and len(ran.outputs) == 2
        for a, b in zip(reference.outputs, ran.outputs, strict=True):
            assert b is not None and a[0].tobytes() == b[0].tobytes()
        got[runner.in_stages] = [x[0].tobytes() for x in reference.outputs]
    assert got[False] == got[True]
    # each stage's session built once for both sets, by each of the two calls
    assert told.count(f"stage 1/{len(chain.stages)}") == 2, told


def test_a_run_onnxruntime_refuses_is_the_inputs_fault_in_either(runners):
    whole, chain, _ = runners
    wrong = {"x": np.zeros((2, WIDTH + 1), np.float32)}
    for runner in (whole, chain):
        with pytest.raises(InputError, match="onnxruntime failed to run it"):
            run_model(runner, "m", ["h3"], wrong, None)


def test_a_whole_sessions_run_is_bounded_by_the_memory_left(tmp_path, monkeypatch):
    """``WholeSession.run`` holds the address space to the memory left: a run that needs
    more is the machine's shortage (a run outside the bound would have succeeded here)."""
    path = tmp_path / "expand.onnx"
    graph = helper.make_graph(
        [helper.make_node("Expand", ["x", "shape"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    session = open_session(str(path), "e")
    assert isinstance(session, WholeSession)
    feeds = {"x": np.ones(1, np.float32), "shape": np.array([64 << 20], np.int64)}  # 256 MiB
    assert run_model(session, "e", ["y"], feeds, None)[0].size == 64 << 20  # unbounded: runs
    monkeypatch.setattr(memory, "room", lambda: 0)
    with pytest.raises(MachineShort):
        run_model(session, "e", ["y"], feeds, None)
