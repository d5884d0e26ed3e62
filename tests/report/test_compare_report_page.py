"""``compare --report R.html`` and ``verify-folds --report R.html``: the page ``optimize
--report`` shows for its check (the red alert naming what failed first, then the check's
section: feeds, outputs, fold verification), self-contained, for a wrong fold planted in the
tiny BERT's output (4 ulps off), rendered in a real Chromium without a console message."""

from __future__ import annotations

import json
import re

import pytest

from tests.support import planted_folds
from tests.support.cli import run_cli
from tests.support.html_pages import BERT, chromium, needs_chromium


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    folded = planted_folds.fold(BERT, tmp / "folded.onnx")
    states = planted_folds.verdicts(BERT, folded)
    wrong = tmp / "wrong.onnx"
    what = planted_folds.planted("ulps", BERT, folded, states, wrong)
    done = {}
    for command in ("compare", "verify-folds"):
        page, data = tmp / f"{command}.html", tmp / f"{command}.json"
        proc = run_cli(command, BERT, wrong, "--report", page, "--json", data)
        assert proc.returncode == 1, proc.stderr
        done[command] = (page, page.read_text(), json.loads(data.read_text()))
    return tmp, what.split()[0], done


def test_a_failed_compare_shows_the_checks_alert_and_section(pages):
    _, tensor, done = pages
    _, text, data = done["compare"]
    assert text.startswith("<!DOCTYPE html>") and not re.search(r"https?://|<script[^>]*src",
                                                                 text)
    alert = text[text.index('id="check-alert"'):text.index("</div>", text.index("check-alert"))]
    assert "Check failed</strong>" in alert and "does not compute what" in alert
    assert f"folded tensor {tensor} differs" in alert
    assert 'id="s-check"' in text and 'id="check"' in text and 'id="feeds"' in text
    for row in data["outputs"]:
        assert f"<td>{row['name']}</td>" in text
    assert "nothing was written" not in text  # compare writes no model


def test_verify_folds_shows_its_fold_verification(pages):
    _, tensor, done = pages
    _, text, data = done["verify-folds"]
    assert "<h3>Fold verification</h3>" in text and 'id="folds"' in text
    assert f"<td>{tensor}</td>" in text and f"folded tensor {tensor} differs" in text
    assert data["ok"] is False


@needs_chromium
def test_chromium_renders_the_compare_page(pages):
    tmp, _, done = pages
    page = done["compare"][0]
    dom, console = chromium(page, tmp, "--dump-dom")
    assert console == [] and 'data-ready="1"' in dom and 'id="check-alert"' in dom
    shot = tmp / "compare.png"
    _, console = chromium(page, tmp, f"--screenshot={shot}")
    assert console == [] and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
