"""`onnxfold optimize`'s report: the per-op table, the JSON report against its documented
schema, `-q`, batch rows, and the short repr / table() of the Python API."""

import copy
import json
import os
import re

import pytest

import onnxfold
from onnxfold.pipeline.report_schema import load_schema, validate
from tests.support.cli import run_cli
from tests.support.models import exp_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BERT = os.path.join(ROOT, "models", "tiny_bert_ts.onnx")
GPT2 = os.path.join(ROOT, "models", "tiny_gpt2_ts.onnx")
TABLE_ROW = re.compile(r"^(\S+)\s+(\d+)\s+(\d+)\s+([+-]?\d+)$")


def table_rows(text):
    """op -> (before, after, delta) for each row of the per-op table in ``text``."""
    return {m.group(1): tuple(int(m.group(i)) for i in (2, 3, 4))
            for m in map(TABLE_ROW.match, text.splitlines()) if m}


@pytest.fixture(scope="module")
def checked_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    out, report = tmp / "out.onnx", tmp / "report.json"
    proc = run_cli("optimize", BERT, "-o", str(out), "--check", "2", "--json", str(report))
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(report.read_text())


def test_the_check_verdict_comes_last(checked_run):
    """The per-op table and summary first, then the comparison, ending with its verdict."""
    lines = checked_run[0].stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split() == ["op", "before",
                                                                        "after", "delta"])
    compared = next(i for i, line in enumerate(lines) if line.startswith("compared "))
    assert header < compared and lines[-1].startswith(
        "all outputs within tolerance on 2 input sets; every folded tensor verified for every "
        "input; ") and \
        lines[-1].endswith(" rewrites validated on the input sets")


def test_summary_prints_the_per_op_table_sorted_by_change(checked_run):
    proc, data = checked_run
    rows = table_rows(proc.stdout)
    assert ["op", "before", "after", "delta"] in [line.split() for line in
                                                  proc.stdout.splitlines()]
    before, after, delta = rows.pop("total")
    # one node count everywhere: Constant nodes not counted (the table has no Constant row,
    # the summary says how many there were)
    assert (before, after) == (data["nodes_before"], data["nodes_after"]) == (222, 70)
    assert (data["constant_nodes_before"], data["constant_nodes_after"]) == (90, 0)
    assert "nodes        222 -> 70  (Constant nodes not counted: 90 -> 0)" in proc.stdout
    assert delta == after - before
    assert sum(r[0] for r in rows.values()) == before
    assert sum(r[1] for r in rows.values()) == after
    deltas = [abs(r[2]) for r in rows.values()]
    changed = [d for d in deltas if d]
    assert changed == sorted(changed, reverse=True) and deltas[:len(changed)] == changed
    assert "Constant" not in rows
    assert "time " in proc.stdout and "weights " in proc.stdout


def test_json_report_validates_against_the_shipped_schema(checked_run):
    _, data = checked_run
    assert validate(data) == []
    assert data["schema"] == load_schema()["properties"]["schema"]["const"] == 3
    assert data["versions"]["onnxfold"] == onnxfold.__version__
    assert data["versions"]["onnx"] and data["versions"]["onnxruntime"]
    assert {row["op"]: (row["before"], row["after"]) for row in data["ops"]}["Unsqueeze"] == \
        (46, 0)
    assert data["options"]["check"] == 2 and data["options"]["fallback"] is True
    assert data["check"]["ok"] is True and data["check"]["n"] == 2
    assert [o["name"] for o in data["check"]["outputs"]] and \
        all(o["ok"] and o["max_abs"] >= 0 for o in data["check"]["outputs"])
    assert {"load", "fold", "check"} <= set(data["phases"])
    assert all(seconds >= 0 for seconds in data["phases"].values())
    assert data["folded_regions"] and sum(g["nodes"] for g in data["folded_regions"]) > 0


@pytest.mark.parametrize("breakage", ["missing", "mistyped", "nested", "bool_for_int"])
def test_the_schema_check_fails_on_a_broken_report(checked_run, breakage):
    _, data = checked_run
    broken = copy.deepcopy(data)
    if breakage == "missing":
        del broken["ops"]
    elif breakage == "mistyped":
        broken["nodes_after"] = "72"
    elif breakage == "nested":
        broken["check"]["outputs"][0]["max_rel"] = None
    else:
        broken["ops"][0]["before"] = True
    assert validate(broken), breakage


def test_quiet_prints_nothing_and_json_still_has_the_table(tmp_path):
    report = tmp_path / "r.json"
    proc = run_cli("optimize", BERT, "-o", str(tmp_path / "o.onnx"), "-q",
                        "--json", str(report))
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    data = json.loads(report.read_text())
    assert validate(data) == [] and data["check"] is None and data["ops"]


def test_batch_rows_name_the_ops_that_changed_most(tmp_path):
    proc = run_cli("optimize", BERT, GPT2, "-o", f"{tmp_path}/")
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.splitlines()
    assert header.rstrip().endswith("most changed ops")
    bert_row = next(r for r in rows if r.startswith(BERT))
    assert "Unsqueeze -46, Identity -19, Concat -15" in bert_row


def test_api_repr_is_short_and_table_is_the_cli_table(checked_run):
    result = onnxfold.optimize(BERT)
    text = repr(result)
    assert text.startswith("<OptimizeResult nodes 222 -> 70") and len(text) < 160
    assert len(repr(result.report)) < 160
    table = result.report.table()
    assert table_rows(table) == table_rows(checked_run[0].stdout)
    assert result.report.summary().startswith(table)


def test_a_failed_check_still_writes_the_reports_with_its_verdict(tmp_path):
    src, out = tmp_path / "exp.onnx", tmp_path / "out.onnx"
    exp_model(src)
    report, page = tmp_path / "r.json", tmp_path / "r.html"
    proc = run_cli("optimize", str(src), "-o", str(out), "--check", "1", "--rtol", "0",
                        "--atol", "0", "--json", str(report), "--report", str(page))
    assert proc.returncode == 1, proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["exp.onnx", "r.html", "r.json"]  # no model, no temp
    data = json.loads(report.read_text())
    assert validate(data) == [] and data["output"] is None
    assert data["check"]["ok"] is False
    (row,) = data["check"]["outputs"]
    assert row["name"] == "y" and not row["ok"] and row["mismatches"] > 0 and row["max_abs"] > 0
    html = page.read_text()  # the red alert above everything, naming the output
    assert "Check failed</strong>: nothing was written." in html
    assert "output y: " in html and "elements outside tolerance" in html


def test_report_html_is_refused_for_several_models(tmp_path):
    proc = run_cli("optimize", BERT, GPT2, "-o", f"{tmp_path}/out/", "--report",
                        str(tmp_path / "r.html"))
    assert proc.returncode == 2
    assert proc.stderr == "onnxfold: error: --report: give one model at a time\n"
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "out").exists()


def test_verbose_adds_how_the_run_went_and_the_default_says_what_to_decide_on(tmp_path):
    """By default: nodes, weights, time, what stayed, where it was written, and a line that
    suggests --check; internals (fold counts, pool, phases, rewrites) only with -v."""
    plain = run_cli("optimize", BERT, "-o", str(tmp_path / "a.onnx"))
    verbose = run_cli("optimize", BERT, "-o", str(tmp_path / "b.onnx"), "-v")
    assert plain.returncode == verbose.returncode == 0, plain.stderr + verbose.stderr
    internals = ("folded       102 nodes: 102 native, 0 via onnxruntime in 0 sessions; 32 that "
                 "nothing read were removed without being computed",
                 "pool peak ", "rewrites     ", "(2 rounds, load ")
    assert not any(text in plain.stdout for text in internals), plain.stdout
    assert all(text in verbose.stdout for text in internals), verbose.stdout
    for out in (plain.stdout, verbose.stdout):
        assert "nodes        222 -> 70  (Constant nodes not counted: 90 -> 0)" in out
    assert plain.stdout.splitlines()[-1].startswith("check        not run: --check 3")
    checked = run_cli("optimize", BERT, "-o", str(tmp_path / "c.onnx"), "--check", "1")
    assert "check        not run" not in checked.stdout


def test_the_time_line_gives_the_check_apart(tmp_path):
    """Issue 65: a 3 s fold with --check showed '71 s' on its time line: the run's own time
    first, the check's apart, and the sum."""
    import re

    from tests.support.cli import run_cli, save_add_model

    save_add_model(tmp_path / "m.onnx")
    proc = run_cli("optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "--check", "1")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("time "))
    assert re.fullmatch(r"time +[\d.]+ s, check [\d.]+ s \([\d.]+ s in all\)", line), line
    plain = run_cli("optimize", tmp_path / "m.onnx", "-o", tmp_path / "p.onnx")
    line = next(x for x in plain.stdout.splitlines() if x.startswith("time "))
    assert re.fullmatch(r"time +[\d.]+ s", line), line


def test_the_written_line_names_the_data_file_as_it_names_the_model(tmp_path):
    """Issue 65: 'wrote m.onnx + /abs/dir/m.onnx.data' mixed a relative path and an absolute
    one: the data file is shown as the output is."""
    import shutil
    from pathlib import Path

    from tests.support.cli import run_cli

    models = Path(__file__).resolve().parents[2] / "models"
    shutil.copy(models / "tiny_bert_ts.onnx", tmp_path / "m.onnx")
    (tmp_path / "sub").mkdir()
    proc = run_cli("optimize", "m.onnx", "-o", "sub/o.onnx", "--external-data", "yes",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("wrote "))
    assert line.startswith("wrote        sub/o.onnx + sub/o.onnx.data ("), line
