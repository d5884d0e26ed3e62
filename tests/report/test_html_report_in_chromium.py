"""`optimize --report FILE.html`: one self-contained page, every model-provided string escaped,
rendered by a real headless Chromium with no console message, showing the per-op table.

Skips (with the reason) where no Chromium is installed; CI installs Debian's `chromium`.
"""

import json
import re

import onnx
import pytest

from onnxfold.app.html_parts import card
from tests.support.cli import assert_ok, run_cli
from tests.support.html_pages import BERT, chromium, hostile_model, needs_chromium


def optimize_with_report(src, tmp_path, *extra):
    page, report = tmp_path / "report.html", tmp_path / "report.json"
    assert_ok(run_cli("optimize", src, "-o", tmp_path / "out.onnx", "--report", page, "--json",
                      report, *extra))
    return page.read_text(), json.loads(report.read_text())


@pytest.fixture(scope="module")
def bert_page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html")
    text, data = optimize_with_report(BERT, tmp, "--check", "1", "--latency", "2")
    return tmp, text, data


def test_the_page_is_self_contained(bert_page):
    _, text, _ = bert_page
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"https?://", text)  # nothing fetched: no URL at all
    assert not re.search(r"<(link|img|iframe|object|embed)\b", text)
    assert not re.search(r"<script[^>]*\bsrc=", text) and not re.search(r"@import|url\(", text)
    assert text.count("<script>") == 1 and "<svg" in text and "<style>" in text


def test_the_page_shows_table_chart_regions_check_and_phases(bert_page):
    _, text, data = bert_page
    assert 'id="ops"' in text and 'id="op-chart"' in text and 'id="check"' in text
    for row in data["ops"][:5]:
        assert f"<td>{row['op']}</td>" in text
    assert f'<td class="n">{data["nodes_before"]}</td>' in text  # the total row
    assert "m.encoder.layer.*.attention.self" in text  # folded regions, by module
    assert "all outputs within tolerance" in text
    assert 'id="latency"' in text and data["latency"]["runs"] == 2
    assert [t["level"] for t in data["latency"]["timings"]] == ["all", "disable"]
    for timing in data["latency"]["timings"]:  # the page says the JSON's verdicts
        for which in ("run", "create"):
            assert f'>{timing[which]["verdict"]}</td>' in text
    assert "Constant nodes are not counted" in text
    assert "<details><summary>" in text  # the options, folded away
    assert "latency" in data["phases"]  # the phase bar counts the latency's time too
    for phase in data["phases"]:
        assert f"{phase} " in text
    compute = data["signature"]["compute"]  # the signature, at the check's first input set
    assert 'id="s-signature"' in text and 'id="compute"' in text
    assert compute["from"] == "the check's first input set" and compute["after"]["macs"] > 0


def test_every_model_string_is_escaped(tmp_path):
    src = tmp_path / "<i>model&.onnx"
    onnx.save(hostile_model(), str(src))
    text, data = optimize_with_report(src, tmp_path)
    assert data["folded_regions"] and data["leftovers"]  # the hostile names reach the report
    for hostile in ("<script>window", "<img", "<b onclick", "<i>model"):
        assert hostile not in text
    assert "t&lt;img src=x onerror=alert(1)&gt;" in text  # folded initializer, as text
    assert "&lt;b onclick=x&gt;blk&lt;.b&gt;" in text  # the module of the blocked Shape
    assert "&lt;i&gt;model&amp;.onnx" in text
    assert text.count("<script>") == 1


@needs_chromium
def test_chromium_renders_it_without_console_messages(bert_page):
    tmp, _, data = bert_page
    page = tmp / "report.html"
    dom, console = chromium(page, tmp, "--dump-dom")
    assert console == []
    assert 'data-ready="1"' in dom  # the page's script ran to its end
    assert '<table class="sortable" id="ops">' in dom and 'id="compute"' in dom
    assert f"<td>{data['ops'][0]['op']}</td>" in dom
    shot = tmp / "report.png"
    _, console = chromium(page, tmp, f"--screenshot={shot}")
    assert console == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


@needs_chromium
def test_chromium_hostile_page_has_no_injected_markup(tmp_path):
    src = tmp_path / "hostile.onnx"
    onnx.save(hostile_model(), str(src))
    optimize_with_report(src, tmp_path)
    dom, console = chromium(tmp_path / "report.html", tmp_path, "--dump-dom")
    assert console == [] and 'data-ready="1"' in dom
    assert "<img" not in dom and "onclick" not in dom.replace("onclick=x&gt;", "")
    assert dom.count("<script>") == 1


@needs_chromium
def test_the_console_check_catches_an_error(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><table id='ops'></table>"
                    "<script>undefinedFunction();</script></body></html>")
    _, console = chromium(page, tmp_path, "--dump-dom")
    assert any("undefinedFunction" in line for line in console)


@needs_chromium
def test_no_card_value_is_cut_at_any_width(bert_page):
    """A card's value wider than its card wrapped nowhere and was cut ("415.39 MiB ->
    413.81 Mi" on a 1280-pixel window); the page's names broke inside words ("1.1." then "0").
    Measured by Chromium at three widths: every card value fits its card, wrapping at its
    arrow only."""
    tmp, text, _ = bert_page
    probe = ("<script>window.addEventListener('load', () => { const cut = [...document"
             ".querySelectorAll('.card .v')].filter(v => v.scrollWidth > v.clientWidth + 1)"
             ".map(v => v.textContent); document.body.setAttribute('data-cut', "
             "JSON.stringify(cut)); });</script></body>")
    weights = re.search(r'<div class="card"><div class="k">weights</div>.*?</div></div>',
                        text).group(0)  # the longest value a 400 MiB model's page shows
    page = tmp / "probe.html"
    page.write_text(text.replace("</body>", probe).replace(weights, card(
        "weights", "415.39 KiB \u2192 413.81 MiB", "68 new; metadata: 762.1 KiB saved")))
    for width in (560, 1024, 1280):
        dom, console = chromium(page, tmp, "--dump-dom", f"--window-size={width},900")
        assert console == []
        found = re.search(r'data-cut="([^"]*)"', dom)
        assert found, "the probe did not run"
        assert json.loads(found.group(1).replace("&quot;", '"')) == [], (width, found.group(1))
    assert "word-break: break-all" not in text
