"""The check in stages (``onnxfold.check.running.stages``): both models cut where they hand on
the same values, every stage within its budget of weights, run stage by stage and compared
at the cuts and the outputs; what it finds is what the check in one session finds."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from bench.llm_model import Shape, build
from onnxfold.check.compare import compare_models
from onnxfold.check.folds.verdicts import BITWISE, DIFFERS
from onnxfold.check.running.models import graph_of
from onnxfold.check.running.options import CompareOptions
from onnxfold.check.running.stage_plan import plan_stages, read_from_inputs
from onnxfold.check.running.stages import Chain
from onnxfold.errors import InputError
from tests.support.models import shared_input_products

TINY = Shape(layers=2, hidden=64, mlp=128, heads=4, kv_heads=2, vocab=100)
BUDGET = 20_000  # bytes of weights: a stage per projection or two


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    """A two-layer decoder with a KV cache (rotary, GQA, SwiGLU, float16; weights in external
    data), and its fold."""
    directory = tmp_path_factory.mktemp("decoder")
    source = directory / "d.onnx"
    build(str(source), TINY)
    folded = directory / "f.onnx"
    onnxfold.optimize(str(source)).save(str(folded))
    return source, folded


def test_stages_cover_every_node_once_in_order_within_the_budget(decoder):
    source, folded = decoder
    a, b = graph_of(str(source), "a"), graph_of(str(folded), "b")
    plan = plan_stages(a, b, BUDGET)
    assert len(plan.a) == len(plan.cuts) + 1 > 4 and len(plan.b) > 4
    for model, stages in ((a, plan.a), (b, plan.b)):
        nodes = [n for w in stages for n in w.nodes]
        assert sorted(map(id, nodes)) == sorted(map(id, model.graph))  # each node once
        made: set[str] = set()
        for stage in stages:  # nothing is read before it is made
            inside = {str(o.name) for n in stage.nodes for o in n.outputs}
            assert all(name in made or name not in _computed(model) for name in stage.reads)
            made |= inside
        assert all(w.weight_bytes <= BUDGET or len(w.nodes) == 1 for w in stages)
    assert sum(1 for cut in plan.cuts if cut) >= len(plan.cuts) - 1  # nearly every cut shared
    compared = [name for cut in plan.cuts for name in cut]
    assert len(compared) == len(set(compared))  # each value compared once
    for k, cut in enumerate(plan.cuts):  # both hand on each value at its cut
        for stages in (plan.a, plan.b):
            done = [w for w in stages if any(
                o.name in cut for n in w.nodes for o in n.outputs)]
            assert done, (k, cut)


def test_a_value_made_from_constants_alone_is_made_where_it_is_read(deep_decoder):
    """No stage reads from an earlier one a value computed from the model's constants alone
    (a weight's transpose): it is computed where it is read, so that onnxruntime folds it into
    a constant there and prepacks it for the MatMul that reads it, as one session does. Every
    other node is in exactly one stage."""
    source, folded, _ = deep_decoder
    a, b = graph_of(str(source), "a"), graph_of(str(folded), "b")
    for budget in (20_000, 300_000):
        plan = plan_stages(a, b, budget)
        for model, stages in ((a, plan.a), (b, plan.b)):
            constant = _from_constants(model)
            assert not {name for w in stages for name in w.reads} & constant
            counts: dict[int, int] = {}
            for stage in stages:
                for node in stage.nodes:
                    counts[id(node)] = counts.get(id(node), 0) + 1
            assert all(counts.get(id(n)) == 1 for n in model.graph
                       if not {str(o.name) for o in n.outputs} <= constant)
        assert any(str(n.outputs[0].name) in _from_constants(a) for n in a.graph)  # (exercised)


def _from_constants(model):
    """The values of ``model`` its nodes compute from its initializers alone."""
    graph = model.graph
    found: set[str] = set()
    for node in graph:
        if all(v is None or (v.name in graph.initializers and v not in graph.inputs) or
               str(v.name) in found for v in node.inputs):
            found.update(str(o.name) for o in node.outputs)
    return found


def _computed(model):
    return {str(o.name) for n in model.graph for o in n.outputs}


def test_a_chain_runs_what_the_model_computes(decoder):
    """Run in stages, a model computes what one session of it computes, within float16's
    rounding at the cuts (a session fuses across them)."""
    import onnxruntime as ort

    source, _ = decoder
    model = graph_of(str(source), "a")
    plan = plan_stages(model, model, BUDGET)
    chain = Chain(model, plan.a, "a", (), "all")
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, TINY.vocab, (2, 3)),
             "attention_mask": np.ones((2, 5), np.int64)}
    for i in range(TINY.layers):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = rng.standard_normal(
                (2, TINY.kv_heads, 2, TINY.head)).astype(np.float16)
    names = [o.name for o in chain.get_outputs()]
    got = chain.run(names, feeds)
    want = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(names, feeds)
    for name, x, y in zip(names, got, want, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype, name
        np.testing.assert_allclose(x.astype(np.float32), y.astype(np.float32), atol=2e-3,
                                   err_msg=name)


def test_in_stages_the_check_passes_where_it_passes_whole(decoder):
    source, folded = decoder
    whole = compare_models(str(source), str(folded), 2, CompareOptions())
    stages = compare_models(str(source), str(folded), 2, CompareOptions(window_bytes=BUDGET))
    assert whole.ok and stages.ok, stages.summary()
    assert not whole.windows and "compared stage by stage" in stages.windows
    assert stages.cut_rows and all(row.ok for row in stages.cut_rows)
    assert "values at the cuts:" in stages.summary()
    assert stages.to_dict()["cuts"] and stages.to_dict()["windows"]


def _planted(folded, out):
    """``folded`` with one element of its largest float16 weight moved far off."""
    model = onnx.load(str(folded))
    target = max((t for t in model.graph.initializer if t.data_type == TensorProto.FLOAT16),
                 key=lambda t: np.prod(t.dims))
    arr = numpy_helper.to_array(target).copy()
    arr.reshape(-1)[0] = arr.reshape(-1)[0] * 2 + 1
    target.CopyFrom(numpy_helper.from_array(arr, target.name))
    onnx.save(model, str(out))
    return out


def test_in_stages_a_wrong_weight_fails_at_a_cut_and_an_output(decoder, tmp_path):
    source, folded = decoder
    planted = _planted(folded, tmp_path / "p.onnx")
    whole = compare_models(str(source), str(planted), 1, CompareOptions(verify=False))
    stages = compare_models(str(source), str(planted), 1,
                             CompareOptions(verify=False, window_bytes=BUDGET))
    assert not whole.ok and not stages.ok
    assert {r.name for r in whole.rows if not r.ok} == {r.name for r in stages.rows if not r.ok}
    assert any(not row.ok for row in stages.cut_rows)  # where the chains part
    assert set(whole.failing) == set(stages.failing)  # the outputs decide


def test_graphs_that_share_no_values_are_cut_each_on_its_own(decoder, tmp_path):
    """Where the optimized model names none of the original's values but its outputs
    (another tool renamed them), the cuts share at most those: both are still cut within
    the budget and compared at the outputs."""
    source, folded = decoder
    model = onnx.load(str(folded))
    outputs = {o.name for o in model.graph.output}
    renamed = {}
    for node in model.graph.node:
        for i, name in enumerate(node.output):
            if name and name not in outputs:
                renamed[name] = node.output[i] = f"r_{name}"
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = renamed.get(name, name)
    other = tmp_path / "renamed.onnx"
    onnx.save(model, str(other))
    a, b = graph_of(str(source), "a"), graph_of(str(other), "b")
    plan = plan_stages(a, b, BUDGET)
    assert {name for cut in plan.cuts for name in cut} <= outputs
    assert len(plan.a) > 1 and len(plan.b) > 1
    assert all(w.weight_bytes <= BUDGET or len(w.nodes) == 1 for w in plan.b)
    result = compare_models(str(source), str(other), 1,
                            CompareOptions(verify=False, window_bytes=BUDGET))
    assert result.ok and all(row.name.split(" (cut")[0] in outputs for row in result.cut_rows)


@pytest.mark.parametrize("budget", [0, -1, True, 2.5])
def test_a_stage_budget_must_be_a_positive_number_of_bytes(budget):
    with pytest.raises(InputError, match="window_bytes"):
        CompareOptions(window_bytes=budget)


def test_in_stages_every_rewrite_is_validated_from_the_chain(tmp_path):
    """The rewrites' leaves inside a stage (not handed on at a cut) come from the
    original's chain too: none that reads the graph inputs is computed again (its cone is
    most of the model); a leaf of the weights alone (a transposed weight) is, where it is
    read (the chain would hold every one of them for every input set)."""
    from onnxfold.check.running import cones

    source = tmp_path / "products.onnx"
    shared_input_products(source)
    result = onnxfold.optimize(str(source), record_rewrites=True)
    out = tmp_path / "f.onnx"
    result.save(str(out))
    ran: list = []
    original = cones.Cones.run

    def counted(self, sources, inputs, exact=True, **options):
        ran.append(sources)
        return original(self, sources, inputs, exact, **options)

    cones.Cones.run = counted  # type: ignore[method-assign]
    try:
        checked = compare_models(str(source), str(out), 1,
                                 CompareOptions(verify=False, window_bytes=BUDGET * 4),
                                 evidence=result.evidence)
    finally:
        cones.Cones.run = original  # type: ignore[method-assign]
    assert checked.rewrites is not None and checked.rewrites.all_validated, checked.summary()
    from_inputs = read_from_inputs(graph_of(str(source), "a"))
    assert ran and not any(str(v.name) in from_inputs for sources in ran for v in sources)


def _constant_output_model(path, shape_value=None):
    """y = x @ Transpose(W) and s = Shape(W): the fold makes ``s`` an initializer (no node
    makes it), and ``Identity(x)`` an output; ``shape_value`` plants another value of s."""
    from onnx import helper

    from tests.support.models import make_model, vinfo

    w = np.random.default_rng(5).standard_normal((64, 64)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["W"], ["Wt"]),
             helper.make_node("MatMul", ["x", "Wt"], ["y"]),
             helper.make_node("Shape", ["W"], ["s"])]
    model = make_model(nodes, [vinfo("x", shape=[2, 64])],
                       [vinfo("y", shape=[2, 64]), vinfo("s", TensorProto.INT64, [2])],
                       [numpy_helper.from_array(w, "W")])
    onnx.save(model, str(path))
    return path


def test_in_stages_an_output_no_node_makes_is_compared(tmp_path):
    """An output the fold made an initializer (a shape) is handed back by the chain, and
    compared: the check in stages failed on it ("onnxruntime failed to run it: 's'"), and
    declined a model without nodes (max() of no stages)."""
    from tests.support.models import make_model, vinfo

    source = _constant_output_model(tmp_path / "m.onnx")
    folded = tmp_path / "f.onnx"
    onnxfold.optimize(str(source)).save(str(folded))
    assert "s" in {t.name for t in onnx.load(str(folded)).graph.initializer}
    for budget in (None, 1, 5000):
        result = compare_models(str(source), str(folded), 2, CompareOptions(window_bytes=budget))
        assert result.ok, (budget, result.summary())
    planted = onnx.load(str(folded))
    for t in planted.graph.initializer:
        if t.name == "s":
            t.CopyFrom(numpy_helper.from_array(np.array([64, 65], np.int64), "s"))
    wrong = tmp_path / "w.onnx"
    onnx.save(planted, str(wrong))
    for budget in (None, 1):
        result = compare_models(str(source), str(wrong), 1,
                                CompareOptions(window_bytes=budget, verify=False))
        assert not result.ok and not result.failure and \
            [r.name for r in result.rows if not r.ok] == ["s"], budget
    empty = tmp_path / "e.onnx"
    onnx.save(make_model([], [vinfo("x", shape=[2])], [vinfo("x", shape=[2])]), str(empty))
    assert compare_models(str(empty), str(empty), 1, CompareOptions(window_bytes=1)).ok



def test_a_stages_weights_start_64_bytes_aligned_and_are_fed_uncopied(decoder):
    """The weight buffer starts each weight at a multiple of 64 bytes, as the runner feeds
    them (numpy starts a large array 16 bytes past one: the runner copied every weight of
    every stage again for every input set)."""
    from onnxfold.check.running import handed, runner

    source, folded = decoder
    copies = []
    original = runner.aligned

    def counted(array):
        out = original(array)
        if out is not array and array.nbytes > handed.HANDED_FROM:
            copies.append(array.nbytes)
        return out

    runner.aligned = counted  # type: ignore[assignment]
    try:
        result = compare_models(str(source), str(folded), 2,
                                CompareOptions(verify=False, window_bytes=BUDGET))
    finally:
        runner.aligned = original  # type: ignore[assignment]
    assert result.ok
    weights = sum(v.const_value.nbytes for v in graph_of(str(source), "a").graph.initializers
                  .values() if v.const_value is not None)
    assert sum(copies) < weights / 10, (len(copies), sum(copies))


def test_an_input_truncated_while_the_stages_run_stops_the_check_at_once(tmp_path):
    """A data file truncated while the chain reads it is an InputError of the file, not a
    binding the original fails at: the check tried every guessed dim (40 bindings of the
    decoder) and said 'dims guessed: ... (--dim NAME=VALUE sets one the model runs at)'."""
    import os

    source = tmp_path / "d.onnx"
    build(str(source), TINY)
    folded = tmp_path / "f.onnx"
    onnxfold.optimize(str(source)).save(str(folded))
    runs = []
    original = Chain.run_all

    def truncating(self, feed_sets):
        runs.append(self.label)
        os.truncate(str(source) + ".data", 1000)
        return original(self, feed_sets)

    Chain.run_all = truncating  # type: ignore[method-assign]
    try:
        with pytest.raises(InputError) as raised:
            compare_models(str(source), str(folded), 1,
                           CompareOptions(verify=False, window_bytes=BUDGET))
    finally:
        Chain.run_all = original  # type: ignore[method-assign]
    said = str(raised.value)
    assert said.startswith(str(source) + ".data: ") and "guessed" not in said
    assert len(runs) == 1


def test_a_float16_models_session_is_weighed_with_its_float32_copies(tmp_path, monkeypatch):
    """onnxruntime holds a float32 copy of float16 weights (3.4x the weights in all, measured
    on a float16 decoder): a room that fits twice the weights but not that is no room for a
    whole session (one was chosen, and the kernel killed the check in a 900 MiB cgroup)."""
    from onnx import helper

    from onnxfold.check import compare as compare_module
    from onnxfold.check.running import memory
    from tests.support.models import make_model, vinfo

    weights = 1 << 20
    w = np.ones((512, 1024), np.float16)
    model = make_model([helper.make_node("MatMul", ["x", "W"], ["y"])],
                       [vinfo("x", TensorProto.FLOAT16, [1, 512])],
                       [vinfo("y", TensorProto.FLOAT16, [1, 1024])],
                       [numpy_helper.from_array(w, "W")])
    path = tmp_path / "h.onnx"
    onnx.save(model, str(path))
    graph = graph_of(str(path), "a")
    assert memory.weighed(graph) == (weights, weights)
    monkeypatch.setattr(memory, "room", lambda: memory.SESSION_OVERHEAD + 3 * weights)
    with pytest.raises(compare_module.CheckCouldNotRun, match="largest stage"):
        # (its one stage needs 4x: none fits)
        compare_module._stages(memory.weighed(graph), memory.weighed(graph), graph, graph, None)
    monkeypatch.setattr(memory, "room", lambda: memory.SESSION_OVERHEAD + 4 * weights)
    assert compare_module._stages(memory.weighed(graph), memory.weighed(graph), graph, graph,
                                   None) is None


def test_an_empty_sequence_handed_on_at_a_cut_is_fed_as_one(tmp_path):
    """A sequence that is empty where it crosses a cut (SequenceEmpty, filled stages later)
    is declared with the element type the stage that made it gave it: the check in stages
    declined ('s0: an empty sequence, whose element type is unknown') where one session
    passes."""
    from onnx import helper

    from tests.support.models import make_model, vinfo

    rng = np.random.default_rng(6)
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=TensorProto.FLOAT),
             helper.make_node("MatMul", ["x", "W1"], ["h"]),
             helper.make_node("MatMul", ["h", "W2"], ["h2"]),
             helper.make_node("SequenceInsert", ["s0", "h2"], ["s1"]),
             helper.make_node("SequenceInsert", ["s1", "h"], ["s2"]),
             helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0)]
    model = make_model(nodes, [vinfo("x", shape=[2, 32])], [vinfo("y", shape=[4, 32])],
                       [numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32),
                                                name) for name in ("W1", "W2")])
    path = tmp_path / "s.onnx"
    onnx.save(model, str(path))
    for budget in (None, 1):
        assert compare_models(str(path), str(path), 1, CompareOptions(window_bytes=budget)).ok


def test_onnxfold_compare_takes_a_stage_budget(decoder):
    """``onnxfold.compare(..., window_bytes=N)``, as check.md says (it was a TypeError: only
    ``CompareOptions`` took one)."""
    source, folded = decoder
    result = onnxfold.compare(str(source), str(folded), window_bytes=BUDGET, verify=False)
    assert result.ok and "compared stage by stage" in result.windows


def test_an_optimized_model_whose_session_does_not_fit_runs_in_stages(decoder, monkeypatch):
    """The original's session fitted and the optimized model's does not (a fold that grew
    its weights, or less memory left after the original's outputs): B runs stage by stage
    and is compared at the outputs, instead of declining."""
    from onnxfold.check import compare as compare_module
    from onnxfold.check.running.runner import MachineShort

    source, folded = decoder
    original = compare_module.open_session

    def short_for_b(model, label, *args, **kwargs):
        if str(model) == str(folded):
            raise MachineShort(f"{label}: loading it: out of memory")
        return original(model, label, *args, **kwargs)

    monkeypatch.setattr(compare_module, "open_session", short_for_b)
    # (where B does not fit after A, both do not fit at once: B is not built beside A)
    monkeypatch.setattr(compare_module.memory_room, "both_sessions_fit", lambda a, b: False)
    result = compare_models(str(source), str(folded), 2, CompareOptions(verify=False))
    assert result.ok, result.summary()
    assert result.windows.startswith("the optimized model ran stage by stage")
    assert not result.cut_rows


def test_each_chain_runs_its_input_sets_once(decoder, monkeypatch):
    """The values at the cuts come from the run that made the outputs: asking the optimized
    chain for them with the reference's feeds (not the mappings it was fed, which keep only
    what it takes) ran every stage of it a second time."""
    source, folded = decoder
    runs = []
    real = Chain.run_all
    monkeypatch.setattr(Chain, "run_all", lambda self, sets: runs.append(len(sets))
                        or real(self, sets))
    stages = compare_models(str(source), str(folded), 2,
                             CompareOptions(verify=False, window_bytes=BUDGET))
    assert stages.ok and stages.cut_rows
    assert len(runs) == 2, runs  # the original's chain, the optimized one's: each once


def test_in_stages_the_bindings_no_set_uses_run_only_for_folds_that_read_dims(tmp_path):
    """In stages each binding of the dims is a whole run of the original over its weights
    read again: the bindings no compared input set uses (which the fold verification
    re-derives at) run only where a folded tensor's original reads the dynamic dims. The
    projections of a decoder fold weight transposes alone: one binding (it was three, 2/3 of
    the check of a 7B slice); a fold of a static dim read from a dynamic input's shape keeps
    all three (and in one session all three always run)."""
    from onnx import helper

    source, folded = tmp_path / "s.onnx", tmp_path / "f.onnx"
    build(str(source), Shape(layers=2, hidden=64, mlp=128, heads=4, kv_heads=2, vocab=100,
                             attention=False))
    onnxfold.optimize(str(source)).save(str(folded))
    stages = compare_models(str(source), str(folded), 1, CompareOptions(window_bytes=BUDGET))
    whole = compare_models(str(source), str(folded), 1, CompareOptions())
    assert stages.ok and whole.ok and stages.windows and not whole.windows
    assert len(stages.bindings) == 1 and len(whole.bindings) == 3
    assert stages.folds is not None and stages.folds.tensors
    states = {t.state for t in stages.folds.tensors}
    assert BITWISE in states and DIFFERS not in states, states

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal(
        (8, 8)).astype(np.float32), "w")
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["shape"]),  # 8: static, read from x's shape
         helper.make_node("Gather", ["shape", "one"], ["width"]),
         helper.make_node("Cast", ["width"], ["scale"], to=TensorProto.FLOAT),
         helper.make_node("MatMul", ["x", "w"], ["m"]),
         helper.make_node("Mul", ["m", "scale"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])], [w, one])
    dims = tmp_path / "d.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(dims))
    out = tmp_path / "do.onnx"
    onnxfold.optimize(str(dims)).save(str(out))
    assert "scale" in {t.name for t in onnx.load(str(out)).graph.initializer}
    stages = compare_models(str(dims), str(out), 1, CompareOptions(window_bytes=64))
    assert stages.ok and stages.windows and len(stages.bindings) == 3, stages.summary()


def test_in_stages_a_baked_dynamic_dim_is_still_re_derived_at_other_bindings(tmp_path):
    """The wrong model the fewer bindings could let through: a dynamic dim baked at the first
    binding's value (n = 1, where the one compared input set agrees). Its original reads the
    dim, so every binding runs and the fold verification finds it at n = 2."""
    from onnx import helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal(
        (8, 8)).astype(np.float32), "w")
    zero = numpy_helper.from_array(np.array([0], np.int64), "zero")
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["rows"]),
             helper.make_node("Cast", ["rows"], ["scale"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Mul", ["m", "scale"], ["y"])]
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])])
    source, baked = tmp_path / "s.onnx", tmp_path / "b.onnx"
    opsets = [helper.make_opsetid("", 17)]
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", *io, [w, zero]),
                                opset_imports=opsets, ir_version=8), str(source))
    one = numpy_helper.from_array(np.array([1.0], np.float32), "scale")
    onnx.save(helper.make_model(helper.make_graph(nodes[3:], "g", *io, [w, one]),
                                opset_imports=opsets, ir_version=8), str(baked))
    result = compare_models(str(source), str(baked), 1, CompareOptions(window_bytes=64))
    assert result.windows and not result.ok, result.summary()
    assert len(result.bindings) == 3
    assert result.folds is not None and any(t.state == DIFFERS for t in result.folds.tensors)


DEEP = Shape(layers=4, hidden=512, mlp=1376, heads=8, kv_heads=2, vocab=500)


@pytest.fixture(scope="module")
def deep_decoder(tmp_path_factory):
    """A four-layer float16 decoder (the fold merges each layer's three projections of the
    same input into one MatMul), its fold and its rewrites' record."""
    directory = tmp_path_factory.mktemp("deep")
    source = directory / "d.onnx"
    build(str(source), DEEP)
    result = onnxfold.optimize(str(source), record_rewrites=True)
    folded = directory / "f.onnx"
    result.save(str(folded))
    return source, folded, result.evidence


def test_where_the_sessions_agree_the_chains_agree_at_every_budget(deep_decoder):
    """Where one session of each model computes the same bits, both chains do, however small
    their stages: on the 7B decoder in stages of 1003.7 MiB they parted from layer 2 on
    (logits 0.0117 apart, 15,026 elements outside tolerance: a false alarm) where the whole
    sessions agree. The stages fed their weights, and onnxruntime's unpacked float products
    sum in an order that follows a MatMul's width (the fold merged three into one, and the
    prepacked kernel of a session does not); the original's chain alone handed back the
    rewrites' leaves (a value handed back is rounded to float16 where a session keeps it in
    float32); the optimized model split its stages where the original did not."""
    source, folded, evidence = deep_decoder
    whole = compare_models(str(source), str(folded), 1, CompareOptions(verify=False))
    assert whole.ok and all(row.bitwise_equal for row in whole.rows), whole.summary()
    weights = sum(v.const_value.nbytes for v in graph_of(str(source), "a").graph.initializers
                  .values() if v.const_value is not None)
    for budget in (weights // 300, weights // 100, weights // 37, weights // 11):
        result = compare_models(str(source), str(folded), 1,
                                CompareOptions(verify=False, window_bytes=budget),
                                evidence=evidence)
        assert "compared stage by stage" in result.windows
        assert result.ok and all(row.bitwise_equal for row in [*result.rows, *result.cut_rows]), \
            (budget, result.summary())


def test_a_branch_the_run_never_takes_does_not_stop_a_window(tmp_path):
    """A stage whose ``If`` has a branch that squeezes an axis that is 2 where it runs: one
    session, knowing only the symbolic dim, accepts it, and so must the stage (declared with
    the shapes it is fed, onnxruntime refused it: "Squeeze: Dimension of input 0 must be 1",
    and silero-vad's fold failed in stages where the whole check passed)."""
    from onnx import helper

    from tests.support.models import make_model, vinfo

    rng = np.random.default_rng(7)
    then = helper.make_graph([helper.make_node("Identity", ["h"], ["t"])], "then", [],
                             [vinfo("t", shape=["n", 16])])
    other = helper.make_graph(
        [helper.make_node("Squeeze", ["h", "zero"], ["s"]),
         helper.make_node("Unsqueeze", ["s", "zero"], ["e"])], "else", [],
        [vinfo("e", shape=[1, 16])])
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"]),
             helper.make_node("ReduceSumSquare", ["x"], ["ss"], keepdims=0),
             helper.make_node("GreaterOrEqual", ["ss", "floor"], ["cond"]),
             helper.make_node("MatMul", ["x", "W2"], ["g"]),
             helper.make_node("If", ["cond"], ["picked"], then_branch=then, else_branch=other),
             helper.make_node("Add", ["picked", "g"], ["y"])]
    weights = [numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), name)
               for name in ("W1", "W2")]
    model = make_model(nodes, [vinfo("x", shape=["n", 16])], [vinfo("y", shape=["n", 16])],
                       [*weights, numpy_helper.from_array(np.array([0], np.int64), "zero"),
                        numpy_helper.from_array(np.array(0, np.float32), "floor")])
    path = tmp_path / "if.onnx"
    onnx.save(model, str(path))
    plan = plan_stages(graph_of(str(path), "a"), graph_of(str(path), "b"), 16 * 16 * 4)
    assert any(n.op_type == "If" for n in plan.a[-1].nodes) and "h" in plan.a[-1].reads
    for budget in (None, 16 * 16 * 4):
        result = compare_models(str(path), str(path), 1,
                                CompareOptions(window_bytes=budget, dims={"n": 2}))
        assert result.ok, (budget, result.summary())


def test_the_stages_line_counts_the_stages_that_run_something(deep_decoder):
    """The original's nodes placed on the optimized model's cuts leave some of its stages
    empty (at a 300th of the weights, 29 of 60): they run nothing, and the line that says how
    the check cut the models counts the stages that hold nodes, and the places between them
    where both chains handed on a value."""
    source, folded, _ = deep_decoder
    a, b = graph_of(str(source), "a"), graph_of(str(folded), "b")
    weights = sum(v.const_value.nbytes for v in a.graph.initializers.values()
                  if v.const_value is not None)
    plan = plan_stages(a, b, weights // 300)
    holding = [w for w in plan.a if w.nodes]
    assert len(holding) < len(plan.a)  # the case at hand: empty stages
    line = plan.describe("test")
    assert f"the original in {len(holding)} stages, the optimized model in {len(plan.b)}," \
        in line, line
    compared, cuts = map(int, re.search(r"at (\d+) of (\d+) cuts", line).groups())
    assert cuts == len(holding) - 1 and 0 < compared <= cuts, line


def _constant_chain(path, count: int = 4, width: int = 160) -> int:
    """``count`` MatMuls, each reading the Transpose of its own float32 weight held in a
    ``Constant`` node (as Paddle exports weights), with a dynamic batch; the bytes of one."""
    from onnx import helper

    rng = np.random.default_rng(4)
    nodes, prev = [], "x"
    for i in range(count):
        w = rng.standard_normal((width, width)).astype(np.float32) / width
        nodes += [helper.make_node("Constant", [], [f"w{i}"],
                                   value=numpy_helper.from_array(w, f"t{i}")),
                  helper.make_node("Transpose", [f"w{i}"], [f"wt{i}"], perm=[1, 0]),
                  helper.make_node("MatMul", [prev, f"wt{i}"], [f"h{i}"])]
        prev = f"h{i}"
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", width])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["n", width])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return width * width * 4


def test_weights_in_constant_nodes_are_weighed_and_staged_as_initializers_are(tmp_path):
    """onnxruntime makes a Constant node an initializer: a session and a stage hold its
    tensor (counted as nothing, a model of Constant weights was given a whole session it had
    no room for, and the kernel killed the check in a 640 MiB cgroup); each stage's model is
    handed the tensor instead of carrying it, and computes what the whole check computes."""
    from onnxfold.check.running import memory
    from onnxfold.check.running.runner import NodesModel

    source, folded = tmp_path / "c.onnx", tmp_path / "f.onnx"
    one = _constant_chain(source)
    onnxfold.optimize(str(source)).save(str(folded))
    a = graph_of(str(source), "a")
    assert memory.weighed(a) == (4 * one, 0)
    plan = plan_stages(a, graph_of(str(folded), "b"), one + one // 2)
    assert len(plan.a) == 4 and all(w.weight_bytes == one for w in plan.a)
    built: list[int] = []
    real = NodesModel.__init__

    def measured(self, nodes, *args, **kwargs):
        built.append(sum(n.ByteSize() for n in nodes))
        real(self, nodes, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(NodesModel, "__init__", measured)
        stages = compare_models(str(source), str(folded), 2,
                                 CompareOptions(window_bytes=one + one // 2))
    whole = compare_models(str(source), str(folded), 2, CompareOptions())
    assert whole.ok and stages.ok, stages.summary()
    assert "the original in 4 stages" in stages.windows
    assert built and max(built) < one // 4  # no stage's model carries a weight
    for x, y in zip(whole.rows, stages.rows):
        assert (x.name, x.max_abs_diff, x.bitwise_equal, x.ok) == \
            (y.name, y.max_abs_diff, y.bitwise_equal, y.ok)


def test_in_stages_a_wrong_weight_of_a_constant_model_fails(tmp_path):
    source, folded = tmp_path / "c.onnx", tmp_path / "f.onnx"
    one = _constant_chain(source)
    onnxfold.optimize(str(source)).save(str(folded))
    model = onnx.load(str(folded))
    target = model.graph.initializer[0]
    arr = numpy_helper.to_array(target).copy()
    arr.reshape(-1)[0] += 1.0
    target.CopyFrom(numpy_helper.from_array(arr, target.name))
    onnx.save(model, str(tmp_path / "p.onnx"))
    stages = compare_models(str(source), str(tmp_path / "p.onnx"), 1,
                             CompareOptions(window_bytes=one + one // 2))
    assert not stages.ok and stages.failing


def test_the_optimized_models_values_are_not_held_while_the_cones_run(tmp_path, monkeypatch):
    """B runs before the original's cones (fold verification, rewrite validation): its
    outputs and, in stages, its values at every cut, for every input set, are judged then
    and let go, not held through the cones (72 MiB of cut values were alive at the fold
    verification of a 6 MiB model checked at n = 2048)."""
    import gc
    import weakref

    from onnxfold.check import compare as compare_module
    from onnxfold.pipeline.optimizer import optimize

    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    for i in range(4):
        inits.append(numpy_helper.from_array(
            rng.standard_normal((256, 256)).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("Transpose", [f"w{i}"], [f"wt{i}"]),
                  helper.make_node("MatMul", [prev, f"wt{i}"], [f"h{i}"])]
        prev = f"h{i}"
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 256])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["n", 256])], inits),
        opset_imports=[helper.make_opsetid("", 17)])
    result = optimize(model, record_rewrites=True)
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(model, a)
    onnx.save(result.to_proto(), b)
    made: list[weakref.ref] = []
    real_ran, real_verify = compare_module._ran_optimized, compare_module.verify_folds

    def arrays(x):
        if isinstance(x, np.ndarray):
            yield x
        elif isinstance(x, dict):
            for v in x.values():
                yield from arrays(v)
        elif isinstance(x, list | tuple):
            for v in x:
                yield from arrays(v)

    def ran(b, run, reference):
        optimized = real_ran(b, run, reference)
        made.extend(weakref.ref(x) for x in arrays(
            [optimized.cuts, optimized.ran.outputs if optimized.ran else []]))
        return optimized

    alive: list[int] = []

    def verify(*args, **kwargs):
        gc.collect()
        alive.append(sum(ref() is not None for ref in made))
        return real_verify(*args, **kwargs)

    monkeypatch.setattr(compare_module, "_ran_optimized", ran)
    monkeypatch.setattr(compare_module, "verify_folds", verify)
    checked = compare_module.compare_models(
        a, b, 2, CompareOptions(dims={"n": 64}, window_bytes=1 << 18), evidence=result.evidence)
    assert checked.ok and checked.windows and checked.cut_rows, checked.summary()
    assert len(made) > 2 and alive == [0]
