"""The HTML report's latency: per onnxruntime level, each model's session creation and
inference (median [spread]), their run-by-run ratio [spread] and the verdict it gives, coloured
(``onnxfold.latency.spread``); the files' sizes and input dims are the signature's
(``signature.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from onnxfold.app.html_parts import esc, ms
from onnxfold.latency.spread import MIN_PAIRS


def section(latency: dict | None) -> str:
    """``--latency``: how it was measured, then per level the session creation and inference
    of both models (median [spread]), their run-by-run ratio [spread] and its verdict, in
    colour (faster green, slower red, within noise grey)."""
    if latency is None:
        return '<p class="muted">not measured (<code>--latency N</code> times the original ' \
               "and the output in onnxruntime)</p>"
    threads = latency["threads"]
    how = (f'onnxruntime CPU ({latency["cpu"]}), {threads} thread{"s" if threads != 1 else ""}, '
           f'default session options; medians [quartiles, or min-max below 8 samples] of '
           f'{latency["runs"]} '
           + ("interleaved runs" if latency["interleaved"] else
              "runs, one model after the other (both did not fit in memory at once)")
           + f"; ratios run by run, a verdict from {MIN_PAIRS} pairs on; feeds "
           + ", ".join(latency["feeds"]))
    rows = []
    for timing in latency["timings"]:
        for which, label in (("run", "inference"), ("create", "session creation")):
            compared = timing.get(which)
            if compared is None:  # a report written before the spreads
                continue
            rows.append((timing["level"], label, _spread_cell(compared["original"]),
                         _spread_cell(compared["optimized"]),
                         _ratio_cell(compared["ratio"]), compared["verdict"]))
    # the files' sizes and dims: the signature's section, above
    return f'<p class="muted">{esc(how)}</p>' + _verdict_table(rows)


VERDICT_CLASSES = {"faster": "ok", "slower": "bad"}  # any other verdict: muted


def _verdict_table(rows: Sequence[Sequence[str]]) -> str:
    """The latency table, its verdict cell coloured by what it says."""
    head = "".join(f"<th>{esc(h)}</th>" for h in (
        "onnxruntime level", "what", "original, ms", "output, ms", "output / original",
        "verdict"))
    body = "".join(
        "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row[:5]) +
        f'<td class="{VERDICT_CLASSES.get(row[5], "muted")}">{esc(row[5])}</td></tr>'
        for row in rows)
    return (f'<table class="sortable" id="latency"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


def _spread_cell(spread: dict) -> str:
    """``1.23 [1.20-1.31]`` (milliseconds)."""
    return f'{ms(spread["median"])} [{ms(spread["low"])}-{ms(spread["high"])}]'


def _ratio_cell(spread: dict) -> str:
    """``0.89x [0.85-0.95]``."""
    return f'{spread["median"]:.2f}x [{spread["low"]:.2f}-{spread["high"]:.2f}]'
