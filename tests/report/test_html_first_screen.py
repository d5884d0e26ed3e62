"""The HTML report puts what a user must see first on the first screen: a failed check in red
with its reasons, above the cards, none of whose values wraps (in a real Chromium, inside a
1280x900 window); it has a
rewrites section (rule, hits, nodes removed, where); onnxfold's own prose shows its `code`
spans as code, never a raw backtick; and the check is rendered from its data, so a state the
page's code never heard of still shows, named as the check names it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

from onnxfold.app import cli
from onnxfold.app.report_html import render_html
from onnxfold.pipeline.report import Report
from tests.support.bugged_rules import doubling_fold
from tests.support.cli import assert_ok, run_cli
from tests.support.html_pages import BERT, chromium, hostile_model, needs_chromium

SCREEN = 900  # the first screen's height, at --window-size=1280,900
POSITION_JS = """<script>
var alert = document.getElementById("check-alert");
document.body.dataset.alertTop = alert ? alert.getBoundingClientRect().top : -1;
document.body.dataset.alertBottom = alert ? alert.getBoundingClientRect().bottom : -1;
document.body.dataset.text = document.body.innerText.indexOf("`") >= 0 ? "backtick" : "clean";
document.body.dataset.cardLines = Math.max.apply(null, Array.prototype.map.call(
  document.querySelectorAll(".card .v"), function (v) {
    return Math.round(v.getBoundingClientRect().height /
                      parseFloat(getComputedStyle(v).lineHeight)); }));
document.body.dataset.cardOverflow = Array.prototype.some.call(
  document.querySelectorAll(".card .v"), function (v) {
    return v.scrollWidth > v.parentElement.clientWidth; }) ? "yes" : "no";
</script></body>"""


@pytest.fixture(scope="module")
def failed_page(tmp_path_factory):
    """The tiny BERT's report where a wrong fold fails the check (exit 1)."""
    tmp = tmp_path_factory.mktemp("failed")
    patched = doubling_fold("Transpose")  # a folded weight transpose
    line = cli.parse(["optimize", BERT, "-o", str(tmp / "o.onnx"), "--check", "1", "-q",
                      "--report", str(tmp / "r.html"), "--json", str(tmp / "r.json")])
    command = dataclasses.replace(line.command, settings=dataclasses.replace(
        line.command.settings, catalogue=patched))
    assert cli.run(dataclasses.replace(line, command=command)) == 1
    return tmp, (tmp / "r.html").read_text(), json.loads((tmp / "r.json").read_text())


def test_a_failed_check_is_the_first_thing_the_page_says(failed_page):
    _, text, data = failed_page
    failing = [o["name"] for o in data["check"]["outputs"] if not o["ok"]]
    assert failing and text.index('id="check-alert"') < text.index('class="cards"')
    alert = text[text.index('id="check-alert"'):text.index("</div>", text.index("check-alert"))]
    assert "Check failed</strong>: nothing was written." in alert
    assert all(f"output {name}: " in alert for name in failing)
    assert re.search(r"folded tensor \S+ differs", alert)
    assert '<div class="card bad"><div class="k">check</div><div class="v">FAILED' in text


def _measured(text: str, tmp_path: Path, *flags: str) -> str:
    """The page's DOM as Chromium laid it out, with the alert's place and whether a backtick
    shows written into its body's data."""
    page = tmp_path / "measured.html"
    page.write_text(text.replace("</body>", POSITION_JS))
    dom, console = chromium(page, tmp_path, "--dump-dom", *flags)
    assert console == [] and 'data-ready="1"' in dom
    return dom


@needs_chromium
def test_in_chromium_the_alert_is_on_the_first_screen(failed_page, tmp_path):
    dom = _measured(failed_page[1], tmp_path, "--window-size=1280,900")
    top = float(re.search(r'data-alert-top="([\d.]+)"', dom).group(1))
    bottom = float(re.search(r'data-alert-bottom="([\d.]+)"', dom).group(1))
    assert 0 < top < bottom < SCREEN / 2, (top, bottom)
    assert 'data-card-lines="1"' in dom  # no card's value wraps to a second line,
    assert 'data-card-overflow="no"' in dom  # nor runs out of its card


@pytest.fixture(scope="module")
def hostile_page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    import onnx

    onnx.save(hostile_model(), str(tmp / "m.onnx"))
    assert_ok(run_cli("optimize", tmp / "m.onnx", "-o", tmp / "o.onnx", "--report",
                      tmp / "r.html", "--json", tmp / "r.json"))
    return tmp, (tmp / "r.html").read_text(), json.loads((tmp / "r.json").read_text())


def test_no_raw_backtick_in_onnxfolds_prose(hostile_page):
    """The dynamic-dim reason of what stayed quotes the dim between backticks in the JSON;
    the page shows it as code."""
    _, text, data = hostile_page
    reasons = [r for group in data["leftovers"] for r in group["reasons"]]
    assert any("`" in reason for reason in reasons), reasons
    assert "`" not in re.sub(r"<[^>]*>", "", text.split("<script>")[0])
    assert "<code>n</code>" in text


@needs_chromium
def test_in_chromium_no_backtick_is_shown(hostile_page, tmp_path):
    assert 'data-text="clean"' in _measured(hostile_page[1], tmp_path)


def test_the_rewrites_section_lists_what_each_rule_did(tmp_path):
    page, report = tmp_path / "r.html", tmp_path / "r.json"
    assert_ok(run_cli("optimize", BERT, "-o", tmp_path / "o.onnx", "--report", page,
                      "--json", report))
    text, data = page.read_text(), json.loads(report.read_text())
    applied = [r for r in data["rewrites"] if r["hits"]]
    assert applied and any(r["nodes_removed"] > 0 for r in applied)
    section = text[text.index('id="s-rewrites"'):text.index('id="s-folded"')]
    for row in applied:
        assert f"<td>{row['rule']}</td><td>{row['kind']}</td><td class=\"n\">{row['hits']}" \
            f"</td><td class=\"n\">{row['nodes_removed']}</td>" in section
    removed = sum(max(r["nodes_removed"], 0) for r in applied)
    assert f"Rewrites removed {removed} of the {data['nodes_before'] - data['nodes_after']} " \
        "nodes the run removed" in section


def _report(**check: object) -> Report:
    report = Report(input="m.onnx", nodes_before=3, nodes_after=2, folded_nodes=1,
                    folded_native=1, folded_fallback=0, fallback_sessions=0,
                    initializer_bytes_before=8, initializer_bytes_after=8, new_initializers=1,
                    seconds=0.1, pool_peak_bytes=0, rounds=1)
    report.check = {"ok": False, "state": "failed", "n": 1, "seed": 0, "rtol": None,
                    "atol": None, "level": "all", "inputs": [], "outputs": [], **check}
    return report


def test_a_state_the_page_never_heard_of_shows_as_the_check_names_it():
    folds = {"ok": False, "counts": {"bitwise": 3, "approximately": 1},
             "tensors": [{"name": "w2", "dtype": "float", "shape": [2], "state": "approximately",
                          "max_ulps": None, "reason": "summed in `fp64`"}]}
    text = render_html(_report(state="inconclusive", folds=folds))
    assert "Check inconclusive</strong>" in text and "3 bitwise, 1 approximately" in text
    assert "folded tensor w2 approximately: summed in <code>fp64</code>" in text
    assert '<div class="v">INCONCLUSIVE</div>' in text


@pytest.mark.parametrize(("folded", "options", "says"), [
    (0, {}, "the run folded no tensor, so there is none to re-derive"),
    (2, {"no_fold_verification": True}, "--no-fold-verification was given"),
    (2, {}, "the output carries no onnxfold provenance"),
])
def test_why_folds_were_not_verified_is_what_the_report_knows(folded, options, says):
    report = _report(ok=True, state="passed", folds=None)
    report.new_initializers, report.options = folded, options
    assert f"folds not verified: {says}" in render_html(report)


def test_the_check_could_not_run_is_red_with_its_reason():
    report = Report(input="m.onnx", nodes_before=1, nodes_after=1, folded_nodes=0,
                    folded_native=0, folded_fallback=0, fallback_sessions=0,
                    initializer_bytes_before=0, initializer_bytes_after=0, new_initializers=0,
                    seconds=0.1, pool_peak_bytes=0, rounds=1)
    report.check = {"ok": False, "state": "could not run",
                    "reason": "the original does not run on the feeds: give `--dim n=4`"}
    text = render_html(report)
    assert "Check could not run</strong>: nothing was written." in text
    assert "give <code>--dim n=4</code>" in text


def test_chromium_is_found_or_the_skip_says_why():
    assert shutil.which("chromium") or needs_chromium.kwargs["reason"]
    assert Path(BERT).is_file()
