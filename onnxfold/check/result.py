"""What a comparison of two models found (:class:`CompareResult`: truthy when every output is
within tolerance, its table, its entry in the report), made of the three jobs' findings: how
far each output is apart (``outputs/differences.py``), the folds' verification and the
rewrites' validation. Running the models is ``compare.py``'s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from onnxfold.check.folds.verdicts import NOT_FULL, FoldVerification
from onnxfold.check.inputs.feeds import InputInfo, shape_text
from onnxfold.check.judging.tolerance import SUMMED_UNITS
from onnxfold.check.judging.tolerance import for_dtype as tolerance_for
from onnxfold.check.judging.verdicts import AGREES
from onnxfold.check.outputs.differences import OutputDiff
from onnxfold.check.rewrites.validation import RewriteValidation
from onnxfold.check.running.levels import DEFAULT_LEVEL
from onnxfold.host.terminal import families, printable, wrapped


@dataclass(kw_only=True)
class CompareResult:
    """Per-output differences; truthy when every output is within tolerance."""

    model_a: str
    model_b: str
    rows: list[OutputDiff]
    inputs: list[InputInfo]
    n: int
    seed: int
    rtol: float | None  # None: chosen per output from its dtype (onnxfold.check.judging.tolerance)
    atol: float | None
    dims: dict[str, int] = field(default_factory=dict)  # the first binding of the named dims
    defaulted_dims: list[str] = field(default_factory=list)  # guessed: not given, not derived
    bindings: list[dict[str, int]] = field(default_factory=list)  # input set k uses k % len
    derived_dims: dict[str, str] = field(default_factory=dict)  # dim -> its relation
    notes: list[str] = field(default_factory=list)  # e.g. a binding the reference cannot run
    level: str = DEFAULT_LEVEL  # onnxruntime's graph optimization level both models ran at
    folds: FoldVerification | None = None  # every folded tensor re-derived from A (None: not run)
    failure: str = ""  # model B failed to load or run where model A ran (the check fails)
    rewrites: RewriteValidation | None = None  # every rewrite validated (None: none recorded)
    single_dims: list[str] = field(default_factory=list)  # guessed dims that took one value
    # input sets (1-based) B ran out of memory on where A ran: not compared there
    short_of_memory: list[int] = field(default_factory=list)
    # initializers the original lets a caller override that the second model fixed
    fixed_defaults: list[str] = field(default_factory=list)
    # why the comparison could not run to its end (the machine ran short; "" if it did): what
    # it shows is what was shown before, nothing about the outputs
    not_run: str = ""
    short_reason: str = ""  # what the machine last ran short of running the second model
    # how both models ran stage by stage ("": each in one session); its public name is older
    windows: str = ""
    # the values both chains handed on at their cuts, compared as outputs are (where their
    # shapes and dtypes agree); they show where the chains part, the outputs decide
    cut_rows: list[OutputDiff] = field(default_factory=list)
    # where only outputs failed: the failing outputs on which the original differs as much
    # from itself at another optimization level ("" where it does not, or was not measured;
    # ``check.outputs.stability``)
    unstable: str = ""

    @property
    def ok(self) -> bool:
        return not self.failure and not self.not_run and all(row.ok for row in self.rows) and (
            self.folds is None or self.folds.ok) and (self.rewrites is None or self.rewrites.ok)

    @property
    def state(self) -> str:
        """``passed``, ``failed`` (something differs) or ``could not run`` (nothing differs,
        and the machine stopped the comparison before it ended)."""
        if self.ok:
            return "passed"
        return "could not run" if self.not_run and not self.failing else "failed"

    def __bool__(self) -> bool:
        return self.ok

    @property
    def failing(self) -> list[str]:
        folds = self.folds.failing if self.folds is not None else []
        return ([f"{self.model_b} (fails where {self.model_a} runs)"] if self.failure else []) \
            + [row.name for row in self.rows if not row.ok] \
            + [f"folded tensor {name}" for name in folds] \
            + (self.rewrites.failing if self.rewrites is not None else [])

    def __repr__(self) -> str:
        return (f"CompareResult({self.state}: {self.model_a} vs {self.model_b}, "
                f"{len(self.rows)} outputs, {self.n} input set{'s' if self.n != 1 else ''})")

    def to_dict(self) -> dict[str, Any]:
        """The comparison as ``compare --json`` and ``optimize --json``'s ``check`` write it
        (one form: ``report.schema.json``'s ``check``): its state and verdict, its settings,
        one entry per output (max abs/rel error; ``max_ulps`` where the comparison measures
        it, else null), the fold verification and the rewrite validation."""
        return {
            "ok": self.ok, "state": self.state,
            **({"reason": self.not_run} if self.not_run else {}),
            "failure": self.failure or None, "failing": self.failing,
            "model_a": self.model_a, "model_b": self.model_b,
            "n": self.n, "seed": self.seed, "rtol": self.rtol, "atol": self.atol,
            "dims": dict(self.dims), "level": self.level,
            "inputs": [asdict(info) for info in self.inputs],
            "folds": self.folds.to_dict() if self.folds is not None else None,
            "rewrites": self.rewrites.to_dict() if self.rewrites is not None else None,
            "defaulted_dims": list(self.defaulted_dims), "derived_dims": dict(self.derived_dims),
            "single_dims": list(self.single_dims), "fixed_defaults": list(self.fixed_defaults),
            "short_of_memory": list(self.short_of_memory),
            "bindings": [dict(b) for b in self.bindings], "notes": list(self.notes),
            "windows": self.windows or None,
            "cuts": [_row_dict(row) for row in self.cut_rows],
            "verdict": self.verdict(),
            "outputs": [_row_dict(row) for row in self.rows],
        }

    def summary(self, verdict: bool = True) -> str:
        """What was compared, the tables, the folds' and rewrites' lines, and the verdict
        last (left out with ``verdict=False``: the command line says a failure on stderr, in
        one line, and printed it twice)."""
        seeds = f"seed {self.seed}" if self.n == 1 else \
            f"seeds {self.seed}..{self.seed + self.n - 1}"
        tolerance = "tolerance by dtype" if self.rtol is None and self.atol is None else \
            tolerance_for(np.dtype(np.float32), self.rtol, self.atol).describe()
        lines = [f"compared {self.model_a} vs {self.model_b}: {self.n} input set"
                 f"{'s' if self.n != 1 else ''} ({seeds}), {tolerance}, onnxruntime "
                 f"optimization level {self.level}"]
        used = min(self.n, len(self.bindings)) or 1  # bindings the compared sets use
        said = [f"{info.dtype}"
                f"{' / '.join(shape_text(s) for s in (info.shapes or [info.shape])[:used])} "
                f"{info.source}" for info in self.inputs]
        notes = [f"input {name}: {text}" for name, text, _ in
                 families([(info.name, text) for info, text in zip(self.inputs, said)])]
        dims = ["{" + ", ".join(f"{k}={v}" for k, v in b.items()) + "}" for b in self.bindings]
        if used > 1:
            notes.append(f"input sets alternate the dims {' and '.join(dims[:used])}")
        elif len(dims) > 1:
            notes.append(f"the input set is at the dims {dims[0]}")
        if len(dims) > used:
            notes.append(f"the original also ran at the dims {' and '.join(dims[used:])} "
                         "(folds are re-derived at every binding it ran; outputs are compared "
                         f"on the input set{'s' if used > 1 else ''} above)")
        if self.derived_dims:
            notes.append("dims related by the graph: " + "; ".join(
                f"{k} = {v}" for k, v in self.derived_dims.items()))
        if self.defaulted_dims:
            guessed = [d + "=" + "/".join(dict.fromkeys(str(b[d]) for b in self.bindings))
                       if self.bindings and d in self.bindings[0] else d
                       for d in self.defaulted_dims]
            notes.append(f"dims guessed (--dim NAME=VALUE sets one): {', '.join(guessed)}")
        notes += self.notes
        if self.windows:
            notes.append(self.windows)
        # the notes are lists (inputs, dims, failed guesses): each wraps, its next lines
        # indented four more; the records below (a table, the folds' and rewrites' lines, the
        # verdict a script reads last) stay whole
        lines += [line for note in notes for line in wrapped("  ", note, indent=6)]
        lines += _table("output", _grouped(self.rows))
        lines += [f"  {printable(row.name)}: {row.summed} element{'s' if row.summed != 1 else ''}"
                  f" beyond rtol/atol, within {SUMMED_UNITS:g}u of the magnitude of the terms "
                  "summed to make them (they cancel)" for row in self.rows if row.summed]
        if self.cut_rows:
            lines.append(self._cuts_line())
            wrong = [row for row in self.cut_rows if not row.ok]
            if wrong:
                lines += _table("value at a cut", wrong)
        if self.failure:
            lines.append(f"  FAILED: {self.failure} (the original runs the same inputs)")
        if self.folds is not None:
            lines.append(self.folds.summary())
        if self.rewrites is not None:
            lines.append(self.rewrites.summary())
        if verdict:
            lines.append(self.verdict())
        return "\n".join(lines)

    def _cuts_line(self) -> str:
        """How the values handed on at the cuts compared (a table follows of those that do
        not; ``--json`` has each). They show where two chains part; the outputs decide (a
        rewrite may hold another form of a value under its name)."""
        rows = self.cut_rows
        wrong = sum(not row.ok for row in rows)
        bitwise = sum(row.bitwise_equal for row in rows)
        cuts = len({row.name.rsplit(" (cut ", 1)[-1] for row in rows})
        state = f"{wrong} outside tolerance (the outputs decide: a rewrite may hold another " \
            "form of a value under its name)" if wrong else "all within tolerance"
        return (f"values at the cuts: {len(rows)} at {cuts} cuts compared, {state} "
                f"({bitwise} bitwise)")

    def verdict(self) -> str:
        """The last line: what passed, and what was not shown for every input."""
        if self.state == "could not run":
            return f"could not run: {self.not_run}; nothing differs in what ran" + \
                self._shown_before()
        if not self.ok:  # a family of outputs as one (a decoder's 64 caches)
            return "outside tolerance: " + ", ".join(
                name for name, _, _ in families([(name, "") for name in self.failing]))
        ran = self.n - len(self.short_of_memory)
        sets = f"{ran} input set{'s' if ran != 1 else ''}" + (
            f" of {self.n} (the optimized model ran out of memory on input set "
            f"{', '.join(map(str, self.short_of_memory))}, where the original ran: it may need "
            "more memory)" if self.short_of_memory else "")
        parts = [f"all outputs within tolerance on {sets}"]
        complete = not self.short_of_memory
        folds, rewrites = self.folds, self.rewrites
        if folds is None:
            parts.append("folds not verified")
            complete = False
        else:
            parts.append(folds.verdict(rewrites is not None and rewrites.all_validated))
            complete &= folds.complete
        if self.single_dims:
            parts.append(f"dims {', '.join(self.single_dims)} took one value only")
            complete = False
        if self.fixed_defaults:
            parts.append(f"{', '.join(self.fixed_defaults)} (overridable in the original) "
                         "fixed by the second model: compared at the default only")
            complete = False
        if rewrites is None:
            parts.append("rewrites not validated")
            complete = False
        else:
            complete &= rewrites.all_validated
            parts.append(rewrites.counted())
        return "; ".join(parts) + ("" if complete else NOT_FULL)


    def _shown_before(self) -> str:
        """What a comparison that could not run had shown of the folds and rewrites."""
        shown = []
        if self.folds is not None:
            shown.append(self.folds.verdict(self.rewrites is not None and
                                            self.rewrites.all_validated))
        if self.rewrites is not None:
            shown.append(f"{sum(map(self.rewrites.count, AGREES))} rewrites validated on the "
                         "input sets")
        return f" ({'; '.join(shown)})" if shown else ""


def _row_dict(row: OutputDiff) -> dict[str, Any]:
    """One compared value as ``--json`` writes it (``max_ulps``: null where not measured)."""
    return {"name": row.name, "dtype": row.dtype_a, "shape": list(row.shape_a),
            "dtype_b": row.dtype_b, "shape_b": list(row.shape_b), "elements": row.elements,
            "max_abs": row.max_abs_diff, "max_rel": row.max_rel_diff, "max_ulps": row.max_ulps,
            "tolerance": row.tolerance, "mismatches": row.mismatches, "summed": row.summed,
            "bitwise_equal": row.bitwise_equal, "ok": row.ok}


def _grouped(rows: list[OutputDiff]) -> list[OutputDiff]:
    """``rows`` with outputs whose names differ only in their numbers, of one dtype, shape,
    tolerance and verdict, as one row (``present.{0..31}.key (32)``: a decoder's cache is
    not a screen of identical rows): the largest differences, the mismatches summed, bitwise
    where all are. ``--json`` keeps every output."""
    def key(row: OutputDiff) -> tuple:
        return (row.dtype_a, row.dtype_b, str(row.shape_a), str(row.shape_b), row.tolerance,
                row.ok, row.bitwise_equal, row.shapes_equal, row.dtypes_equal)

    out = []
    for name, _, members in families([(row.name, key(row)) for row in rows]):
        if len(members) == 1:
            out.append(rows[members[0]])
            continue
        group = [rows[i] for i in members]
        ulps = [row.max_ulps for row in group if row.max_ulps is not None]
        out.append(dataclasses.replace(
            group[0], name=name, elements=sum(row.elements for row in group),
            max_abs_diff=max(row.max_abs_diff for row in group),
            max_rel_diff=max(row.max_rel_diff for row in group),
            max_ulps=max(ulps) if ulps else None,
            mismatches=sum(row.mismatches for row in group),
            summed=sum(row.summed for row in group)))
    return out


def _table(heading: str, rows: list[OutputDiff]) -> list[str]:
    """``rows`` as the summary's table, its first column headed ``heading``."""
    table = [[heading, "dtype", "shape", "max abs", "max rel", "max ulps", "mismatches",
              "bitwise", "tolerance", "ok"]]
    for r in rows:
        dtype = r.dtype_a if r.dtypes_equal else f"{r.dtype_a}/{r.dtype_b}"
        shape = shape_text(r.shape_a) if r.shapes_equal else \
            f"{shape_text(r.shape_a)}/{shape_text(r.shape_b)}"
        ulps = "-" if r.max_ulps is None else f"{r.max_ulps:.3g}"
        table.append([printable(r.name), dtype, shape, f"{r.max_abs_diff:.3g}",
                      f"{r.max_rel_diff:.3g}", ulps, f"{r.mismatches}/{r.elements}",
                      "yes" if r.bitwise_equal else "no", r.tolerance,
                      "yes" if r.ok else "NO"])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
