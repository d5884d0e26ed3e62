"""``optimize`` says what a model is, before and after: opset and IR version, each input and
output with its dtype and shape (symbolic dims named), the parameters and their bytes, the
file's size, and FLOPs/MACs per op type at the shapes of the check's first input set (the
check's own, or with no ``--check`` its plan over the optimized graph, ``--dim`` included),
said; in the
summary, ``--json`` (its schema) and the HTML report. The counts are held against the model's
own arithmetic, written out here."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxfold.pipeline.report_schema import validate
from tests.support.cli import run_cli


def _model(path) -> str:
    """y = x @ (W^T * 2) + b, x [n, 8]: the transpose and the scaling fold."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((6, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(2, np.float32), "two"),
             numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b")]
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("Mul", ["wt", "two"], ["ws"]),
             helper.make_node("MatMul", ["x", "ws"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 6])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    return str(path)


def test_the_signature_in_the_summary_and_the_json(tmp_path):
    src, out, report = _model(tmp_path / "m.onnx"), tmp_path / "o.onnx", tmp_path / "r.json"
    proc = run_cli("optimize", src, "-o", out, "--json", report, "--dim", "n=3")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert validate(data) == []
    found = data["signature"]
    assert found["opset"] == [17, 17] and found["ir_version"] == [8, 8]
    assert found["inputs"][0] == found["inputs"][1] == [
        {"name": "x", "dtype": "float32", "shape": ["n", 8]}]
    assert found["outputs"][1] == [{"name": "y", "dtype": "float32", "shape": ["n", 6]}]
    # before: w (48), two (1), b (6); after: the folded weight (48) and b
    assert found["parameters"] == [{"count": 55, "bytes": 220}, {"count": 54, "bytes": 216}]
    assert found["file_bytes"] == [os.path.getsize(src), os.path.getsize(out)]
    compute = found["compute"]
    assert compute["dims"] == {"n": 3} and compute["inputs"] == {"x": [3, 8]}
    assert compute["from"] == "planned as --check plans it, on the optimized graph"
    macs = 3 * 6 * 8
    before, after = compute["before"], compute["after"]
    assert before["ops"]["MatMul"] == {"nodes": 1, "flops": 2 * macs, "macs": macs}
    assert before["ops"]["Add"]["flops"] == 3 * 6 and before["ops"]["Mul"]["flops"] == 48
    # the scaling folded away; MatMul + Add fused into a Gemm: the same arithmetic
    assert after["ops"] == {"Gemm": {"nodes": 1, "flops": 2 * macs + 3 * 6, "macs": macs}}
    assert after["flops"] == 2 * macs + 3 * 6 and before["flops"] == after["flops"] + 48
    lines = proc.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("signature    "))
    assert lines[head].startswith("signature    opset 17, IR 8; parameters 55 in 0.2 KiB -> "
                                  "54 in 0.2 KiB; file ")
    assert lines[head + 1] == "inputs       x float32[n,8]"
    assert lines[head + 2] == "outputs      y float32[n,6]"
    assert lines[head + 3].startswith(
        "compute      354 FLOPs (144 MACs) -> 306 FLOPs (144 MACs) at n=3 (planned as --check "
        "plans it, on the optimized graph); Gemm 0 -> 306")


def test_with_a_check_the_compute_is_at_its_first_input_set_and_the_page_shows_it(tmp_path):
    src, page = _model(tmp_path / "m.onnx"), tmp_path / "r.html"
    proc = run_cli("optimize", src, "--check", "1", "--json", tmp_path / "r.json",
                   "--report", page)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    compute = data["signature"]["compute"]
    assert compute["from"] == "the check's first input set"
    assert compute["inputs"] == {"x": data["check"]["inputs"][0]["shape"]}
    assert data["signature"]["file_bytes"][1] is None  # a dry run wrote nothing
    text = page.read_text()
    section = text[text.index('id="s-signature"'):text.index('id="s-ops"')]
    assert 'id="signature"' in section and 'id="compute"' in section
    assert "<td>x</td><td>float32[n,8]</td><td>float32[n,8]</td>" in section
    assert "the check&#x27;s first input set" in section and "not written (dry run)" in section


def test_names_are_escaped_on_the_terminal_and_kept_in_the_json(tmp_path):
    """An input named with a newline and a line of its own printed a forged ``signature``
    line on stdout: every line the run prints (summary, signature, --latency's feeds,
    --explain) shows the name escaped, on its line; the JSON keeps it as it is."""
    name = "x\nsignature    forged"
    src, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
         helper.make_node("MatMul", [name, "wt"], ["y"])], "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        [numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(src))
    proc = run_cli("optimize", src, "-o", tmp_path / "o.onnx", "--latency", "1", "--explain",
                   "--input-shape", "n=2", "--json", report)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line for line in lines if "forged" in line and "x\\x0asignature" not in line] == []
    assert sum(line.startswith("signature") for line in lines) == 1
    assert any(line.startswith("inputs       x\\x0asignature    forged") for line in lines)
    assert json.loads(report.read_text())["signature"]["inputs"][0][0]["name"] == name


def test_a_family_of_inputs_is_one_row_and_the_json_keeps_each(tmp_path):
    """A decoder's KV cache (``past.N.key``/``past.N.value`` for every layer, one shape) fills a
    screen row by row: the summary and the page show each family as one row with its count;
    inputs with another shape, or too few to be a family, stay rows of their own."""
    f = TensorProto.FLOAT
    past = [f"past.{i}.{kv}" for i in range(4) for kv in ("key", "value")]
    nodes = [helper.make_node("Sum", ["x", *past], ["y"]),
             helper.make_node("Add", ["y", "odd.1"], ["z"])]
    inputs = [helper.make_tensor_value_info(n, f, ["b", 2, "p", 4]) for n in ["x", *past]]
    inputs.append(helper.make_tensor_value_info("odd.1", f, [4]))
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("z", f, ["b", 2, "p", 4])])
    src = tmp_path / "kv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    out, report, page = tmp_path / "o.onnx", tmp_path / "r.json", tmp_path / "r.html"
    proc = run_cli("optimize", src, "-o", out, "--json", report, "--report", page)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("inputs       "))
    assert line == ("inputs       x float32[b,2,p,4], past.{0..3}.key (4) float32[b,2,p,4], "
                    "past.{0..3}.value (4) float32[b,2,p,4], odd.1 float32[4]"), line
    assert "past.{0..3}.key (4)" in page.read_text()
    assert [v["name"] for v in json.loads(report.read_text())["signature"]["inputs"][1]] == \
        ["x", *past, "odd.1"]


def _huge(path) -> str:
    """x [a, 2**22, 2**22] flattened: at a = 2**20 its dims' product passes int64, and a
    Reshape to [-1, Floor(4.0)] is a shape only a walk at fixed shapes sizes."""
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["x"], ["cc"], axis=0),
         helper.make_node("Relu", ["cc"], ["o1"]),
         helper.make_node("Floor", ["c4"], ["k"]),
         helper.make_node("Cast", ["k"], ["k64"], to=TensorProto.INT64),
         helper.make_node("Concat", ["m1", "k64"], ["t"], axis=0),
         helper.make_node("Reshape", ["z", "t"], ["zr"]),
         helper.make_node("Add", ["zr", "zero"], ["za"]),
         helper.make_node("MatMul", ["za", "w"], ["o2"])], "g",
        [helper.make_tensor_value_info("x", f, ["a", 2**22, 2**22]),
         helper.make_tensor_value_info("z", f, ["m", 8])],
        [helper.make_tensor_value_info("o1", f, [1, None]),
         helper.make_tensor_value_info("o2", f, [None, 4])],
        [numpy_helper.from_array(np.array([4.0], np.float32), "c4"),
         numpy_helper.from_array(np.array([-1], np.int64), "m1"),
         numpy_helper.from_array(np.ones((4, 4), np.float32), "w"),
         numpy_helper.from_array(np.zeros(4, np.float32), "zero")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    return str(path)


def test_dims_past_int64_are_counted_or_said_never_an_error(tmp_path):
    """A count whose bound dims pass what a proto holds (found by an adversarial round: an
    internal error, exit 3, after the output was written, its line saying nothing was)."""
    done = run_cli("optimize", _huge(tmp_path / "m.onnx"), "-o", tmp_path / "o.onnx",
                   "--dim", "a=1048576", "--json", tmp_path / "r.json")
    assert done.returncode == 0, done.stderr
    compute = json.loads((tmp_path / "r.json").read_text())["signature"]["compute"]
    assert compute["after"]["ops"]["MatMul"]["macs"] == 2 * 4 * 4  # z [m=1, 8] as [2, 4]


def test_an_internal_error_after_the_write_says_the_output_was_written(tmp_path):
    """The line of an internal error says what was written before it: the output is whole
    (published), and "nothing was written" would send the user looking for nothing."""
    import subprocess
    import sys

    source, out = _model(tmp_path / "m.onnx"), tmp_path / "o.onnx"
    code = ("import onnxfold.app.optimize_report as r\n"
            "def boom(*a, **k):\n    raise RuntimeError('planted')\n"
            "r.signature = boom\n"
            "from onnxfold.app.cli import main\n"
            f"raise SystemExit(main(['optimize', {source!r}, '-o', {str(out)!r}]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip().endswith(
        f"(this is a bug; {out} was written before it; --debug or ONNXFOLD_DEBUG=1 shows the "
        "traceback)"), done.stderr
    assert out.exists()
