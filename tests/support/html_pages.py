"""The HTML report in a real Chromium: finding it (a test skips, saying why, without one),
running it headless on a page (its DOM or a screenshot, and the console messages it logged),
and a model whose names are hostile markup, which must reach a page as text."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.cli import run_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BERT = os.path.join(ROOT, "models", "tiny_bert_ts.onnx")
CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser",
                                                 "google-chrome") if shutil.which(name)), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed "
                                    "(apt-get install chromium)")
# names a hostile model could carry: each must reach the page as text, never as markup
WEIGHT = 'w"><script>window.pwned=1</script>'
FOLDED = "t<img src=x onerror=alert(1)>"
SHAPE_NODE = "/<b onclick=x>blk</b>/Shape"  # a TorchScript-style scope: module "<b ...<.b>"


def hostile_model():
    """x[?, 4] @ Transpose(W) (folds), and Shape(x) (blocked by the dynamic dim)."""
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), WEIGHT)
    nodes = [helper.make_node("Transpose", [WEIGHT], [FOLDED], perm=[1, 0], name="T&T"),
             helper.make_node("MatMul", ["x", FOLDED], ["m"], name="mm"),
             helper.make_node("Shape", ["x"], ["s"], name=SHAPE_NODE)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("m", TensorProto.FLOAT, ["n", 4]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [2])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def chromium(page, tmp_path, *flags):
    """Run headless Chromium on ``page``; (stdout, the console messages it logged)."""
    profile = tmp_path / f"profile{len(list(tmp_path.glob('profile*')))}"
    profile.mkdir()
    proc = run_command(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
         "--window-size=1280,1600", *flags, page.as_uri()], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console
