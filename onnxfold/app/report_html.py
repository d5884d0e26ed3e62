"""``optimize --report FILE.html``: the report as one self-contained HTML page.

Everything is inline (CSS, SVG charts, a few lines of JavaScript to sort tables): the page
opens from disk with no network, no external script or font. Every string that comes from the
model (op types, node, tensor and module names, dims) is untrusted and goes through
``html_parts.esc``; onnxfold's own sentences through ``html_parts.prose`` (their `code` spans
as code, never a raw backtick). A failed check is the first thing the page shows, in red, with
its reasons (``report_html_check.py``); the check and the latency are rendered from the
report's data (``report_html_latency.py``), so a state this code never heard of shows as the
check names it.
"""

from __future__ import annotations

import json
from typing import Any

from onnxfold.app import report_html_check, report_html_latency, signature
from onnxfold.app.html_parts import CSS, card, esc, mib, prose, table
from onnxfold.pipeline.report import Report, conversion_line, runtime_ops_line, versions

MAX_CHART_OPS = 30  # ops drawn in the before/after chart (the table has all)
BEFORE, AFTER = "#b8c2cc", "#2f6fb3"
PHASE_COLOURS = ["#2f6fb3", "#e0863a", "#3a9e6f", "#b5487a", "#7a68c2", "#c2a03a", "#4aa3b8",
                 "#8c8c8c"]



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


def page(title: str, subtitle: str, body: str, heading: str = "onnxfold report") -> str:
    """A whole page: ``title`` (escaped here), ``subtitle`` and ``body`` (HTML, escaped by
    the caller), the versions, the style and the script that sorts its tables."""
    vers = ", ".join(f"{name} {v}" for name, v in versions().items() if v)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>onnxfold report: {esc(title)}</title>
<style>{CSS}</style></head>
<body>
<header><h1>{esc(heading)}</h1><div class="sub">{subtitle} \u00b7 {esc(vers)}</div></header>
<main>
{body}
</main>
<script>{SORT_JS}</script>
</body></html>
"""


def compare_page(check: dict[str, Any], a: str, b: str, verification_off: bool,
                 command: str = "compare") -> str:
    """``compare --report`` and ``verify-folds --report``: the check's alert and section of
    ``optimize``'s page, for ``check`` (``CompareResult.to_dict``; a fold verification
    alone: ``ok``, ``state`` and ``folds``)."""
    consequence = f"{esc(b)} does not compute what {esc(a)} computes"
    body = (report_html_check.alert(check, None, consequence) +
            f'<section id="s-check"><h2>Check</h2>'
            f"{report_html_check.section(check, None, verification_off)}</section>")
    return page(f"{a} vs {b}", f"{esc(a)} vs {esc(b)}", body, f"onnxfold {command}")


def render_html(report: Report) -> str:
    """The whole page for ``report``: the first screen (cards, and a failed check's alert in
    red with its reasons), then the sections."""
    title = report.input or "model"
    options = json.dumps(report.options, indent=1, sort_keys=True)
    written = f" \u2192 {esc(report.output)}" if report.output else ""
    return page(title, f"{esc(title)}{written}", f"""
{report_html_check.alert(report.check, report.output)}
<div class="cards">{_cards(report)}</div>
{_warnings(report)}
<section id="s-signature"><h2>Signature, before and after</h2>
{signature.html(report.signature)}</section>
<section id="s-ops"><h2>Nodes per op, before and after</h2>
<p class="muted">Constant nodes are not counted here or anywhere in the report.</p>
<div class="row"><div>{_op_chart(report)}</div><div>{_op_table(report)}</div></div></section>
<section id="s-rewrites"><h2>Rewrites: what each rule did</h2>{_rewrites(report)}</section>
<section id="s-folded"><h2>What folded, by module</h2>{_folded(report)}</section>
<section id="s-stayed"><h2>What stayed, and why, by module</h2>{_stayed(report)}</section>
<section id="s-check"><h2>Check</h2>{_check(report)}</section>
<section id="s-latency"><h2>Latency and size</h2>{_latency(report)}</section>
<section id="s-phases"><h2>Time per phase</h2>{_phase_chart(report.phases)}</section>
<section><details><summary><h2 style="display:inline">Options</h2></summary>
<pre><code>{esc(options)}</code></pre></details></section>""")


def _from_to(before: str, after: str) -> str:
    """``before -> after``, their unit said once when they share it ("415.39 -> 413.81 MiB"):
    a card's width holds it on one line."""
    head, _, unit = before.rpartition(" ")
    if head and after.endswith(f" {unit}"):
        return f"{head} \u2192 {after}"
    return f"{before} \u2192 {after}"


def _cards(report: Report) -> str:
    """The first screen's cards: nodes, weights, time, the check (red when it failed)."""
    check = report.check
    state = "-" if check is None else str(check.get("state") or (
        "passed" if check.get("ok") else "failed"))
    tone = "" if check is None else "ok" if check.get("ok") else "bad"
    saved = report.metadata_stripped
    return "".join([
        card("nodes", f"{report.nodes_before} \u2192 {report.nodes_after}",
             f"{report.folded_nodes} folded; Constant nodes not counted "
             f"({report.constant_nodes_before} \u2192 {report.constant_nodes_after})"),
        card("weights", _from_to(mib(report.weight_bytes[0]), mib(report.weight_bytes[1])),
             f"{report.new_initializers} new" + (
                 f"; metadata: {mib(saved['bytes'])} saved" if saved else "")),
        card("time", f"{sum(report.phases.values()) or report.seconds:.2f} s",
             f"{report.rounds} round{'s' if report.rounds != 1 else ''}"),
        card("check", state.upper() if tone == "bad" else state,
             "" if check is None else f"{len(check.get('outputs', []))} output(s)", tone),
    ])


def _warnings(report: Report) -> str:
    """The run's warnings and skipped steps, and what --target-opset did, under the cards."""
    lines = [*report.warnings, *(f"skipped {step}" for step in report.skipped_steps)]
    if report.runtime_ops:
        lines.insert(0, runtime_ops_line(report.runtime_ops).removeprefix("runtime ops").strip())
    if report.conversion is not None:
        lines.insert(0, "opset " + conversion_line(report.conversion).removeprefix("opset")
                     .strip())
    if not lines:
        return ""
    return ('<section><h2>Notes</h2><ul>' + "".join(f"<li>{prose(line)}</li>" for line in lines)
            + "</ul></section>")


def _op_table(report: Report) -> str:
    change = report.nodes_after - report.nodes_before
    total = ("total", report.nodes_before, report.nodes_after, f"{change:+d}" if change else "0")
    return table(["op", "before", "after", "delta"],
                 [(r.op, r.before, r.after, f"{r.delta:+d}" if r.delta else "0")
                  for r in report.op_rows()], {1, 2, 3}, "ops", total)


MAX_MODULES = 3  # modules a rewrite's row names (the JSON has all)


def _rewrites(report: Report) -> str:
    """Each pattern and cleanup that did something: its hits, the nodes it removed, and for a
    pattern the modules it rewrote most in; the share of the removed nodes rewrites account
    for."""
    rows = [r for r in report.rewrites if r["hits"]]
    if not rows:
        return '<p class="muted">no rewrite applied</p>'
    removed = sum(max(r["nodes_removed"], 0) for r in rows)
    total = report.nodes_before - report.nodes_after
    share = (f"Rewrites removed {removed} of the {total} nodes the run removed; folding the "
             "constants removed the rest." if total > 0 else
             f"Rewrites removed {removed} nodes.")
    body = [(r["rule"], r["kind"], r["hits"], r["nodes_removed"],
             "; ".join(f"{module} x{n}"
                       for module, n in list(r["modules"].items())[:MAX_MODULES])
             + (f"; +{len(r['modules']) - MAX_MODULES} more" if len(r["modules"]) > MAX_MODULES
                else ""))
            for r in rows]
    return (f"<p>{esc(share)} Nodes removed count what each rewrite took out less what it "
            "built (a node it left unread goes in the prune after, counted there).</p>" +
            table(["rule", "kind", "hits", "nodes removed", "where (module: hits)"], body,
                  {2, 3}, "rewrites"))


def _folded(report: Report) -> str:
    if not report.folded_regions:
        return '<p class="muted">no folded initializers</p>'
    return table(["module", "initializers", "nodes folded", "bytes", "e.g."],
                 [(g["module"], g["initializers"], g["nodes"], mib(g["bytes"]),
                   ", ".join(g["examples"])) for g in report.folded_regions],
                 {1, 2, 3}, "folded")


def _stayed(report: Report) -> str:
    if not report.leftovers:
        return '<p class="muted">every constant-foldable node was folded</p>'
    return table(["module", "instances", "nodes", "ops", "why they stayed",
                  "rewrites declined there (nodes not counted)"],
                 [(g["module"], g["instances"], g["nodes"],
                   ", ".join(f"{op} x{n}" for op, n in g["ops"].items()),
                   "; ".join(g["reasons"]), "; ".join(g.get("rewrites_declined", [])))
                  for g in report.leftovers], {1, 2}, "stayed", sentences=frozenset({4, 5}))


def _latency(report: Report) -> str:
    return report_html_latency.section(report.latency)


def _check(report: Report) -> str:
    return report_html_check.section(report.check, report.new_initializers,
                                     bool(report.options.get("no_fold_verification")))
