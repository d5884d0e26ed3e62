"""What ``optimize --check`` prints on a decoder of many layers reads at a glance: the check's
inputs and table group a family of KV-cache names as the signature does
(``present.{0..15}.key (16)``), no line runs past 200 characters (the signature, the dims,
the notes wrap under their label; a path given is the user's), a model where nothing folds
gets one line instead of a table of zeros, and the dims ``stayed`` names are those a user can
set. Before: one row per cache tensor (181 lines at 16 layers), lines of 2,366 characters."""

from __future__ import annotations

import onnx

from tests.support.cli import assert_ok, run_cli
from tests.support.models import gqa_decoder

LONGEST = 200


def test_a_sixteen_layer_decoder_reads_at_a_glance(tmp_path):
    onnx.save(gqa_decoder(16), tmp_path / "model.onnx")
    done = run_cli("optimize", "model.onnx", "--check", "3", cwd=tmp_path)
    assert_ok(done)
    lines = done.stdout.splitlines()
    assert max(map(len, lines)) <= LONGEST, max(lines, key=len)
    assert lines[0].startswith("op table     every op's count as it was (")
    assert any(line.startswith("present.{0..15}.key (16) ") for line in lines)
    assert sum(line.startswith("present.") for line in lines) == 2
    assert "  input past_key_values.{0..15}.value (16): float32" in done.stdout
    assert sum(line.startswith("  input ") and not line.startswith("  input sets")
               for line in lines) == 4
    assert "runtime ops  16 nodes of onnxruntime's own ops, kept: GroupQueryAttention x16" \
        in done.stdout
    assert len(lines) < 60, done.stdout


def test_a_family_that_fails_is_named_by_its_members(tmp_path):
    """Grouped rows keep their verdict: a wrong cache output makes its row (and the verdict
    line, which names every failing output) say so."""
    good, bad = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(gqa_decoder(4), good)
    wrong = gqa_decoder(4)
    node = next(n for n in wrong.graph.node if n.op_type == "GroupQueryAttention")
    next(a for a in node.attribute if a.name == "num_heads").i = 2
    next(a for a in node.attribute if a.name == "kv_num_heads").i = 1
    onnx.save(wrong, bad)
    done = run_cli("compare", "a.onnx", "b.onnx", "-n", "2", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert max(map(len, done.stdout.splitlines())) <= LONGEST
