"""``optimize --report FILE.html``: the report as one self-contained HTML page.

Everything is inline (CSS, SVG charts, a few lines of JavaScript to sort tables): the page
opens from disk with no network, no external script or font. Every string that comes from the
model (op types, node, tensor and module names, dims) is untrusted and goes through
:func:`html.escape`; numbers are formatted here.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from typing import Any

from onnxfold.pipeline.report import Report, versions

MAX_CHART_OPS = 30  # ops drawn in the before/after chart (the table has all)
BEFORE, AFTER = "#b8c2cc", "#2f6fb3"
PHASE_COLOURS = ["#2f6fb3", "#e0863a", "#3a9e6f", "#b5487a", "#7a68c2", "#c2a03a", "#4aa3b8",
                 "#8c8c8c"]

CSS = """
:root { --fg:#1d2733; --muted:#5b6776; --line:#dde3ea; --bg:#f6f8fa; --accent:#2f6fb3; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: var(--fg); background: var(--bg); }
header { background: #1d2733; color: #fff; padding: 18px 32px; }
header h1 { margin: 0; font-size: 20px; font-weight: 600; }
header .sub { color: #aeb9c6; font-size: 12px; margin-top: 4px; word-break: break-all; }
main { padding: 20px 32px 40px; max-width: 1200px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(200px, 1fr));
         gap: 12px; margin-bottom: 16px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; }
.card .k { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card .v { font-size: 22px; font-weight: 600; margin-top: 2px; }
.card .d { color: var(--muted); font-size: 12px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px;
          padding: 14px 18px; margin-bottom: 16px; }
section h2 { font-size: 16px; margin: 0 0 10px; }
.row { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 18px; }
@media (max-width: 900px) { .row { grid-template-columns: 1fr; } }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line);
         vertical-align: top; }
th { color: var(--muted); font-weight: 600; cursor: pointer; user-select: none;
     white-space: nowrap; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.total td { font-weight: 600; border-top: 2px solid var(--fg); }
.neg { color: #1f7a3f; } .pos { color: #b3362f; }
.ok { color: #1f7a3f; font-weight: 600; } .bad { color: #b3362f; font-weight: 600; }
.muted { color: var(--muted); }
.legend span { display: inline-block; width: 10px; height: 10px; border-radius: 2px;
               margin: 0 4px 0 12px; vertical-align: middle; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; word-break: break-all; }
svg text { font: 11px system-ui, sans-serif; fill: var(--fg); }
"""

SORT_JS = """
document.querySelectorAll("table.sortable th").forEach(function (th, index) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows).filter(function (r) {
      return !r.classList.contains("total"); });
    var totals = Array.prototype.slice.call(body.rows).filter(function (r) {
      return r.classList.contains("total"); });
    var down = th.dataset.dir !== "down";
    th.dataset.dir = down ? "down" : "up";
    rows.sort(function (a, b) {
      var x = a.cells[index].dataset.v || a.cells[index].textContent;
      var y = b.cells[index].dataset.v || b.cells[index].textContent;
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return down ? -c : c;
    });
    rows.concat(totals).forEach(function (r) { body.appendChild(r); });
  });
});
document.body.dataset.ready = "1";
"""


def esc(value: Any) -> str:
    """``value`` as HTML text (quotes too: safe in attributes)."""
    return html.escape(str(value), quote=True)


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.2f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB"


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: set[int],
           table_id: str = "", total: Sequence[Any] | None = None) -> str:
    """A sortable table; cells are escaped; ``numeric`` columns are right-aligned."""
    ident = f' id="{esc(table_id)}"' if table_id else ""
    head = "".join(f'<th class="n">{esc(h)}</th>' if i in numeric else f"<th>{esc(h)}</th>"
                   for i, h in enumerate(headers))
    body = []
    for row, cls in [*((r, "") for r in rows), *([(total, "total")] if total else [])]:
        cells = "".join(f'<td class="n">{esc(c)}</td>' if i in numeric else f"<td>{esc(c)}</td>"
                        for i, c in enumerate(row))
        body.append(f'<tr class="{cls}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    return (f'<table class="sortable"{ident}><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def _op_chart(report: Report) -> str:
    """Horizontal bars: each op's node count before (grey) and after (blue)."""
    rows = report.op_rows()[:MAX_CHART_OPS]
    if not rows:
        return '<p class="muted">no nodes</p>'
    label_w, bar_w, row_h = 150, 320, 22
    top = max(max(r.before, r.after) for r in rows) or 1
    parts = []
    for i, r in enumerate(rows):
        y = i * row_h
        wb, wa = bar_w * r.before / top, bar_w * r.after / top
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{esc(r.op)}</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{wb:.1f}" height="8" fill="{BEFORE}">'
            f"<title>{esc(r.op)}: {r.before} before</title></rect>"
            f'<rect x="{label_w}" y="{y + 11}" width="{wa:.1f}" height="8" fill="{AFTER}">'
            f"<title>{esc(r.op)}: {r.after} after</title></rect>"
            f'<text x="{label_w + max(wb, wa) + 4:.1f}" y="{y + 15}" class="muted">'
            f"{r.before} \u2192 {r.after}</text>")
    height = len(rows) * row_h + 4
    more = len(report.op_rows()) - len(rows)
    note = f'<p class="muted">{more} more op types in the table</p>' if more > 0 else ""
    return (f'<p class="legend"><span style="background:{BEFORE}"></span>before'
            f'<span style="background:{AFTER}"></span>after</p>'
            f'<svg role="img" aria-label="nodes per op before and after" width="100%" '
            f'viewBox="0 0 {label_w + bar_w + 90} {height}" id="op-chart">{"".join(parts)}</svg>'
            + note)


def _pair_chart(label: str, before: int, after: int, fmt: Any) -> str:
    """Two bars, before and after, for one quantity."""
    top = max(before, after) or 1
    bar_w = 260
    parts = []
    for i, (name, value, colour) in enumerate((("before", before, BEFORE),
                                               ("after", after, AFTER))):
        y = i * 26
        parts.append(f'<text x="0" y="{y + 15}">{name}</text>'
                     f'<rect x="50" y="{y + 4}" width="{bar_w * value / top:.1f}" height="14" '
                     f'fill="{colour}"></rect>'
                     f'<text x="{54 + bar_w * value / top:.1f}" y="{y + 15}">{esc(fmt(value))}'
                     "</text>")
    return (f'<svg role="img" aria-label="{esc(label)}" width="520" height="70" '
            'viewBox="0 0 400 54">'
            f'{"".join(parts)}</svg>')


def _phase_chart(phases: dict[str, float]) -> str:
    """One stacked bar of the phases' seconds, and their table."""
    total = sum(phases.values())
    if not total:
        return '<p class="muted">no timings</p>'
    x, parts, width = 0.0, [], 600
    for i, (name, seconds) in enumerate(phases.items()):
        w = width * seconds / total
        parts.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="22" '
                     f'fill="{PHASE_COLOURS[i % len(PHASE_COLOURS)]}">'
                     f"<title>{esc(name)}: {seconds:.3f} s</title></rect>")
        x += w
    legend = "".join(f'<span style="background:{PHASE_COLOURS[i % len(PHASE_COLOURS)]}"></span>'
                     f"{esc(name)} {seconds:.2f} s" for i, (name, seconds) in
                     enumerate(phases.items()))
    return (f'<svg role="img" aria-label="time per phase" width="100%" '
            f'viewBox="0 0 {width} 22" preserveAspectRatio="none" height="22">{"".join(parts)}'
            f'</svg><p class="legend">{legend}</p>')


def _card(key: str, value: str, detail: str = "") -> str:
    return (f'<div class="card"><div class="k">{esc(key)}</div><div class="v">{esc(value)}</div>'
            f'<div class="d">{esc(detail)}</div></div>')


def _check_section(check: dict | None) -> str:
    if check is None:
        return '<p class="muted">not checked (<code>--check N</code> compares the outputs ' \
               "with the original model in onnxruntime)</p>"
    if check.get("state") == "could not run":
        return ('<p class="bad">the check could not run; nothing was written</p>'
                f'<p>{esc(check["reason"])}</p>')
    verdict = ('<p class="ok">all outputs within tolerance</p>' if check["ok"] else
               '<p class="bad">FAILED: outputs outside tolerance or folds that differ; '
               "nothing was written</p>")
    if check.get("failure"):
        verdict += f'<p class="bad">{esc(check["failure"])}</p>'
    rows = [(o["name"], o["dtype"], "[" + ",".join(map(str, o["shape"])) + "]",
             f"{o['max_abs']:.3g}", f"{o['max_rel']:.3g}",
             "-" if o["max_ulps"] is None else f"{o['max_ulps']:g}",
             f"{o['mismatches']}/{o['elements']}", "yes" if o["ok"] else "NO")
            for o in check["outputs"]]
    tolerances = ("tolerances by each output's dtype" if check["rtol"] is None and
                  check["atol"] is None else
                  f'rtol {_number(check["rtol"])}, atol {_number(check["atol"])}')
    settings = (f'<p class="muted">{check["n"]} input set(s) from seed {check["seed"]}, '
                f'{tolerances}, onnxruntime optimization level '
                f'{esc(str(check.get("level", "")))}</p>')
    feeds = _table(["input", "dtype", "shape", "values"],
                   [(i["name"], i["dtype"], "[" + ",".join(map(str, i["shape"])) + "]",
                     i["source"]) for i in check.get("inputs", [])], set(), "feeds")
    return verdict + settings + "<h3>What was fed</h3>" + feeds + _table(
        ["output", "dtype", "shape", "max abs", "max rel", "max ulps", "mismatches", "ok"],
        rows, {3, 4, 5, 6}, "check") + _folds_section(check.get("folds"))


def _folds_section(folds: dict | None) -> str:
    """The fold verification: counts, then every tensor that differs or is not verifiable."""
    if folds is None:
        return '<p class="muted">folds not verified (the second model carries no onnxfold ' \
               "provenance, or --no-fold-verification)</p>"
    counts = folds["counts"]
    head = (f'<h3>Fold verification</h3><p class="{"ok" if folds["ok"] else "bad"}">'
            f'{sum(counts.values())} folded tensors re-derived from the original in '
            f'onnxruntime: {counts["bitwise"]} bitwise, {counts["within"]} within the ulps '
            f'of docs/exactness.md, {counts["not verifiable"]} not verifiable, '
            f'{counts["differs"]} differ</p>')
    rows = [(t["name"], t["dtype"], "[" + ",".join(map(str, t["shape"])) + "]", t["state"],
             "-" if t["max_ulps"] is None else f"{t['max_ulps']:.3g}", t["reason"])
            for t in folds["tensors"] if t["state"] != "bitwise"]
    return head + (_table(["tensor", "dtype", "shape", "state", "max ulps", "why"], rows,
                          {4}, "folds") if rows else "")


def render_html(report: Report) -> str:
    """The whole page for ``report``."""
    rows = report.op_rows()
    change = report.nodes_after - report.nodes_before
    total = ("total", report.nodes_before, report.nodes_after, f"{change:+d}" if change else "0")
    op_table = _table(["op", "before", "after", "delta"],
                      [(r.op, r.before, r.after, f"{r.delta:+d}" if r.delta else "0")
                       for r in rows], {1, 2, 3}, "ops", total)
    folded = _table(["module", "initializers", "nodes folded", "bytes", "e.g."],
                    [(g["module"], g["initializers"], g["nodes"], _mib(g["bytes"]),
                      ", ".join(g["examples"])) for g in report.folded_regions],
                    {1, 2, 3}, "folded") if report.folded_regions else \
        '<p class="muted">no folded initializers</p>'
    stayed = _table(["module", "instances", "nodes", "ops", "why they stayed",
                     "rewrites declined there (nodes not counted)"],
                    [(g["module"], g["instances"], g["nodes"],
                      ", ".join(f"{op} x{n}" for op, n in g["ops"].items()),
                      "; ".join(g["reasons"]), "; ".join(g.get("rewrites_declined", [])))
                     for g in report.leftovers],
                    {1, 2}, "stayed") if report.leftovers else \
        '<p class="muted">every constant-foldable node was folded</p>'
    vers = ", ".join(f"{name} {v}" for name, v in versions().items() if v)
    title = report.input or "model"
    cards = "".join([
        _card("nodes", f"{report.nodes_before} \u2192 {report.nodes_after}",
              f"{report.folded_nodes} folded; Constant nodes not counted "
              f"({report.constant_nodes_before} \u2192 {report.constant_nodes_after})"),
        _card("weights", f"{_mib(report.initializer_bytes_before)} \u2192 "
              f"{_mib(report.initializer_bytes_after)}", f"{report.new_initializers} new"),
        _card("time", f"{sum(report.phases.values()) or report.seconds:.2f} s",
              f"{report.rounds} round{'s' if report.rounds != 1 else ''}"),
        _card("check", "-" if report.check is None else
              ("passed" if report.check["ok"] else
               "NOT RUN" if report.check.get("state") == "could not run" else "FAILED"),
              "" if report.check is None else
              f"{len(report.check.get('outputs', []))} output(s)"),
    ])
    options = json.dumps(report.options, indent=1, sort_keys=True)
    written = f" \u2192 {esc(report.output)}" if report.output else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>onnxfold report: {esc(title)}</title>
<style>{CSS}</style></head>
<body>
<header><h1>onnxfold report</h1><div class="sub">{esc(title)}
{written} \u00b7 {esc(vers)}</div></header>
<main>
<div class="cards">{cards}</div>
<section><h2>Nodes per op, before and after</h2>
<p class="muted">Constant nodes are not counted here or anywhere in the report.</p>
<div class="row"><div>{_op_chart(report)}</div><div>{op_table}</div></div></section>
<section><h2>Initializer bytes</h2>
{_pair_chart("initializer bytes", report.initializer_bytes_before,
             report.initializer_bytes_after, _mib)}</section>
<section><h2>What folded, by module</h2>{folded}</section>
<section><h2>What stayed, and why, by module</h2>{stayed}</section>
<section><h2>Check</h2>{_check_section(report.check)}</section>
<section><h2>Latency and size</h2>{_latency_section(report.latency)}</section>
<section><h2>Time per phase</h2>{_phase_chart(report.phases)}</section>
<section><details><summary><h2 style="display:inline">Options</h2></summary>
<pre><code>{esc(options)}</code></pre></details></section>
</main>
<script>{SORT_JS}</script>
</body></html>
"""


def _latency_section(latency: dict | None) -> str:
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
           + "; ratios run by run; feeds " + ", ".join(latency["feeds"]))
    rows = []
    for timing in latency["timings"]:
        for which, label in (("run", "inference"), ("create", "session creation")):
            compared = timing.get(which)
            if compared is None:  # a report written before the spreads
                continue
            rows.append((timing["level"], label, _spread_cell(compared["original"]),
                         _spread_cell(compared["optimized"]),
                         _ratio_cell(compared["ratio"]), compared["verdict"]))
    a, b = latency["file_bytes"]
    dims = ", ".join(latency["dynamic_dims"][0]) or "none"
    return (f'<p class="muted">{esc(how)}</p>' + _verdict_table(rows) +
            f"<p>on disk {esc(_mib(a))} \u2192 {esc(_mib(b))}; dynamic dims of the "
            f"original: {esc(dims)}; of the output: "
            f'{esc(", ".join(latency["dynamic_dims"][1]) or "none")}</p>')


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
    return f'{_ms(spread["median"])} [{_ms(spread["low"])}-{_ms(spread["high"])}]'


def _ratio_cell(spread: dict) -> str:
    """``0.89x [0.85-0.95]``."""
    return f'{spread["median"]:.2f}x [{spread["low"]:.2f}-{spread["high"]:.2f}]'


def _ms(value: float) -> str:
    """Milliseconds: three significant digits, whole ones from 100 on."""
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _number(value: float | None) -> str:
    """A tolerance as given, or "by dtype" where none was."""
    return "by dtype" if value is None else f"{value:g}"
