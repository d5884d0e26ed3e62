"""Model-local functions that expand to far more nodes than the file holds finish in bounded time.

``f_k`` calls ``f_(k-1)`` twice: 40 levels are 4 KB of functions and 2**39 nodes once every call
is expanded. Inlining (``--inline-functions``), shape inference and the verification in
onnxruntime all expand calls; each must see the expanded size first and decline (with a warning
in the report) instead of running without end. Each run here has a 30 s limit.

Many functions, each called once (10,000 is the checker's limit), cost time linear in their
number: inlining them (onnx-ir's abbreviation of function ids compared every pair) and folding
their bodies (each body's fold read the cgroup's memory limit again) are measured by their
growth, in CPU time, or by the reads they make.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxfold
from onnxfold.fold import budget
from onnxfold.pipeline.inlining import inline_functions
from tests.support.cli import assert_ok, assert_one_error_line, run_cli
from tests.support.growth import assert_linear_growth, cpu_seconds

LIMIT = 30  # seconds: every run here must end well within this
DOMAIN = "local"


def nest(levels: int) -> onnx.ModelProto:
    """``f_0 = Relu``, ``f_k(x) = f_(k-1)(f_(k-1)(x))``; the graph calls ``f_(levels-1)``."""
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    functions = [helper.make_function(DOMAIN, "f0", ["x"], ["y"],
                                      [helper.make_node("Relu", ["x"], ["y"])], opsets[:1])]
    functions.extend(helper.make_function(DOMAIN, f"f{k}", ["x"], ["y"], [
        helper.make_node(f"f{k - 1}", ["x"], ["a"], domain=DOMAIN),
        helper.make_node(f"f{k - 1}", ["a"], ["y"], domain=DOMAIN)], opsets)
        for k in range(1, levels))
    graph = helper.make_graph(
        [helper.make_node(f"f{levels - 1}", ["x"], ["y"], domain=DOMAIN)], "nest",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, functions=functions, opset_imports=opsets)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("inline", [False, True], ids=["functions-kept", "inline-functions"])
def test_forty_level_nest_finishes(tmp_path, inline):
    source, out = tmp_path / "nest.onnx", tmp_path / "out.onnx"
    onnx.save(nest(40), source)
    done = run_cli("optimize", source, "-o", out, *(["--inline-functions"] if inline else []),
                   timeout=LIMIT)
    assert_ok(done)
    written = onnx.load(out)
    assert len(written.functions) == 40  # nothing inlined, nothing lost
    onnx.checker.check_model(written)
    assert "not verified in onnxruntime" in done.stdout  # onnxruntime would inline 2**39 nodes
    if inline:
        assert "--inline-functions: nothing inlined" in done.stdout
        assert "more than 100,000 nodes" in done.stdout


def test_twenty_level_nest_is_not_verified_in_onnxruntime(tmp_path):
    """2**19 nodes once inlined: the verification would load them for minutes."""
    source, out = tmp_path / "nest.onnx", tmp_path / "out.onnx"
    onnx.save(nest(20), source)
    done = run_cli("optimize", source, "-o", out, timeout=LIMIT)
    assert_ok(done)
    assert "not verified in onnxruntime" in done.stdout
    assert len(onnx.load(out).functions) == 20


def test_nest_in_a_batch_does_not_hold_up_the_others(tmp_path):
    inputs, outputs = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    onnx.save(nest(40), inputs / "deep.onnx")
    onnx.save(nest(3), inputs / "small.onnx")
    done = run_cli("optimize", inputs, "-o", f"{outputs}/", "--inline-functions",
                   timeout=LIMIT)
    assert_ok(done)
    assert len(onnx.load(outputs / "deep.onnx").functions) == 40
    assert not onnx.load(outputs / "small.onnx").functions  # inlined: within the budget


def test_many_calls_of_one_function_inline_in_linear_time(tmp_path):
    """2,048 calls of Relu through 12 levels, 8x the 256 of 9 levels: about 8x the time
    (onnx-ir's naming of the copies was quadratic: 45 s); inlined, the model computes what
    the original computes, every output name once."""
    assert_linear_growth(_inlining_seconds(nest(9)), _inlining_seconds(nest(12)), "calls", 256)
    source, out = tmp_path / "nest.onnx", tmp_path / "out.onnx"
    onnx.save(nest(12), source)
    done = run_cli("optimize", source, "-o", out, "--inline-functions", timeout=LIMIT)
    assert_ok(done)
    written = onnx.load(out)
    assert not written.functions
    assert sum(node.op_type == "Relu" for node in written.graph.node) == 2048
    names = [name for node in written.graph.node for name in node.output]
    assert len(names) == len(set(names))
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    want = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])


def relu_functions(count: int) -> onnx.ModelProto:
    """``count`` functions ``f_k = Relu``, each called once, one after the other."""
    return _called_in_turn([[helper.make_node("Relu", ["x"], ["y"])] for _ in range(count)])


def _called_in_turn(bodies: list[list[onnx.NodeProto]]) -> onnx.ModelProto:
    """A model calling functions ``f_k(x) -> y`` with these bodies once each, one after the
    other (``v_k = f_k(v_{k-1})``), on a float ``x`` of shape [3]."""
    count = len(bodies)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    functions = [helper.make_function(DOMAIN, f"f{k}", ["x"], ["y"], body, opsets[:1])
                 for k, body in enumerate(bodies)]
    nodes = [helper.make_node(f"f{k}", ["x" if k == 0 else f"v{k - 1}"], [f"v{k}"],
                              domain=DOMAIN) for k in range(count)]
    graph = helper.make_graph(nodes, "many", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [3])], [helper.make_tensor_value_info(
            f"v{count - 1}", TensorProto.FLOAT, [3])])
    return helper.make_model(graph, functions=functions, opset_imports=opsets)


def _optimize_seconds(proto: onnx.ModelProto) -> float:
    """CPU seconds of ``onnxfold.optimize`` on ``proto`` (:func:`cpu_seconds`)."""
    def run(_: None) -> None:
        result = onnxfold.optimize(proto, check=False)
        assert len(result.model.functions) == len(proto.functions)
    return cpu_seconds(run)


def test_thousands_of_functions_cost_linear_time(tmp_path):
    """8x the functions, each called once, about 8x the time: onnx's shape inference copied
    the table of functions for every call it expanded, and the functions' folding planned each
    body against every function's name; both were quadratic (10,000 functions, the checker's
    limit, took minutes). The command line writes all 6,000 back."""
    assert_linear_growth(_optimize_seconds(relu_functions(750)),
                         _optimize_seconds(relu_functions(6_000)), "functions", 750)
    source, out = tmp_path / "many.onnx", tmp_path / "out.onnx"
    onnx.save(relu_functions(6_000), source)
    done = run_cli("optimize", source, "-o", out, timeout=LIMIT)
    assert_ok(done)
    assert len(onnx.load(out).functions) == 6_000


@pytest.mark.parametrize("how", ["compare", "optimize --check", "run"])
def test_running_a_nest_in_onnxruntime_is_refused(tmp_path, how):
    """compare, --check and run load the model in onnxruntime, which inlines every call
    (2**19 nodes here: it did not end); they refuse it in one line instead."""
    source = tmp_path / "nest.onnx"
    onnx.save(nest(20), source)
    np.savez(tmp_path / "in.npz", x=np.ones(3, np.float32))
    args = {"compare": ["compare", source, source],
            "optimize --check": ["optimize", source, "--check", "1", "-o", tmp_path / "out.onnx"],
            "run": ["run", source, "--inputs", tmp_path / "in.npz"]}[how]
    assert_one_error_line(run_cli(*args, timeout=LIMIT), "onnxruntime would inline its local "
                          "functions into more than 20,000 nodes")
    assert not (tmp_path / "out.onnx").exists()


def test_a_small_nest_still_runs_in_onnxruntime(tmp_path):
    source = tmp_path / "nest.onnx"
    onnx.save(nest(8), source)
    done = run_cli("compare", source, source, timeout=LIMIT)
    assert_ok(done)
    assert "all outputs within tolerance" in done.stdout


def folding_functions(count: int) -> onnx.ModelProto:
    """``count`` functions ``f_k(x) = x + Neg(c_k)``, a literal Constant ``c_k`` in each body
    (so each body folds), called once each, one after the other."""
    return _called_in_turn([[
        helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
            "c", TensorProto.FLOAT, [3], [k, 1.0, 2.0])),
        helper.make_node("Neg", ["c"], ["n"]),
        helper.make_node("Add", ["x", "n"], ["y"])] for k in range(count)])


def _inlining_seconds(proto: onnx.ModelProto) -> float:
    """CPU seconds of inlining every function of ``proto`` (:func:`cpu_seconds`)."""
    def run(model: ir.Model) -> None:
        changed, why = inline_functions(model)
        assert changed and why is None and not model.functions
    return cpu_seconds(run, lambda: ir.serde.deserialize_model(proto))


def test_inlining_thousands_of_functions_grows_linearly():
    """8x the functions, about 8x the time (onnx-ir's abbreviation of function ids compared
    each id with every other: 8 s of 12 for 10,000 functions)."""
    assert_linear_growth(_inlining_seconds(folding_functions(500)),
                         _inlining_seconds(folding_functions(4_000)), "functions", 500)


def test_folding_function_bodies_reads_the_memory_limit_once(monkeypatch):
    """The pool budget of every body's fold is the run's: read from the cgroup once, not
    twice per body (40% of the time of 10,000 bodies)."""
    reads = []
    real = budget.available_memory
    monkeypatch.setattr(budget, "available_memory", lambda: reads.append(1) or real())
    result = onnxfold.optimize(folding_functions(300))
    assert result.report.function_constants == 300
    assert len(reads) <= 3, f"the memory limit was read {len(reads)} times for 300 bodies"


def test_ten_thousand_folding_functions(tmp_path):
    """The checker's limit of functions, every body folded (4 s measured alone; 7.6 s before
    the two fixes above): given 120 s, as a loaded machine running the suite in parallel
    needs; the growth tests above hold the linearity."""
    source, out = tmp_path / "many.onnx", tmp_path / "out.onnx"
    onnx.save(folding_functions(10_000), source)
    done = run_cli("optimize", source, "-o", out, timeout=120)
    assert_ok(done)
    written = onnx.load(out)
    assert len(written.functions) == 10_000
    assert all("Neg" not in [n.op_type for n in f.node] for f in written.functions)
