"""Exporter metadata: the metadata of every node and value dropped by default (and with
``--strip-metadata``), but onnxfold's own keys (every ``onnxfold.`` key the code names, read
from the code, so a key added later is covered); ``--strip-metadata=all`` drops those too,
``--keep-metadata`` keeps it all. The report says what it saved, and the bytes it says
are what the file lost; the report's module groups (read from that metadata) are the same.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.errors import InputError
from tests.support.cli import assert_one_error_line, run_cli

ROOT = Path(__file__).resolve().parents[2]
FOREIGN = {"pkg.torch.onnx.stack_trace": "File x.py, line 3, in forward\n  y = f(x)" * 20,
           "namespace": ": m/layers.0: torch.nn.Linear/linear: aten.linear.default"}


def onnxfold_keys() -> set[str]:
    """Every string literal of ``onnxfold/`` that is an ``onnxfold.`` key."""
    keys = set()
    for path in (ROOT / "onnxfold").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    re.fullmatch(r"onnxfold\.[a-z_.]+", node.value):
                keys.add(node.value)
    return keys


def _model(path: Path) -> str:
    """y = (x + (c + c)) * w with every kind of metadata: nodes (doc strings too), the
    graph's input and output, an initializer's tensor."""
    own = dict.fromkeys(sorted(onnxfold_keys()), "kept")
    f = TensorProto.FLOAT
    c = numpy_helper.from_array(np.arange(3, dtype=np.float32), "c")
    w = numpy_helper.from_array(np.full(3, 2, np.float32), "w")
    for tensor in (c, w):
        for key, value in {**own, **FOREIGN}.items():
            tensor.metadata_props.add(key=key, value=value)
    nodes = [helper.make_node("Add", ["c", "c"], ["d"], name="fold_me", doc_string="line 1"),
             helper.make_node("Add", ["x", "d"], ["e"], name="stays"),
             helper.make_node("Mul", ["e", "w"], ["y"], name="mul")]
    x, y = (helper.make_tensor_value_info(n, f, ["n", 3]) for n in ("x", "y"))
    for item in (*nodes, x, y):
        for key, value in {**own, **FOREIGN}.items():
            item.metadata_props.add(key=key, value=value)
        if isinstance(item, onnx.NodeProto):
            item.metadata_props.add(key="pkg.torch.onnx.name_scopes",
                                    value=f"['', 'block', '{item.name}']")
    graph = helper.make_graph(nodes, "g", [x], [y], [c, w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    return str(path)


def _keys(model: onnx.ModelProto) -> list[set[str]]:
    """The metadata keys of each node, graph input and output, and initializer."""
    g = model.graph
    return [{p.key for p in item.metadata_props}
            for item in (*g.node, *g.input, *g.output, *g.initializer)]


def test_the_code_names_onnxfold_keys():
    assert {"onnxfold.folded_from", "onnxfold.rounding"} <= onnxfold_keys()


@pytest.mark.parametrize("flag", [None, "--strip-metadata", "--strip-metadata=all"])
def test_metadata_is_dropped_but_onnxfolds_own_unless_all(tmp_path, flag):
    src = _model(tmp_path / "m.onnx")
    plain, stripped = tmp_path / "plain.onnx", tmp_path / "stripped.onnx"
    assert run_cli("optimize", src, "-o", plain, "-q", "--keep-metadata").returncode == 0
    kept = onnx.load(str(plain))
    assert all(keys >= set(FOREIGN) for keys in _keys(kept)[:len(kept.graph.node)])
    mode = "=all" if flag == "--strip-metadata=all" else ""
    proc = run_cli("optimize", src, "-o", stripped, *([flag] if flag else []),
                   "--json", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stderr
    out = onnx.load(str(stripped))
    own = onnxfold_keys()
    for keys in _keys(out):
        assert keys <= own and not keys & set(FOREIGN), keys
        if mode:
            assert not keys
    if not mode:  # onnxfold's keys on the nodes and values that were given them stay
        assert all(keys >= own for keys in _keys(out)[:-1]), _keys(out)
    assert not [n for n in out.graph.node if n.doc_string]
    report = json.loads((tmp_path / "r.json").read_text())
    saved = report["metadata_stripped"]
    assert saved["mode"] == ("all" if mode else "others")
    lost = plain.stat().st_size - stripped.stat().st_size
    # each shorter message's own length prefix (nodes, values, tensors, the graph) shrinks too
    g = out.graph
    prefixes = 2 * (len(g.node) + len(g.input) + len(g.output) + len(g.initializer) + 1)
    assert 0 <= lost - saved["bytes"] <= prefixes, (lost, saved)
    exporter = f"{saved['entries'] - saved['own']} entries of exporter node and value metadata"
    assert exporter in proc.stdout
    assert "dropped (" + ("--strip-metadata=all)" if mode else "stack traces, module paths; "
                          "--keep-metadata keeps them)") in proc.stdout
    # onnxfold's own records are said apart, never counted as the exporter's
    if mode:
        assert saved["own"] >= len(own) and \
            f"and {saved['own']} of onnxfold's own records dropped" in proc.stdout
    else:
        assert saved["own"] == 0 and "own records" not in proc.stdout


def test_the_reports_module_groups_are_read_before_the_metadata_goes(tmp_path):
    src = _model(tmp_path / "m.onnx")
    reports = []
    for extra in (["--keep-metadata"], []):
        target = tmp_path / f"r{len(reports)}.json"
        assert run_cli("optimize", src, "--json", target, *extra).returncode == 0
        reports.append(json.loads(target.read_text()))
    assert reports[0]["folded_regions"] == reports[1]["folded_regions"] != []


def test_the_python_api_takes_it_as_a_keyword(tmp_path):
    src = _model(tmp_path / "m.onnx")
    result = onnxfold.optimize(src, strip_metadata="others")
    assert result.report.metadata_stripped["entries"] > 0
    assert all(not keys & set(FOREIGN) for keys in _keys(result.to_proto()))
    with pytest.raises(InputError, match=r"^strip_metadata='some': expected 'others' or 'all'"):
        onnxfold.optimize(src, strip_metadata="some")


def test_a_wrong_mode_is_one_line(tmp_path):
    src = _model(tmp_path / "m.onnx")
    assert_one_error_line(run_cli("optimize", src, "--strip-metadata=some"),
                          "--strip-metadata: invalid choice: 'some'")
