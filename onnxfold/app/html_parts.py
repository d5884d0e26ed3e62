"""The pieces every section of the HTML report is made of: escaped text, onnxfold's own prose
(its `code` spans as code, never raw backticks), sortable tables, cards, the page's style.

Every string that comes from the model (op types, node, tensor and module names, dims) is
untrusted and goes through :func:`esc`; onnxfold's own sentences (reasons, notes, warnings),
which quote commands and flags between backticks as the docs do, go through :func:`prose`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from typing import Any

CSS = """
:root { --fg:#1d2733; --muted:#5b6776; --line:#dde3ea; --bg:#f6f8fa; --accent:#2f6fb3; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: var(--fg); background: var(--bg); }
header { background: #1d2733; color: #fff; padding: 18px 32px; }
header h1 { margin: 0; font-size: 20px; font-weight: 600; }
header .sub { color: #aeb9c6; font-size: 12px; margin-top: 4px; overflow-wrap: anywhere; }
main { padding: 20px 32px 40px; max-width: 1200px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(240px, 1fr));
         gap: 12px; margin-bottom: 16px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; }
.card .k { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card .v { font-size: 20px; font-weight: 600; margin-top: 2px; overflow-wrap: anywhere; }
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
.warn { color: #8a5a00; font-weight: 600; }
.muted { color: var(--muted); }
.legend span { display: inline-block; width: 10px; height: 10px; border-radius: 2px;
               margin: 0 4px 0 12px; vertical-align: middle; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; overflow-wrap: anywhere; }
svg text { font: 11px system-ui, sans-serif; fill: var(--fg); }
.alert { border-radius: 8px; padding: 12px 16px; margin-bottom: 16px; font-size: 15px; }
.alert.bad { background: #fbe9e7; border: 2px solid #b3362f; color: #7a1d17; }
.alert.bad strong { color: #b3362f; }
.alert ul { margin: 6px 0 0 18px; padding: 0; }
.card.bad { border: 2px solid #b3362f; background: #fbe9e7; }
.card.bad .v { color: #b3362f; }
.card.ok .v { color: #1f7a3f; }
"""

_CODE = re.compile(r"`([^`\n]+)`")


def esc(value: Any) -> str:
    """``value`` as HTML text (quotes too: safe in attributes)."""
    return html.escape(str(value), quote=True)


def mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.2f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: set[int],
          table_id: str = "", total: Sequence[Any] | None = None,
          sentences: frozenset[int] = frozenset()) -> str:
    """A sortable table; cells are escaped (``sentences``: onnxfold's prose, :func:`prose`);
    ``numeric`` columns are right-aligned."""
    ident = f' id="{esc(table_id)}"' if table_id else ""
    head = "".join(f'<th class="n">{esc(h)}</th>' if i in numeric else f"<th>{esc(h)}</th>"
                   for i, h in enumerate(headers))
    body = []
    for row, cls in [*((r, "") for r in rows), *([(total, "total")] if total else [])]:
        cells = "".join(f'<td class="n">{esc(c)}</td>' if i in numeric else
                        f"<td>{prose(c) if i in sentences else esc(c)}</td>"
                        for i, c in enumerate(row))
        body.append(f'<tr class="{cls}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    return (f'<table class="sortable"{ident}><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def prose(text: Any) -> str:
    """onnxfold's own sentence as HTML: escaped, its `code` spans as ``<code>`` and no
    backtick left raw (a lone one is dropped)."""
    escaped = esc(text)
    return _CODE.sub(r"<code>\1</code>", escaped).replace("`", "")


def card(key: str, value: str, detail: str = "", tone: str = "") -> str:
    """A card of the first screen: a key, its value, a detail; ``tone`` "ok" or "bad" colours
    it. A value too wide for its card wraps at its arrow only ("415.39 MiB" stays whole; it
    was cut at "415.39 MiB -> 413.81 Mi")."""
    cls = f"card {tone}" if tone else "card"
    held = value.replace(" ", "\u00a0").replace("\u00a0\u2192\u00a0", " \u2192 ")
    return (f'<div class="{cls}"><div class="k">{esc(key)}</div><div class="v">{esc(held)}'
            f'</div><div class="d">{esc(detail)}</div></div>')


def number(value: float | None) -> str:
    """A tolerance as given, or "by dtype" where none was."""
    return "by dtype" if value is None else f"{value:g}"


def ms(value: float) -> str:
    """Milliseconds: three significant digits, whole ones from 100 on."""
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"
