"""``tools/signature_counts.py`` (issue 83's measure of the signature over a corpus): a run keeps
each model's count, and a diff names a model counted less and each file's uncounted total."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tools import signature_counts

MODELS = Path(__file__).resolve().parents[2] / "models"


def test_a_run_keeps_the_counts_and_a_diff_names_what_was_counted_less(tmp_path, capsys):
    out = tmp_path / "head.json"
    signature_counts.run(out, [str(MODELS / "tiny_bert_ts_dynamic.onnx")], sys.executable)
    found = json.loads(out.read_text())
    (entry,) = found.values()
    assert entry["exit"] == 0 and entry["compute"]["after"]["not_counted"] == {}
    worse = json.loads(out.read_text())
    worse_entry = next(iter(worse.values()))
    worse_entry["compute"]["after"]["not_counted"] = {"MatMul": 3}  # (a costed op)
    base = tmp_path / "base.json"
    base.write_text(json.dumps(worse))
    capsys.readouterr()
    signature_counts.diff(out, base)
    said = capsys.readouterr().out
    assert said.startswith("LESS tiny_bert_ts_dynamic.onnx")
    assert "head: 1 models, 1 with 3 nodes of a declared cost not counted" in said
    assert "base: 1 models, 0 with 0 nodes" in said
