"""results.md (tables and notes) and results.svg (grouped bars, log scale, hand-written SVG)."""

from __future__ import annotations

import html
import math
from typing import Any

from foldbench import MiB

# --------------------------------------------------------------------------- markdown


def _mib(nbytes: Any) -> str:
    if nbytes is None:
        return "-"
    v = nbytes / MiB
    return f"{v:.1f}" if v >= 10 else f"{v:.3g}"


def _fmt(v: Any, spec: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    return format(v, spec)


def _cell(text: str, limit: int = 110) -> str:
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return text.replace("|", "\\|")


def render_markdown(result: dict[str, Any]) -> str:
    """The header, the results table, the onnxfold / peer ratios and the notes."""
    m = result["machine"]
    tools = result["tools"]
    pv = m["peers_versions"]
    peer_versions = ", ".join(f"{k} {pv.get(k, '?')}" for k in (
        "onnxruntime", "onnx", "numpy", "onnxsim", "onnxslim", "polygraphy", "onnx_graphsurgeon",
        "onnxscript", "onnx_ir"))
    timeouts = ", ".join(f"{t} {s:g}" for t, s in result["tool_timeouts"].items())
    lines = [
        "# onnxfold vs other ONNX constant folders",
        "",
        f"- date: {result['date']}; repeat: {result['repeat']} (median wall, max RSS)",
        f"- machine: {m['cpu']}, nproc {m['nproc']}, {m['mem_total_gib']} GiB RAM, "
        f"{m['platform']}",
        f"- onnxfold: python {m['python']}, onnxfold {m['onnxfold']}, onnxruntime "
        f"{m['onnxruntime']}, onnx {m['onnx']}, numpy {m['numpy']}",
        f"- peers (`{m['peers_python']}`): {peer_versions}",
        f"- RSS floor (trivial `python -c pass` child): {m['rss_floor_mib']} MiB "
        f"(peers' interpreter: {m['peers_rss_floor_mib']} MiB)",
        f"- tool timeouts (s): {timeouts}",
        "- wall, CPU (user, sys) and RSS are whole child processes (interpreter start-up and "
        "imports included);"
        " max abs diff vs the original, both run with ORT_DISABLE_ALL; chart: results.svg",
        "",
        "| model | tool | status | wall s | user s | sys s | peak RSS MiB | RSS / input "
        "| cf_shape left | output MiB | loads in ORT | max abs diff |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|:-:|--:|",
    ]
    notes: list[str] = []
    pools: list[str] = []
    for name, res in result["models"].items():
        inp = res["input"]
        lines.append(f"| {name} | (input) | | | | | | | {_fmt(inp.get('cf_shape'))} | "
                     f"{_mib(inp.get('file_bytes'))} | | |")
        for tool in tools:
            t = res["tools"][tool]
            diff = t.get("max_abs_diff")
            lines.append(
                f"| {name} | {tool} | {_cell(t['status'])} | {_fmt(t['wall_s'], '.2f')} | "
                f"{_fmt(t.get('user_s'), '.2f')} | {_fmt(t.get('sys_s'), '.2f')} | "
                f"{_fmt(t['peak_rss_mib'], '.0f')} | {_fmt(t['rss_over_input'], '.2f')} | "
                f"{_fmt(t.get('cf_shape'))} | {_mib(t.get('output_bytes'))} | "
                f"{_fmt(t.get('loads_in_ort'))} | {_fmt(diff, '.3g')} |")
            notes.extend(f"- {name} / {tool} {key}: {_cell(t[key], 400)}"
                         for key in ("stats_error", "accuracy_error") if t.get(key))
            if t["status"].startswith("crashed") and len(t["status"]) > 110:
                notes.append(f"- {name} / {tool}: {_cell(t['status'], 400)}")
            if tool == "onnxfold" and t.get("pool_peak_bytes") is not None:
                pools.append(f"{name} {t['pool_peak_bytes'] / MiB:.1f}")
    peers = [t for t in tools if t != "onnxfold"]
    if "onnxfold" in tools and peers:
        lines += ["", "onnxfold / peer (wall x / peak RSS x; `-` where either did not finish ok):",
                  "", "| model | " + " | ".join(peers) + " |",
                  "|---|" + "--:|" * len(peers)]
        for name, res in result["models"].items():
            cells = []
            for tool in peers:
                r = res["ratio_onnxfold_over"].get(tool)
                cells.append(f"{_fmt(r['wall'], '.2f')}x / {_fmt(r['rss'], '.2f')}x" if r
                             else "-")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if pools:
        notes.append("- onnxfold buffer-pool peak (MiB): " + ", ".join(pools))
    not_inst = {t: e for t, e in result["not_installed"].items() if t in tools}
    for tool, why in not_inst.items():
        notes.append(f"- {tool} not installed in the peers' python: {_cell(why, 300)}")
    if result["missing"]:
        notes.append(f"- missing models (not run): {', '.join(result['missing'])}")
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- SVG chart

COLORS = {"onnxfold": "#d62728", "ort": "#1f77b4", "onnxsim": "#ff7f0e", "onnxslim": "#2ca02c",
          "polygraphy": "#9467bd", "graphsurgeon": "#8c564b", "onnxscript": "#17becf"}


def _nice(v: float) -> str:
    return f"{v:g}" if v >= 1 else f"{v:.2g}"


def _svg_panel(out: list[str], result: dict[str, Any], key: str, title: str, top: float,
               left: float, group_w: float, bar_w: float, plot_h: float) -> None:
    models = list(result["models"])
    tools = result["tools"]
    vals = [t[key] for res in result["models"].values() for t in res["tools"].values()
            if t.get(key)]
    if not vals:
        return
    e_lo = math.floor(math.log10(min(vals)))
    e_hi = math.ceil(math.log10(max(vals)))
    e_hi = max(e_hi, e_lo + 1)
    y_base = top + plot_h
    width = group_w * len(models)

    def y(v: float) -> float:
        return y_base - (math.log10(v) - e_lo) / (e_hi - e_lo) * plot_h

    out.append(f'<text x="{left}" y="{top - 10}" class="title">{html.escape(title)}</text>')
    for e in range(e_lo, e_hi + 1):
        for mult in (1, 2, 5):
            v = mult * 10.0 ** e
            if v > 10.0 ** e_hi:
                break
            cls = "grid" if mult == 1 else "grid minor"
            out.append(f'<line x1="{left}" x2="{left + width}" y1="{y(v):.1f}" '
                       f'y2="{y(v):.1f}" class="{cls}"/>')
            out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" class="tick">{_nice(v)}</text>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{y_base}" class="axis"/>')
    out.append(f'<line x1="{left}" x2="{left + width}" y1="{y_base}" y2="{y_base}" '
               'class="axis"/>')
    for gi, name in enumerate(models):
        gx = left + gi * group_w
        x0 = gx + (group_w - bar_w * len(tools)) / 2
        for ti, tool in enumerate(tools):
            t = result["models"][name]["tools"][tool]
            x = x0 + ti * bar_w
            cx = x + bar_w / 2
            v = t.get(key)
            status = t["status"]
            if v is None or status == "not installed":
                out.append(f'<text x="{cx:.1f}" y="{y_base - 4}" class="mark" '
                           f'transform="rotate(-90 {cx:.1f} {y_base - 4})" '
                           'text-anchor="start">n/i</text>')
                continue
            ok = status == "ok"
            unit = "s" if key == "wall_s" else "MiB"
            tip = html.escape(f"{name} / {tool}: {v:.3g} {unit} ({status})")
            style = "" if ok else ' fill-opacity="0.35" stroke-dasharray="3,2"'
            out.append(f'<rect x="{x + 1:.1f}" y="{y(v):.1f}" width="{bar_w - 2:.1f}" '
                       f'height="{y_base - y(v):.1f}" fill="{COLORS.get(tool, "#777")}" '
                       f'stroke="{COLORS.get(tool, "#777")}"{style}><title>{tip}</title></rect>')
            if not ok:
                mark = "T" if status.startswith("timeout") else "\u2717"
                out.append(f'<text x="{cx:.1f}" y="{y(v) - 3:.1f}" class="mark">{mark}</text>')
        out.append(f'<text x="{gx + group_w / 2:.1f}" y="{y_base + 16}" class="label">'
                   f'{html.escape(name)}</text>')


def render_svg(result: dict[str, Any]) -> str:
    """Grouped bars (log scale) of wall time and peak RSS per model and tool."""
    tools = result["tools"]
    models = list(result["models"])
    bar_w = 15.0 if len(tools) > 4 else 22.0
    group_w = max(bar_w * len(tools) + 24, 9 * max((len(n) for n in models), default=8))
    left, plot_h = 70.0, 240.0
    legend_w = sum(16 + 7.5 * len(t) + 18 for t in tools)
    width = max(left + group_w * len(models) + 20, left + legend_w + 20, 860.0)
    legend_h = 46.0
    top1 = legend_h + 40
    top2 = top1 + plot_h + 70
    height = top2 + plot_h + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif">',
        "<style>.title{font-size:14px;font-weight:bold}.tick{font-size:11px;text-anchor:end;"
        "fill:#333}.label{font-size:12px;text-anchor:middle}.mark{font-size:10px;"
        "text-anchor:middle;fill:#222}.legend{font-size:12px}.grid{stroke:#ccc;"
        "stroke-width:1}.minor{stroke:#eee}.axis{stroke:#000;stroke-width:1}</style>",
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>',
        f'<text x="{left}" y="18" class="title">onnxfold vs other constant folders '
        f'({html.escape(result["date"])}, repeat {result["repeat"]})</text>',
    ]
    lx = left
    for tool in tools:
        out.append(f'<rect x="{lx}" y="28" width="12" height="12" '
                   f'fill="{COLORS.get(tool, "#777")}"/>')
        out.append(f'<text x="{lx + 16}" y="39" class="legend">{html.escape(tool)}</text>')
        lx += 16 + 7.5 * len(tool) + 18
    out.append(f'<text x="{left}" y="{legend_h + 12}" class="legend" fill="#555">faded bar: '
               'did not finish (\u2717 crashed, T timeout: bar = time/RSS until it stopped); '
               'n/i: not installed. Log scale; lower is better.</text>')
    _svg_panel(out, result, "wall_s", "Wall time (s, whole process, log scale)", top1, left,
               group_w, bar_w, plot_h)
    _svg_panel(out, result, "peak_rss_mib", "Peak RSS (MiB, log scale)", top2, left, group_w,
               bar_w, plot_h)
    out.append("</svg>")
    return "\n".join(out) + "\n"

