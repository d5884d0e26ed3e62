"""The HTML report's check: the alert a failed check puts on the first screen, and the check's
section (feeds, outputs, the fold verification).

Everything is rendered from the report's ``check`` object as the check wrote it: its state
and reasons as given, the fold verification's counts by whatever states it has, each tensor's
state as it says. A state this code never heard of shows, named as the check names it; a
tensor in a state other than the known good ones (bitwise, within, not verifiable) is listed
on the first screen of a failed check.
"""

from __future__ import annotations

from typing import Any

from onnxfold.app.html_parts import esc, number, prose, table
from onnxfold.check.folds.verdicts import NOT_FULL, OTHER_VALUES

# states that do not fail a check (sampled and not verifiable make it incomplete, not failed)
GOOD_FOLD_STATES = frozenset({"bitwise", "within", "not verifiable", "sampled",
                              "parameter of a rewrite"})
GOOD_REWRITE_STATES = frozenset({"bitwise", "within", "not validated"})
MAX_ALERT_LINES = 8  # reasons the first screen lists (the section has every one)


def failed(check: dict[str, Any] | None) -> bool:
    return check is not None and not check.get("ok", False)


def alert(check: dict[str, Any] | None, written: str | None, consequence: str = "") -> str:
    """The first screen's red alert of a check that did not pass: its state, what follows
    (``consequence``, HTML; by default that ``written`` was not replaced, or nothing written)
    and every reason it gives, in words; "" when it passed or did not run."""
    if not failed(check):
        return ""
    assert check is not None
    state = str(check.get("state") or "failed")
    reasons = _reasons(check)
    shown = reasons[:MAX_ALERT_LINES]
    more = len(reasons) - len(shown)
    items = "".join(f"<li>{prose(line)}</li>" for line in shown) + (
        f'<li class="muted">and {more} more, in the check below</li>' if more else "")
    where = consequence or ("nothing was written" if not written else
                            f"{esc(written)} was not replaced")
    return (f'<div class="alert bad" id="check-alert" role="alert"><strong>Check '
            f"{esc(state)}</strong>: {where}."
            + (f"<ul>{items}</ul>" if items else "") + "</div>")


def _reasons(check: dict[str, Any]) -> list[str]:
    """Why the check did not pass, as lines: what it says itself (``reason``, ``failure``),
    each output outside tolerance, each folded tensor in a state that is not a good one."""
    lines = [str(check[key]) for key in ("reason", "failure") if check.get(key)]
    lines += [f"output {output['name']}: {output.get('mismatches', '?')} of "
              f"{output.get('elements', '?')} elements outside tolerance (max abs "
              f"{_g(output.get('max_abs'))}, max rel {_g(output.get('max_rel'))})"
              for output in check.get("outputs", []) if not output.get("ok", True)]
    folds = check.get("folds") or {}
    for tensor in folds.get("tensors", []):
        if tensor.get("state") not in GOOD_FOLD_STATES:
            why = f": {tensor['reason']}" if tensor.get("reason") else ""
            lines.append(f"folded tensor {tensor['name']} {tensor.get('state')}{why}")
    for rewrite in (check.get("rewrites") or {}).get("rewrites", []):
        if rewrite.get("state") not in GOOD_REWRITE_STATES:
            why = f": {rewrite['reason']}" if rewrite.get("reason") else ""
            lines.append(f"rewrite {rewrite.get('rule')} at {rewrite.get('node')} "
                         f"{rewrite.get('state')}{why}")
    return lines


def _g(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, int | float) else "?"


def section(check: dict[str, Any] | None, folded: int | None, verification_off: bool) -> str:
    """The check's section; ``folded``: tensors the run folded (0: nothing to verify; None:
    not known, ``compare``), ``verification_off``: ``--no-fold-verification`` was given (why
    folds were not verified, where the check says nothing of it)."""
    if check is None:
        return '<p class="muted">not checked (<code>--check N</code> compares the outputs ' \
               "with the original model in onnxruntime)</p>"
    state = str(check.get("state") or ("passed" if check.get("ok") else "failed"))
    line = check.get("verdict") or "all outputs within tolerance"
    # a pass that is not a full verification is not shown as one; its reasons follow
    partial = line.endswith(NOT_FULL)
    line = line.removesuffix(NOT_FULL) + (" (not a full verification: see below)"
                                          if partial else "")
    verdict = (f'<p class="{"warn" if partial else "ok"}">{prose(line)}</p>' if check.get("ok")
               else
               f'<p class="bad">{esc(state.upper())}' +
               ("" if folded is None else "; nothing was written") + "</p>")
    verdict += "".join(f'<p class="bad">{prose(check[key])}</p>'
                       for key in ("reason", "failure") if check.get(key))
    if "outputs" not in check:  # could not run (its state and reason), or verify-folds
        return verdict + (_folds(check, folded, verification_off) if "folds" in check else "")
    rows = [(o["name"], o["dtype"], _shape(o["shape"]), f"{o['max_abs']:.3g}",
             f"{o['max_rel']:.3g}", "-" if o.get("max_ulps") is None else f"{o['max_ulps']:g}",
             f"{o['mismatches']}/{o['elements']}", "yes" if o["ok"] else "NO")
            for o in check["outputs"]]
    tolerances = ("tolerances by each output's dtype" if check.get("rtol") is None and
                  check.get("atol") is None else
                  f'rtol {number(check.get("rtol"))}, atol {number(check.get("atol"))}')
    n = check.get("n")
    settings = (f'<p class="muted">{esc(n)} input set{"" if n == 1 else "s"} from seed '
                f'{esc(check.get("seed"))}, {tolerances}, onnxruntime optimization level '
                f'{esc(check.get("level", ""))}</p>')
    feeds = table(["input", "dtype", "shape in each binding", "values"],
                  [(i["name"], i["dtype"],
                    " / ".join(_shape(shape) for shape in i.get("shapes") or [i["shape"]]),
                    i["source"]) for i in check.get("inputs", [])], set(), "feeds",
                  sentences=frozenset({3}))
    notes = "".join(f'<p class="muted">{prose(note)}</p>' for note in check.get("notes", []))
    return verdict + settings + "<h3>What was fed</h3>" + feeds + notes + "<h3>Outputs</h3>" + \
        table(["output", "dtype", "shape", "max abs", "max rel", "max ulps", "mismatches", "ok"],
              rows, {3, 4, 5, 6}, "check") + _folds(check, folded, verification_off) + \
        _rewrites(check.get("rewrites"))


def _shape(shape: list[Any]) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def _folds(check: dict[str, Any], folded: int | None, verification_off: bool) -> str:
    """The fold verification: a count per state (whatever states it has), then every tensor
    not bitwise; where it did not run, why, from what the report knows."""
    folds = check.get("folds")
    if folds is None:
        why = check.get("folds_reason") or (
            "--no-fold-verification was given" if verification_off else
            "the run folded no tensor, so there is none to re-derive" if folded == 0 else
            "the output carries no onnxfold provenance to re-derive its tensors by")
        return f'<p class="muted">folds not verified: {prose(why)}</p>'
    counts: dict[str, int] = dict(folds.get("counts", {}))
    edited = sum(t.get("reason") == OTHER_VALUES for t in folds.get("tensors", []))
    if edited:  # weights of the original with other values: no folds, said apart
        counts["not verifiable"] = counts.get("not verifiable", 0) - edited
    states = ", ".join(f"{n} {state}" for state, n in counts.items())
    css = "bad" if not folds.get("ok") else "ok" if folds.get("complete", True) else "warn"
    head = (f'<h3>Fold verification</h3><p class="{css}">'
            f"{sum(counts.values())} folded tensors judged against the original in "
            f"onnxruntime: {esc(states)} (bitwise and within: for every input; within: the "
            "ulps of docs/exactness.md; sampled: equal where run, not proved; parameters of "
            "rewrites: judged with them)" + (
                f"; {edited} weight{'s' if edited != 1 else ''} of the original with other "
                "values under the same name (not folds)" if edited else "") + "</p>")
    rows = [(t["name"], t["dtype"], _shape(t["shape"]), t["state"],
             "-" if t.get("max_ulps") is None else f"{t['max_ulps']:.3g}", t.get("reason", ""))
            for t in folds.get("tensors", []) if t["state"] != "bitwise"]
    return head + (table(["tensor", "dtype", "shape", "state", "max ulps", "why"], rows,
                         {4}, "folds", sentences=frozenset({5})) if rows else "")


def _rewrites(rewrites: dict[str, Any] | None) -> str:
    """The rewrite validation: a count per state, then every rewrite not validated bitwise
    or within its slack, or validated at fewer input sets than the others."""
    if rewrites is None:
        return '<p class="muted">rewrites not validated (only optimize --check records ' \
               "them)</p>"
    counts: dict[str, int] = rewrites.get("counts", {})
    states = ", ".join(f"{n} {state}" for state, n in counts.items())
    head = (f'<h3>Rewrite validation</h3><p class="{"ok" if rewrites.get("ok") else "bad"}">'
            f'{len(rewrites.get("rewrites", []))} rewrites, each replaced window run against '
            f'its replacement on {esc(rewrites.get("sets"))} input sets: {esc(states)}</p>')
    rows = [(r.get("rule", ""), r.get("node", ""), r.get("state", ""), r.get("reason", ""))
            if not r.get("unrun") else
            (r.get("rule", ""), r.get("node", ""), f"{r.get('state')} at fewer input sets",
             f"not run at input set {', '.join(map(str, r['unrun']))}: the machine ran short")
            for r in rewrites.get("rewrites", [])
            if r.get("state") not in ("bitwise", "within") or r.get("unrun")]
    return head + (table(["rule", "node", "state", "why"], rows, set(), "rewrites",
                         sentences=frozenset({3})) if rows else "")
