"""If/Loop: constant conditions are inlined, subgraph bodies fold with the outer constants."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.support.models import make_model, tensor, vinfo
from tests.support.running import fold_proto, run_ort


def ops(graph):
    return [n.op_type for n in graph.node]


def all_ops(graph):
    """Op types of ``graph`` and every subgraph in it."""
    found = []
    for n in graph.node:
        found.append(n.op_type)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                found += all_ops(a.g)
    return found


def body_of(proto, op="Loop"):
    (loop,) = [n for n in proto.graph.node if n.op_type == op]
    return loop.attribute[0].g


def assert_same(proto, out, feeds):
    for a, b in zip(run_ort(proto, feeds), run_ort(out, feeds)):
        np.testing.assert_array_equal(a, b)


def graph(name, nodes, outputs, inputs=(), initializers=()):
    return helper.make_graph(nodes, name, list(inputs), outputs, list(initializers))


def vec(name):
    return vinfo(name, shape=[4])


X = np.array([-1.5, 0.0, 2.0, 3.5], np.float32)
SCALARS = [tensor("c1", np.float32(3)), tensor("c2", np.float32(1))]


def test_if_with_a_computed_constant_condition_is_inlined(tmp_path):
    then_g = graph("then", [helper.make_node("Mul", ["x", "two"], ["t_out"])], [vec("t_out")],
                   initializers=[tensor("two", np.float32(2))])
    else_g = graph("else", [helper.make_node("Sub", ["x", "w_else"], ["e_out"])], [vec("e_out")])
    nodes = [helper.make_node("Greater", ["c1", "c2"], ["cond"]),
             helper.make_node("If", ["cond"], ["r"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Relu", ["r"], ["y"])]
    proto = make_model(nodes, [vec("x")], [vec("y")],
                       [*SCALARS, tensor("w_else", np.full(4, 7, np.float32))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded.graph) == ["Mul", "Relu"]
    assert report.pattern_hits == {"inline_constant_if": 1}
    assert report.patterns_rejected == {}
    # only the branch taken survives: the else branch's weight leaves with it
    assert [numpy_helper.to_array(t).tolist() for t in folded.graph.initializer] == [2.0]
    assert_same(proto, out, {"x": X})
    np.testing.assert_array_equal(run_ort(out, {"x": X})[0], np.maximum(X * 2, 0))


def test_if_nested_in_an_if_branch(tmp_path):
    inner_then = graph("it", [helper.make_node("Mul", ["x", "c1"], ["it_out"])], [vec("it_out")])
    inner_else = graph("ie", [helper.make_node("Sub", ["x", "c2"], ["ie_out"])], [vec("ie_out")])
    outer_then = graph("ot", [helper.make_node("Less", ["c1", "c2"], ["cond2"]),
                              helper.make_node("If", ["cond2"], ["ot_out"],
                                               then_branch=inner_then, else_branch=inner_else)],
                       [vec("ot_out")])
    outer_else = graph("oe", [helper.make_node("Neg", ["x"], ["oe_out"])], [vec("oe_out")])
    nodes = [helper.make_node("Greater", ["c1", "c2"], ["cond"]),
             helper.make_node("If", ["cond"], ["r"], then_branch=outer_then,
                              else_branch=outer_else),
             helper.make_node("Relu", ["r"], ["y"])]
    proto = make_model(nodes, [vec("x")], [vec("y")], SCALARS)
    folded, report, out = fold_proto(proto, tmp_path)
    assert all_ops(folded.graph) == ["Sub", "Relu"]  # then, then else
    assert report.pattern_hits == {"inline_constant_if": 2}
    assert_same(proto, out, {"x": X})
    np.testing.assert_array_equal(run_ort(out, {"x": X})[0], np.maximum(X - 1, 0))


def test_if_with_a_dynamic_condition_stays(tmp_path):
    then_g = graph("then", [helper.make_node("Mul", ["x", "c1"], ["t_out"])], [vec("t_out")])
    else_g = graph("else", [helper.make_node("Sub", ["x", "c2"], ["e_out"])], [vec("e_out")])
    nodes = [helper.make_node("If", ["b"], ["y"], then_branch=then_g, else_branch=else_g)]
    proto = make_model(nodes, [vec("x"), vinfo("b", TensorProto.BOOL, [])], [vec("y")],
                       SCALARS)
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded.graph) == ["If"] and report.pattern_hits == {}
    for b in (True, False):
        assert_same(proto, out, {"x": X, "b": np.array(b)})


def _loop(body_nodes, body_inits=(), outer_inits=(), trip=3):
    body = graph("body", [*body_nodes, helper.make_node("Identity", ["cond_in"], ["cond_out"])],
                 [vinfo("cond_out", TensorProto.BOOL, []), vec("v_out")],
                 inputs=[vinfo("i", TensorProto.INT64, []),
                         vinfo("cond_in", TensorProto.BOOL, []), vec("v_in")],
                 initializers=body_inits)
    nodes = [helper.make_node("Loop", ["trip", "cond0", "x"], ["v"], body=body),
             helper.make_node("Relu", ["v"], ["y"])]
    return make_model(nodes, [vec("x")], [vec("y")],
                      [tensor("trip", np.int64(trip)), tensor("cond0", np.bool_(True)),
                       *outer_inits])


def test_loop_invariant_chain_of_outer_constants_folds_in_the_body(tmp_path):
    c = np.array([0.5, 1.0, -2.0, 4.0], np.float32)
    proto = _loop([helper.make_node("Mul", ["c", "two"], ["m"]),
                   helper.make_node("Add", ["v_in", "m"], ["v_out"])],
                  body_inits=[tensor("two", np.float32(2))], outer_inits=[tensor("c", c)])
    folded, report, out = fold_proto(proto, tmp_path)
    body = body_of(folded)
    assert ops(body) == ["Add", "Identity"]
    (init,) = body.initializer  # the folded Mul; the constant 2 it used is gone
    np.testing.assert_array_equal(numpy_helper.to_array(init), c * 2)
    assert report.folded_nodes == 1
    assert "c" not in {t.name for t in folded.graph.initializer}
    assert_same(proto, out, {"x": X})
    np.testing.assert_array_equal(run_ort(out, {"x": X})[0], np.maximum(X + 3 * 2 * c, 0))


def test_folding_a_body_weight_does_not_keep_the_original(tmp_path):
    w = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    proto = _loop([helper.make_node("Transpose", ["w"], ["wT"], perm=[1, 0]),
                   helper.make_node("Mul", ["v_in", "wT"], ["p"]),
                   helper.make_node("ReduceSum", ["p", "axes"], ["v_out"], keepdims=0)],
                  body_inits=[tensor("w", w), tensor("axes", np.array([0], np.int64))])
    folded, report, out = fold_proto(proto, tmp_path)
    body = body_of(folded)
    assert "Transpose" not in ops(body)
    assert sorted(t.name for t in body.initializer) == ["axes", "wT"]
    assert report.initializer_bytes_after <= report.initializer_bytes_before
    np.testing.assert_allclose(run_ort(proto, {"x": X})[0], run_ort(out, {"x": X})[0],
                               rtol=1e-6)


def test_loop_body_with_an_if_on_a_constant_condition(tmp_path):
    c = np.array([0.5, 1.0, -2.0, 4.0], np.float32)
    then_b = graph("t", [helper.make_node("Add", ["v_in", "c"], ["t_out"])], [vec("t_out")])
    else_b = graph("e", [helper.make_node("Sub", ["v_in", "c"], ["e_out"])], [vec("e_out")])
    proto = _loop([helper.make_node("Greater", ["c1", "c2"], ["bc"]),
                   helper.make_node("If", ["bc"], ["v_out"], then_branch=then_b,
                                    else_branch=else_b)],
                  outer_inits=[tensor("c", c), *SCALARS])
    folded, report, out = fold_proto(proto, tmp_path)
    body = body_of(folded)
    assert all_ops(folded.graph) == ["Loop", "Add", "Identity", "Relu"]
    assert ops(body) == ["Add", "Identity"] and len(body.initializer) == 0
    assert report.pattern_hits == {"inline_constant_if": 1}
    assert sorted(t.name for t in folded.graph.initializer) == ["c", "cond0", "trip"]
    assert_same(proto, out, {"x": X})
    np.testing.assert_array_equal(run_ort(out, {"x": X})[0], np.maximum(X + 3 * c, 0))


def test_loop_body_if_with_a_folded_nested_chain(tmp_path):
    # two levels: Loop > If (constant condition) > a chain of outer constants to fold
    c = np.array([0.5, 1.0, -2.0, 4.0], np.float32)
    then_b = graph("t", [helper.make_node("Neg", ["c"], ["nc"]),
                         helper.make_node("Mul", ["nc", "c1"], ["k"]),
                         helper.make_node("Add", ["v_in", "k"], ["t_out"])], [vec("t_out")])
    else_b = graph("e", [helper.make_node("Sub", ["v_in", "c"], ["e_out"])], [vec("e_out")])
    proto = _loop([helper.make_node("Less", ["c2", "c1"], ["bc"]),
                   helper.make_node("If", ["bc"], ["v_out"], then_branch=then_b,
                                    else_branch=else_b)],
                  outer_inits=[tensor("c", c), *SCALARS], trip=2)
    folded, _report, out = fold_proto(proto, tmp_path)
    assert all_ops(folded.graph) == ["Loop", "Add", "Identity", "Relu"]
    (init,) = body_of(folded).initializer
    np.testing.assert_array_equal(numpy_helper.to_array(init), -c * 3)
    assert_same(proto, out, {"x": X})


def test_inlined_branch_whose_output_is_its_own_initializer(tmp_path):
    # onnx-ir keeps a graph output tied to its graph: the branch's outputs must be released
    # before its initializers move to the enclosing graph (AffineGrid's expanded function)
    then_g = graph("then", [], [vec("w_then")], initializers=[tensor("w_then", X * 2)])
    else_g = graph("else", [], [vec("w_else")], initializers=[tensor("w_else", X * 3)])
    nodes = [helper.make_node("Greater", ["c1", "c2"], ["cond"]),
             helper.make_node("If", ["cond"], ["r"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Add", ["r", "x"], ["y"])]
    proto = make_model(nodes, [vec("x")], [vec("y")], SCALARS)
    folded, _, out = fold_proto(proto, tmp_path)
    assert ops(folded.graph) == ["Add"]
    assert_same(proto, out, {"x": X})


def test_scan_whose_body_reads_outer_shape_constants_folds_in_the_fallback(tmp_path):
    # onnxruntime refuses a Scan body whose output shapes it cannot infer; it can only infer
    # them when the captured Unsqueeze axes reach the fallback model as values, not inputs
    body = graph("body", [helper.make_node("Unsqueeze", ["x_t", "axes"], ["u"]),
                          helper.make_node("Add", ["s_in", "u"], ["s_out"]),
                          helper.make_node("Mul", ["s_out", "x_t"], ["y_t"])],
                 [onnx.ValueInfoProto(name="s_out"), onnx.ValueInfoProto(name="y_t")],
                 inputs=[onnx.ValueInfoProto(name="s_in"), onnx.ValueInfoProto(name="x_t")])
    nodes = [helper.make_node("Constant", [], ["axes"], value=tensor("axes_v", np.array([0]))),
             helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1),
             helper.make_node("Add", ["s", "x"], ["y"])]
    xs = np.arange(12, dtype=np.float32).reshape(3, 4)
    proto = make_model(nodes, [vec("x")], [vinfo("y", shape=[1, 4]), vinfo("ys", shape=[3, 1, 4])],
                       [tensor("s0", np.zeros((1, 4), np.float32)), tensor("xs", xs)])
    folded, report, out = fold_proto(proto, tmp_path)
    assert "Scan" not in ops(folded.graph), report.explain()
    assert_same(proto, out, {"x": X})


def _bool(name, value):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name + "_v", TensorProto.BOOL, [], [value]))


def _runs_like_the_original(proto, out, feeds):
    """The folded model loads in onnxruntime and computes what the original computes."""
    for a, b in zip(run_ort(proto, feeds), run_ort(out, feeds)):
        np.testing.assert_array_equal(a, b)


def test_inlined_if_returning_an_outer_value_through_identity(tmp_path):
    # The Silero VAD shape: a constant If inside a branch returns Identity(v), v computed two
    # graphs out. Inlining it must not make the branch return v itself (onnxruntime refuses a
    # subgraph output that is an outer-scope value), and removing the Identity must not either.
    f = vec
    inner = helper.make_node("If", ["k"], ["ci"], then_branch=graph(
        "c_then", [helper.make_node("Abs", ["v"], ["a1"])], [f("a1")]), else_branch=graph(
        "c_else", [helper.make_node("Identity", ["v"], ["id"])], [f("id")]))
    b_then = graph("b_then", [_bool("k", False), inner], [f("ci")])
    b_else = graph("b_else", [helper.make_node("Abs", ["v"], ["a2"])], [f("a2")])
    nodes = [helper.make_node("Neg", ["x"], ["v"]),
             helper.make_node("If", ["c"], ["y"], then_branch=b_then, else_branch=b_else)]
    proto = make_model(nodes, [vec("x"), vinfo("c", TensorProto.BOOL, [])], [vec("y")])
    _folded, report, out = fold_proto(proto, tmp_path)
    assert report.pattern_hits.get("inline_constant_if") == 1
    for c in (True, False):
        _runs_like_the_original(proto, out, {"x": X, "c": np.array(c)})


def test_scan_body_ending_in_identity_of_its_state(tmp_path):
    # return (Identity(s), s): removing the Identity would return one value twice, and
    # onnxruntime's Scan then computes a wrong state (off by up to 37 here)
    body = graph("body", [helper.make_node("Add", ["s_in", "x_t"], ["s"]),
                          helper.make_node("Identity", ["s"], ["s_out"])],
                 [vinfo("s_out", shape=[4]), vinfo("s", shape=[4])],
                 inputs=[vinfo("s_in", shape=[4]), vinfo("x_t", shape=[4])])
    nodes = [helper.make_node("Scan", ["s0", "xs"], ["final", "ys"], body=body,
                              num_scan_inputs=1),
             helper.make_node("Add", ["final", "x"], ["y"])]
    xs = np.arange(12, dtype=np.float32).reshape(3, 4)
    proto = make_model(nodes, [vec("x"), vinfo("s0", shape=[4])],
                       [vec("y"), vinfo("ys", shape=[3, 4])], [tensor("xs", xs)])
    _folded, _report, out = fold_proto(proto, tmp_path)
    _runs_like_the_original(proto, out, {"x": X, "s0": np.float32([1, -2, 3, 5])})


def test_inlined_branch_nodes_whose_names_the_graph_has_are_renamed(tmp_path):
    """Exporters name nodes in branches as in the main graph: inlined as they were, the model
    had two nodes named ``n``, which onnxruntime refuses to load."""
    then_g = graph("then", [helper.make_node("Mul", ["x", "two"], ["t_out"], name="n")],
                   [vec("t_out")], initializers=[tensor("two", np.float32(2))])
    else_g = graph("else", [helper.make_node("Neg", ["x"], ["e_out"], name="n")], [vec("e_out")])
    nodes = [helper.make_node("Greater", ["c1", "c2"], ["cond"]),
             helper.make_node("If", ["cond"], ["r"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Relu", ["r"], ["y"], name="n")]
    proto = make_model(nodes, [vec("x")], [vec("y")], SCALARS)
    folded, _, out = fold_proto(proto, tmp_path)
    names = [n.name for n in folded.graph.node]
    assert ops(folded.graph) == ["Mul", "Relu"] and len(set(names)) == 2, names
    assert_same(proto, out, {"x": X})


def test_an_inlined_branch_of_unnamed_nodes_is_validated(tmp_path):
    """The rewrite validation ran a window's unnamed nodes under one name (its prefix), and
    onnxruntime refused them as two nodes of one name: the check failed a correct fold."""
    import onnxfold

    then_g = graph("then", [helper.make_node("Add", ["x", "c2"], ["t1"]),
                            helper.make_node("Neg", ["t1"], ["t_out"])], [vec("t_out")])
    else_g = graph("else", [helper.make_node("Neg", ["x"], ["e_out"])], [vec("e_out")])
    nodes = [helper.make_node("Greater", ["c1", "c2"], ["cond"]),
             helper.make_node("If", ["cond"], ["r"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Relu", ["r"], ["y"])]
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(make_model(nodes, [vinfo("x", shape=["b", 4])], [vinfo("y", shape=["b", 4])],
                         SCALARS), path)
    result = onnxfold.optimize(str(path), record_rewrites=True)
    result.save(str(out))
    check = onnxfold.compare(str(path), str(out), n=2, evidence=result.evidence)
    assert check.ok, check.summary()
    assert check.rewrites is not None and check.rewrites.count("bitwise") == 1, check.summary()
