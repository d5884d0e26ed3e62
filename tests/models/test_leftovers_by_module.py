"""What stayed is grouped by the module path the exporter recorded, on real exports: the
dynamo exporter's node metadata and the TorchScript exporter's scope names, with ``*`` for the
layer index. The reports of `optimize --explain`, `--json` and `inspect` say it."""

import json

import pytest

from onnxfold.ir.scopes import module_path, path_of_name
from onnxfold.pipeline.leftovers import group_leftovers, pattern
from tests.support.cli import run_cli

torch = pytest.importorskip("torch")


class Attention(torch.nn.Module):
    """A projection reshaped to heads: the target shape needs the dynamic batch and sequence
    dims, so the shape computation cannot fold."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = torch.nn.Linear(8, 8)

    def forward(self, x):
        b, t = x.shape[0], x.shape[1]
        h = self.q(x).reshape(b, t, self.heads, 8 // self.heads).transpose(1, 2)
        return h.reshape(b, t, 8)  # (b, heads, t, d) read as (b, t, 8): a dim is not copied


class Layer(torch.nn.Module):
    def __init__(self, heads: int) -> None:
        super().__init__()
        self.self_attn = Attention(heads)

    def forward(self, x):
        return x + self.self_attn(x)


class TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer(2), Layer(4)])  # unlike shapes: no merging

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.fixture(scope="module", params=["dynamo", "torchscript"])
def export(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "two_layers.onnx"
    x = torch.randn(2, 3, 8)
    with torch.no_grad():
        if request.param == "dynamo":
            dims = ({0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")},)
            torch.onnx.export(TwoLayers().eval(), (x,), str(path), dynamo=True,
                              dynamic_shapes=dims, verbose=False)
        else:
            torch.onnx.export(TwoLayers().eval(), (x,), str(path), dynamo=False,
                              input_names=["x"], dynamic_axes={"x": {0: "batch", 1: "seq"}})
    return request.param, path


def test_optimize_groups_what_stayed_by_module(export, tmp_path):
    kind, path = export
    report = tmp_path / "report.json"
    proc = run_cli("optimize", path, "-o", tmp_path / "out.onnx", "--explain", "--json", report)
    assert proc.returncode == 0, proc.stderr
    groups = {g["module"]: g for g in json.loads(report.read_text())["leftovers"]}
    attn = groups["layers.*.self_attn"]
    assert attn["instances"] == 2, groups  # layers.0 and layers.1 in one line
    assert attn["nodes"] == sum(attn["ops"].values()) > 0
    assert any("batch" in r and "seq" in r for r in attn["reasons"]), attn
    assert attn["dims"] and set(attn["dims"]) <= {"batch", "seq", "past", "total"}, attn
    # the Reshapes themselves stay: the rewrite that would give them a constant target says
    # why, apart from the counted nodes (they are not among them)
    assert any(" not applied to Reshape x" in r for r in attn["rewrites_declined"]), attn
    assert "Reshape" not in attn["ops"] or not any(" not applied to Reshape x" in r
                                                   for r in attn["reasons"]), attn
    summary = next(s for s in proc.stdout.splitlines() if "layers.*.self_attn (x2): " in s)
    assert summary.endswith(f"(dynamic dims {', '.join(attn['dims'])})"), (kind, summary)
    explained = proc.stdout[proc.stdout.index("stayed, by module:"):]
    line = next(s for s in explained.splitlines() if "layers.*.self_attn (x2): " in s)
    assert "blocked by dynamic dims" in line and "rewrites declined there: " in line, line


def test_inspect_groups_blocked_shape_nodes_by_module(export):
    _, path = export
    proc = run_cli("inspect", path, "--json")
    assert proc.returncode == 0, proc.stderr
    groups = {g["module"]: g for g in json.loads(proc.stdout)["blocked_by_module"]}
    assert groups["layers.*.self_attn"]["instances"] == 2


def test_module_paths_from_both_exporters_metadata():
    import onnx_ir as ir

    dynamo = ir.Node("", "Reshape", [], name="node_view_1", metadata_props={
        "pkg.torch.onnx.name_scopes": "['', 'model.layers.11', 'model.layers.11.self_attn', "
                                      "'view_1']"})
    hook = ir.Node("", "Shape", [], name="node_Shape_0", metadata_props={
        "pkg.torch.onnx.name_scopes": "['_empty_nn_module_stack_from_metadata_hook', 'sym']"})
    namespace = ir.Node("", "Concat", [], name="n", metadata_props={
        "namespace": ": m.M/layers.0: m.Layer/layers.0.mlp: m.Mlp/cat: aten.cat.default"})
    scoped = ir.Node("", "Reshape", [], name="/model/layers.3/self_attn/Reshape_2")
    assert module_path(dynamo) == "model.layers.11.self_attn"
    assert module_path(hook) == ""
    assert module_path(namespace) == "layers.0.mlp"
    assert module_path(scoped) == "model.layers.3.self_attn"
    assert path_of_name("Reshape_2") == ""
    assert pattern("model.layers.11.self_attn") == "model.layers.*.self_attn"
    assert pattern("blocks.2.mlp.fc1") == "blocks.*.mlp.fc1"  # fc1 is a name, not an index
    assert pattern("") == "(top level)"


@pytest.mark.parametrize("scopes, path", [
    ("['', 'enc', 'enc.attn', 'add']", "enc.attn"),      # as exporters write it
    ("['', 'it\\'s', 'add']", "it's"),                  # escaped: read as a literal
    ("['', 'a',  'b', 'add']", "b"),                       # other spacing: read as a literal
    ("['', 'x\ny', 'add']", "m.layers.3"),   # a raw newline: no literal, the name decides
    ("['', 'x\x00y', 'add']", "m.layers.3"),  # a NUL: the same
    ("['', 'caf\u00e9', 'add']", "caf\u00e9"),         # not ASCII: read as a literal
    ("{[]}", "m.layers.3"),             # not a list, its parse fails: the node's name decides
    ("[" * 200_000 + "]" * 200_000, "m.layers.3"),  # too deep for any parse
    ("['', 'a', 1]", "m.layers.3"),                         # not strings
])
def test_module_path_reads_any_scopes_text(scopes, path):
    import onnx_ir as ir

    node = ir.Node("", "Add", [], name="/m/layers.3/Add",
                   metadata_props={"pkg.torch.onnx.name_scopes": scopes})
    assert module_path(node) == path


def test_unreadable_scopes_do_not_stop_the_fold(tmp_path):
    """A constant node whose recorded scopes no literal parse takes (``{[]}``) folds like any
    other (the fold was skipped whole: "TypeError: unhashable type")."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    neg = helper.make_node("Neg", ["a"], ["b"], name="neg")
    neg.metadata_props.add(key="pkg.torch.onnx.name_scopes", value="{[]}")
    graph = helper.make_graph(
        [neg, helper.make_node("Add", ["x", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.ones(2, np.float32), "a")])
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), src)
    proc = run_cli("optimize", src, "-o", out)
    assert proc.returncode == 0 and "skipped" not in proc.stdout, proc.stdout + proc.stderr
    assert [n.op_type for n in onnx.load(out).graph.node] == ["Add"]


def test_grouping_counts_instances_ops_and_reasons():
    import onnx_ir as ir

    model = ir.Model(ir.Graph([], [], nodes=[], opset_imports={"": 17}), ir_version=8)
    declined = [{"node": f"/m/layers.{i}/attn/Reshape_{j}", "op": "Reshape",
                 "kind": "policy", "reason": "allowzero"} for i in range(3) for j in range(2)]
    blocked = [{"node": "/m/Shape", "op": "Shape", "blocked_by": "`seq` of input x"}]
    groups = group_leftovers(model, declined, blocked)
    assert groups[0] == {"module": "m.layers.*.attn", "instances": 3, "nodes": 6,
                         "ops": {"Reshape": 6}, "reasons": ["allowzero"], "dims": [],
                         "rewrites_declined": []}
    assert groups[1]["module"] == "m" and \
        groups[1]["reasons"] == ["blocked by dynamic dims: `seq` of input x"] and \
        groups[1]["dims"] == ["seq"]


def test_declined_rewrites_join_the_modules_where_something_stayed():
    import onnx_ir as ir

    x = ir.Value(name="x")
    reshapes = [ir.Node("", "Reshape", [x], name=f"/m/layers.{i}/attn/Reshape") for i in (0, 1)]
    matmul = ir.Node("", "MatMul", [x, x], name="/m/layers.0/mlp/MatMul")
    graph = ir.Graph([x], [], nodes=[*reshapes, matmul], opset_imports={"": 17})
    model = ir.Model(graph, ir_version=8)
    blocked = [{"node": "/m/layers.0/attn/Concat", "op": "Concat", "blocked_by": "`s`"}]
    rejected = {**dict.fromkeys(reshapes, "reshape_known_target: allowzero"),
                matmul: "fuse_matmul_add_into_gemm: not 2-D"}
    (group,) = group_leftovers(model, [], blocked, rejected)  # no group for the MatMul alone
    assert group["module"] == "m.layers.*.attn" and group["instances"] == 2
    assert group["reasons"] == ["blocked by dynamic dims: `s`"] and group["nodes"] == 1
    # the Reshapes did not stay for a fold: named apart, not counted among the nodes
    assert group["rewrites_declined"] == ["reshape_known_target not applied to Reshape x2: "
                                          "allowzero"]
