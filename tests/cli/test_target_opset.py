"""`--target-opset N` (FoldOptions.target_opset, simplify's target_opset): the model converted
by onnx's version converter before folding, its outputs what the original computes in
onnxruntime at two bindings of its dynamic dims, its weights the reader's own (memory-mapped)
tensors; where the converter cannot, one line and exit 2, nothing written."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.errors import InputError
from onnxfold.io import load_model
from onnxfold.pipeline.opset_conversion import convert_opset
from tests.support.cli import assert_one_error_line, run_cli
from tests.support.running import run_ort


def opset11_model(path) -> None:
    """Ops whose form changed after opset 11: ReduceSum's and Squeeze's axes became inputs
    (13), Split's sizes an input (13), Clip's bounds inputs (11 already); a weight Transposed
    (folds) and a dynamic batch."""
    w = numpy_helper.from_array(np.arange(24, dtype=np.float32).reshape(6, 4) / 10, "w")
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "wt"], ["h"]),               # [n, 6]
        helper.make_node("Split", ["h"], ["a", "b"], axis=1, split=[2, 4]),
        helper.make_node("ReduceSum", ["b"], ["s"], axes=[1], keepdims=1),
        helper.make_node("Unsqueeze", ["s"], ["u"], axes=[0]),
        helper.make_node("Squeeze", ["u"], ["q"], axes=[0]),
        helper.make_node("Add", ["a", "q"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)],
                                ir_version=7), str(path))


@pytest.mark.parametrize("target", [13, 17, 21])
def test_converted_and_folded_it_computes_what_the_original_computes(tmp_path, target):
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    opset11_model(src)
    proc = run_cli("optimize", str(src), "-o", str(out), "--target-opset", str(target))
    assert proc.returncode == 0, proc.stderr
    converted = onnx.load(str(out))
    assert {o.domain: o.version for o in converted.opset_import}[""] == target
    assert [n.op_type for n in converted.graph.node if n.op_type == "Transpose"] == []  # folded
    for batch in (1, 5):  # two bindings of the dynamic dim
        x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
        np.testing.assert_array_equal(run_ort(str(src), {"x": x})[0],
                                      run_ort(str(out), {"x": x})[0])


def test_the_weights_stay_the_readers_tensors(tmp_path):
    """The conversion sees references, not bytes: each weight's tensor object comes back."""
    src = tmp_path / "m.onnx"
    opset11_model(src)
    model = load_model(str(src))
    before = model.graph.initializers["w"].const_value
    converted = convert_opset(model, 17)
    assert converted.graph.initializers["w"].const_value is before
    assert convert_opset(converted, 17) is converted  # already there: unchanged


@pytest.mark.parametrize(("target", "says"), [
    ("9", "cannot convert"),  # Split's sizes: no adapter down to 9 for this form
    ("99", "knows opsets 1 to"),
    ("0", "--target-opset"),
])
def test_what_the_converter_cannot_do_is_one_line(tmp_path, target, says):
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    opset11_model(src)
    proc = run_cli("optimize", str(src), "-o", str(out), "--target-opset", target)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("onnxfold: error: ") and says in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]


def test_the_python_api_takes_it_as_an_option_and_a_keyword(tmp_path):
    src = tmp_path / "m.onnx"
    opset11_model(src)
    for result in (onnxfold.optimize(str(src), target_opset=17),
                   onnxfold.optimize(str(src), onnxfold.FoldOptions(target_opset=17))):
        assert result.model.opset_imports[""] == 17
    proto, ok = onnxfold.simplify(str(src), check_n=2, target_opset=18)
    assert ok and {o.domain: o.version for o in proto.opset_import}[""] == 18
    with pytest.raises(InputError, match=r"^target_opset=99: onnx .* knows opsets"):
        onnxfold.simplify(str(src), target_opset=99)


# -- function ops, local functions, what the converter leaves -----------------------------------

F = TensorProto.FLOAT


def _save(path, nodes, inputs, outputs, functions=(), opset=20, domains=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, functions=list(functions), ir_version=10,
                              opset_imports=[helper.make_opsetid("", opset),
                                             *(helper.make_opsetid(d, 1) for d in domains)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return str(path)


def dynamo_like(path):
    """What torch's default export holds at opset 20: Gelu (from 20), LayerNormalization and
    a ReduceMean whose axes are an input (from 18), with the exporter's module path."""
    w = numpy_helper.from_array(np.linspace(0.5, 1.5, 8, dtype=np.float32), "w")
    b = numpy_helper.from_array(np.zeros(8, np.float32), "b")
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    gelu = helper.make_node("Gelu", ["x"], ["g"], name="node_gelu", approximate="none")
    gelu.metadata_props.add(key="pkg.torch.onnx.name_scopes", value="['', 'mlp', 'gelu']")
    nodes = [gelu,
             helper.make_node("LayerNormalization", ["g", "w", "b"], ["n"], name="node_norm"),
             helper.make_node("ReduceMean", ["n", "axes"], ["y"], name="node_mean",
                              keepdims=1, noop_with_empty_axes=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", 8])],
                              [helper.make_tensor_value_info("y", F, ["n", 1])], [w, b, axes])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)],
                                ir_version=10), str(path))
    return str(path)


def _same_outputs(a, b, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for got, want in zip(run_ort(b, {"x": x}), run_ort(a, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_function_ops_are_expanded_from_their_bodies_then_converted(tmp_path):
    src, out = dynamo_like(tmp_path / "m.onnx"), str(tmp_path / "o.onnx")
    proc = run_cli("optimize", src, "-o", out, "--target-opset", "17", "--check", "2",
                   "--keep-metadata")
    assert proc.returncode == 0, proc.stderr
    assert "opset        20 -> 17 (Gelu x1 expanded into their ONNX function bodies)" \
        in proc.stdout
    converted = onnx.load(out)
    assert {o.domain: o.version for o in converted.opset_import}[""] == 17
    ops = {n.op_type for n in converted.graph.node}
    assert "Gelu" not in ops and "Erf" in ops and "LayerNormalization" in ops
    mean = next(n for n in converted.graph.node if n.op_type == "ReduceMean")
    assert {a.name for a in mean.attribute} == {"axes", "keepdims"}  # the converter's leftover
    erf = next(n for n in converted.graph.node if n.op_type == "Erf")
    assert erf.name.startswith("node_gelu/") and {p.key for p in erf.metadata_props} == {
        "pkg.torch.onnx.name_scopes"}  # the exporter's module path, kept
    _same_outputs(src, out, (3, 8))


def test_local_functions_are_converted_and_kept(tmp_path):
    """A function at opset 20 holding a Gelu and a ReduceMean with axes as an input: its body
    is converted on its own, the function stays, onnxruntime loads it and computes the same."""
    fn = helper.make_function("local", "f", ["x"], ["y"], [
        helper.make_node("Gelu", ["x"], ["g"], approximate="tanh"),
        helper.make_node("Constant", [], ["ax"],
                         value=helper.make_tensor("v", TensorProto.INT64, [1], [-1])),
        helper.make_node("ReduceMean", ["g", "ax"], ["y"], keepdims=1)],
        [helper.make_opsetid("", 20)])
    src = _save(tmp_path / "m.onnx", [helper.make_node("f", ["x"], ["y"], domain="local")],
                [helper.make_tensor_value_info("x", F, [2, 3])],
                [helper.make_tensor_value_info("y", F, [2, 1])], [fn], domains=["local"])
    out = str(tmp_path / "o.onnx")
    proc = run_cli("optimize", src, "-o", out, "--target-opset", "17", "--no-verify")
    assert proc.returncode == 0, proc.stderr
    converted = onnx.load(out)
    [function] = converted.functions
    assert {o.domain: o.version for o in function.opset_import}[""] == 17
    assert "Gelu" not in {n.op_type for n in function.node}
    _same_outputs(src, out, (2, 3))


def test_a_function_reading_its_calls_attributes_is_inlined_to_convert(tmp_path):
    """The converter writes 0 where a body reads its call's attribute (LeakyRelu's alpha of
    the call, 0.5): such a function is inlined first, its value kept."""
    alpha = onnx.AttributeProto(name="alpha", ref_attr_name="a", type=onnx.AttributeProto.FLOAT)
    leaky = helper.make_node("LeakyRelu", ["x"], ["t"])
    leaky.attribute.append(alpha)
    fn = helper.make_function("local", "lr", ["x"], ["y"],
                              [leaky, helper.make_node("Gelu", ["t"], ["y"])],
                              [helper.make_opsetid("", 20)], attributes=["a"])
    src = _save(tmp_path / "m.onnx",
                [helper.make_node("lr", ["x"], ["y"], domain="local", a=0.5)],
                [helper.make_tensor_value_info("x", F, [2, 3])],
                [helper.make_tensor_value_info("y", F, [2, 3])], [fn], domains=["local"])
    out = str(tmp_path / "o.onnx")
    proc = run_cli("optimize", src, "-o", out, "--target-opset", "17")
    assert proc.returncode == 0, proc.stderr
    assert "local functions inlined to convert: local.lr" in proc.stdout
    _same_outputs(src, out, (2, 3))


@pytest.mark.parametrize(("node", "says"), ids=["no body", "no adapter"], argvalues=[
    (helper.make_node("BitwiseAnd", ["x", "x"], ["y"], name="band"),
     "BitwiseAnd (node band) has no function body in ONNX to expand it into older ops, and it "
     "is newer than opset 17; next step: --target-opset 18 or later, or export the model at "
     "opset 17"),
    (helper.make_node("Pad", ["x", "pads", "", "axes"], ["y"], name="pad0"),
     "cannot convert Pad (node pad0) of "),  # a Pad with axes has no form before 18
])
def test_what_cannot_convert_is_one_line_naming_the_op_its_node_and_the_next_step(
        tmp_path, node, says):
    dtype = TensorProto.INT32 if node.op_type == "BitwiseAnd" else F
    constants = [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
        np.array(value, np.int64))) for name, value in (("pads", [1, 1]), ("axes", [0]))]
    shape = [6] if node.op_type == "Pad" else [4]
    src = _save(tmp_path / "m.onnx", [*constants, node],
                [helper.make_tensor_value_info("x", dtype, [4])],
                [helper.make_tensor_value_info("y", dtype, shape)])
    proc = run_cli("optimize", src, "-o", str(tmp_path / "o.onnx"), "--target-opset", "17")
    assert_one_error_line(proc, says, "next step: ")
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]


@pytest.mark.parametrize("node", [
    helper.make_node("Split", ["x"], ["y", "z"], axis=0, num_outputs=2, name="split0"),
    helper.make_node("Pad", ["x", "pads"], ["y"], name="pad0", mode="reflect"),
], ids=["Split num_outputs", "Pad without axes"])
def test_forms_the_converter_has_no_adapter_for_but_that_mean_the_same_are_kept(tmp_path, node):
    """Split 18 and Pad 18 have no adapter down to 17, though a Split with its sizes known and
    a Pad without axes mean there what they mean at 20: they are kept (Split's sizes from its
    static dim)."""
    pads = helper.make_node("Constant", [], ["pads"],
                            value=numpy_helper.from_array(np.array([1, 1], np.int64)))
    outputs = [helper.make_tensor_value_info(name, F, None) for name in node.output if name]
    src = _save(tmp_path / "m.onnx", [pads, node],
                [helper.make_tensor_value_info("x", F, [5])],
                [helper.make_tensor_value_info(o.name, F, [3 if node.op_type == "Split" and
                 o.name == "y" else 2 if node.op_type == "Split" else 7]) for o in outputs])
    out = str(tmp_path / "o.onnx")
    proc = run_cli("optimize", src, "-o", out, "--target-opset", "17", "--keep", node.op_type)
    assert proc.returncode == 0, proc.stderr
    kept = [n for n in onnx.load(out).graph.node if n.op_type == node.op_type]
    assert len(kept) == 1 and "num_outputs" not in {a.name for a in kept[0].attribute}
    x = np.arange(5, dtype=np.float32)
    for got, want in zip(run_ort(out, {"x": x}), run_ort(src, {"x": x})):
        np.testing.assert_array_equal(got, want)


def test_axes_the_graph_computes_are_folded_at_the_models_opset_first(tmp_path):
    """The converter takes a Reduce's axes input to an attribute only where it is a constant;
    computed from a static shape (as dynamo's exports without their optimizer compute them),
    they are folded at opset 20 first, and the folded model converted."""
    one = helper.make_node("Constant", [], ["one"],
                           value=numpy_helper.from_array(np.array(1, np.int64)))
    zero = helper.make_node("Constant", [], ["zero"],
                            value=numpy_helper.from_array(np.array([0], np.int64)))
    nodes = [one, zero, helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Size", ["s"], ["rank"]),
             helper.make_node("Sub", ["rank", "one"], ["last"]),
             helper.make_node("Unsqueeze", ["last", "zero"], ["axes"]),
             helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=1)]
    src = _save(tmp_path / "m.onnx", nodes, [helper.make_tensor_value_info("x", F, [2, 3])],
                [helper.make_tensor_value_info("y", F, [2, 1])])
    out = str(tmp_path / "o.onnx")
    proc = run_cli("optimize", src, "-o", out, "--target-opset", "17")
    assert proc.returncode == 0, proc.stderr
    assert "opset        20 -> 17 (folded at opset 20 first, for the constants the converter " \
        "needs)" in proc.stdout
    assert [n.op_type for n in onnx.load(out).graph.node] == ["ReduceMean"]
    _same_outputs(src, out, (2, 3))


def test_axes_that_depend_on_an_input_are_named_with_their_node(tmp_path):
    """A Reduce whose axes are a graph input cannot fold: the line names the node the
    converter does not, and what would let it convert."""
    src = _save(tmp_path / "m.onnx",
                [helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="mean0")],
                [helper.make_tensor_value_info("x", F, [2, 3]),
                 helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
                [helper.make_tensor_value_info("y", F, ["a", "b"])])
    proc = run_cli("optimize", src, "-o", str(tmp_path / "o.onnx"), "--target-opset", "17")
    assert_one_error_line(proc, "cannot convert ReduceMean (node mean0) of ",
                          "next step: fix those dims (--input-shape)")
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]


def test_a_reduce_with_noop_and_no_axes_becomes_an_identity(tmp_path):
    """ReduceMean 18 with noop_with_empty_axes=1 and no axes returns its input; taken to 17
    the converter keeps the attribute 17 does not have: the node becomes what it computed."""
    src = _save(tmp_path / "m.onnx",
                [helper.make_node("ReduceMean", ["x"], ["y"], noop_with_empty_axes=1)],
                [helper.make_tensor_value_info("x", F, [2, 3])],
                [helper.make_tensor_value_info("y", F, [2, 3])])
    out = str(tmp_path / "o.onnx")
    assert run_cli("optimize", src, "-o", out, "--target-opset", "17").returncode == 0
    assert [n.op_type for n in onnx.load(out).graph.node] in ([], ["Identity"])
    _same_outputs(src, out, (2, 3))


def test_a_converted_model_is_loaded_in_onnxruntime_whatever_its_size(tmp_path, capsys):
    """Above the verification's node bound a plain output is not loaded; a converted one is:
    a rule that breaks the model (a stand-in for what a converter can leave) is caught."""
    from dataclasses import replace

    from onnxfold.app import cli
    from onnxfold.app.verify import VERIFY_MAX_NODES
    from tests.support.bugged_rules import corrupting, with_rule

    nodes = [helper.make_node("Relu", [f"x{i}"], [f"x{i + 1}"]) for i in
             range(VERIFY_MAX_NODES + 10)]
    src = _save(tmp_path / "m.onnx", nodes, [helper.make_tensor_value_info("x0", F, [2])],
                [helper.make_tensor_value_info(f"x{len(nodes)}", F, [2])], opset=17)

    patched = with_rule(corrupting("Relu"))
    out = tmp_path / "out.onnx"
    for extra, code in (([], 0), (["--target-opset", "18"], cli.EXIT_INTERNAL)):
        line = cli.parse(["optimize", src, "-o", str(out), "-q", *extra])
        command = replace(line.command, settings=replace(line.command.settings,
                                                         catalogue=patched))
        assert cli.run(replace(line, command=command)) == code
    assert "onnxruntime refuses the folded model" in capsys.readouterr().err


def test_an_opset_onnxruntime_has_no_kernels_of_is_one_line(tmp_path):
    """An opset-9 Add converted to opset 6: onnx converts it, onnxruntime (opset 7 and later)
    cannot load it; a bad flag value (exit 2), not an internal error (it was exit 3)."""
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)],
                                ir_version=4), str(src))
    proc = run_cli("optimize", src, "-o", tmp_path / "o.onnx", "--target-opset", "6")
    assert_one_error_line(proc, "--target-opset 6: onnxruntime cannot load the model "
                          "converted to opset 6", "Add(6)", "nothing was written")
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]
