"""The export matrix through ``optimize --check 3``: every export of
``tests/support/export_matrix.py`` (transformers models from configs, random weights, both of
torch's exporters, quantized and float16 ones) is built into its cache (exported now unless a
file of the same key is there) and folded by ``python -m onnxfold optimize X.onnx -o OUT
--check 3`` with the defaults (no ``--dim``, no ``--int-range``) in a child process.

One row per export: the exit code, the child's wall seconds, nodes before and after (all,
subgraphs included), the fold verification's counts (bitwise / within / sampled / not
verifiable / differ / parameters of rewrites) and, on failure, the error line (the last line
of stderr, else the check's failure). Rows of ``KNOWN_CHECK_FAILURES`` say ``known``;
``UNEXPORTABLE`` exports are listed with their error (with ``--only``, those it names).
``--mutations`` also plants the two wrong folds of ``tests/support/planted_folds.py`` in each
folded model and says whether ``onnxfold compare`` catches them (exit 1). ``--stages`` also
compares each fold with its export stage by stage (stages of an eighth of its weights:
``export_matrix.staged_compare``), as ``tests/exports/test_staged_check_matrix.py`` does
on one export of each family: the verdict must be the whole check's.
``--held-out`` runs the held-out exports instead (``tests/support/held_out_exports.py``),
``--fresh`` the fresh ones (``tests/support/fresh_exports.py``: a second control set of
families neither the matrix nor the held-out set has; ``FRESH_UNEXPORTABLE`` listed).

    python -m tools.check_matrix [--only NAME ...] [--held-out | --fresh] [--json FILE]
                                 [--mutations] [--stages] [--cache DIR]

Exit 1 when an export fails to build, a check fails that is not a known failure, a fold
verification reports ``differ``, or a planted fold is not caught; 2 on bad arguments. Needs
torch, transformers and onnxscript (``pip install .[exports]``).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

TIMEOUT = 600  # seconds, one optimize child
# every state the fold verification line counts (onnxfold/check/folds/verdicts.py's summary),
# by the words it counts them with
STATES = {"bitwise": "bitwise", "within": "within", "sampled": "sampled",
          "not verifiable": "not verifiable", "differ": "differ",
          "more are parameters of rewrites": "parameter"}
_COUNTS = re.compile(r"(\d+) (" + "|".join(map(re.escape, STATES)) + ")")


@dataclass
class Row:
    name: str
    exporter: str
    code: int | None = None  # optimize's exit code; None: the export failed
    seconds: float = 0.0
    nodes_before: int | None = None
    nodes_after: int | None = None
    folds: dict[str, int] = field(default_factory=dict)  # bitwise, within, ... -> count
    verification: str = ""  # the fold verification line of optimize's output
    error: str = ""
    known: bool = False  # in KNOWN_CHECK_FAILURES and failing with its line
    mutations: dict[str, str] = field(default_factory=dict)  # kind -> caught / MISSED / skip
    stages: str = ""  # --stages: "same verdict", or what differed

    @property
    def bad(self) -> bool:
        missed = any(v.startswith("MISSED") or (v.startswith("not run") and not self.known)
                     for v in self.mutations.values())
        return (self.code is None or (self.code != 0 and not self.known)
                or self.folds.get("differ", 0) > 0 or missed
                or (self.stages != "" and self.stages != "same verdict"))


def verification_counts(stdout: str) -> tuple[str, dict[str, int]]:
    """The "fold verification: ..." line of optimize's output and its counts."""
    line = next((ln.strip() for ln in stdout.splitlines()
                 if ln.startswith("fold verification:")), "")
    counts = dict.fromkeys(STATES.values(), 0)
    for n, words in _COUNTS.findall(line.split(":", 1)[-1]):
        counts[STATES[words]] = int(n)
    return line, counts


def error_line(stdout: str, stderr: str) -> str:
    """The line that says why the check failed: stderr's last, else the last stdout line
    that names a failure."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    if lines:
        return lines[-1]
    failing = [ln.strip() for ln in stdout.splitlines()
               if re.search(r"outside tolerance|could not|failed|DIFFERS", ln)]
    return failing[-1] if failing else ""


def run_check(src: Path, out: Path) -> tuple[int, float, str, str]:
    """``python -m onnxfold optimize SRC -o OUT --check 3`` in a child: (exit code, wall
    seconds, stdout, stderr)."""
    cmd = [sys.executable, "-m", "onnxfold", "optimize", str(src), "-o", str(out),
           "--check", "3"]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        return -1, time.perf_counter() - start, str(e.stdout or ""), f"timed out after {TIMEOUT} s"
    return proc.returncode, time.perf_counter() - start, proc.stdout, proc.stderr


def staged_verdict(src: Path, out: Path, passed: bool) -> str:
    """"same verdict" where ``out`` compared with ``src`` in stages passes as the whole check
    did (``passed``), or could not run as it could not; else what differed."""
    from tests.support import export_matrix

    found = export_matrix.staged_compare(src, out)
    if isinstance(found, str):
        return "same verdict" if not passed else f"in stages could not run: {found[:160]}"
    if found.ok == passed and (not passed or "compared stage by stage" in found.windows):
        return "same verdict"
    return f"in stages {'passed' if found.ok else 'failed'}: {', '.join(found.failing)[:160]}"


def check_one(name: str, cache: Path, work: Path, mutations: bool,
              stages: bool = False) -> Row:
    from tests.support import export_matrix, planted_folds
    from tools.wild_corpus import _load_counts

    entry = export_matrix.ENTRIES[name]
    row = Row(name, entry.exporter)
    try:
        src = export_matrix.build(name, cache)
    except Exception as exc:  # one export that fails must not stop the others
        row.error = f"export failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return row
    out = work / f"{name}.onnx"
    row.code, row.seconds, stdout, stderr = run_check(src, out)
    row.nodes_before = _load_counts(src)[0]
    if out.exists():
        row.nodes_after = _load_counts(out)[0]
    row.verification, row.folds = verification_counts(stdout)
    if row.code != 0:
        row.error = error_line(stdout, stderr)
        known = export_matrix.KNOWN_CHECK_FAILURES.get(name)
        row.known = known is not None and known in stdout + stderr
    if mutations:
        for kind, outcome in planted_folds.try_all(src, work / f"{name}.mut").items():
            row.mutations[kind] = outcome
    if stages and out.exists():
        row.stages = staged_verdict(src, out, row.code == 0)
    return row


def _cell(row: Row) -> list[str]:
    folds = "/".join(str(row.folds.get(k, 0)) for k in STATES.values()) if row.folds else "-"
    code = "-" if row.code is None else str(row.code)
    status = "ok" if not row.bad and row.code == 0 else "known" if row.known else "FAIL"
    nodes = f"{row.nodes_before} -> {row.nodes_after}" if row.nodes_after is not None else (
        f"{row.nodes_before} -> -" if row.nodes_before is not None else "-")
    cells = [row.name, row.exporter, code, status, f"{row.seconds:.1f}", nodes, folds]
    if row.mutations:
        cells.append(", ".join(f"{k}: {v}" for k, v in row.mutations.items()))
    if row.stages:
        cells.append(row.stages)
    cells.append(row.error)
    return cells


def unexportable_of(only: list[str] | None, held_out: bool, fresh: bool) -> dict[str, str]:
    """The exports the run's set cannot export, with why: those ``--only`` names that a list
    holds (whichever set they come from), else the set's whole list (the fresh set's, the
    matrix's; the held-out set has none)."""
    from tests.support import export_matrix

    if only:
        lists = {**export_matrix.UNEXPORTABLE, **export_matrix.FRESH_UNEXPORTABLE}
        return {n: lists[n] for n in only if n in lists}
    return export_matrix.FRESH_UNEXPORTABLE if fresh else {} if held_out else \
        export_matrix.UNEXPORTABLE


def main(argv: list[str] | None = None) -> int:
    from tests.support import export_matrix

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", metavar="NAME",
                    help="only these exports (an UNEXPORTABLE one too: does it export now?)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the rows as JSON")
    control = ap.add_mutually_exclusive_group()
    control.add_argument("--held-out", action="store_true",
                         help="the held-out exports (families and sizes no test was written "
                              "against: tests/support/held_out_exports.py) instead of the "
                              "matrix")
    control.add_argument("--fresh", action="store_true",
                         help="the fresh exports (a second control set of families neither "
                              "the matrix nor the held-out set has: "
                              "tests/support/fresh_exports.py) instead of the matrix")
    ap.add_argument("--mutations", action="store_true",
                    help="also plant wrong folds in each folded model and run compare")
    ap.add_argument("--stages", action="store_true",
                    help="also compare each fold stage by stage (the verdict must be the "
                         "whole check's)")
    ap.add_argument("--cache", type=Path, default=None,
                    help="export cache (default: $ONNXFOLD_MATRIX_CACHE or "
                         "~/.cache/onnxfold-matrix)")
    args = ap.parse_args(argv)
    names = list(args.only or (export_matrix.HELD_OUT if args.held_out else
                               export_matrix.FRESH if args.fresh else export_matrix.MATRIX))
    unexportable = unexportable_of(args.only, args.held_out, args.fresh)
    unknown = [n for n in names if n not in export_matrix.ENTRIES]
    if unknown:  # --only may name an UNEXPORTABLE entry: to see whether it exports now
        print(f"not in the matrix: {', '.join(unknown)}", file=sys.stderr)
        return 2
    cache = (args.cache or export_matrix.default_cache()).expanduser().resolve()
    print(f"{export_matrix.versions()}; cache {cache}", flush=True)
    header = ["export", "exporter", "exit", "status", "s", "nodes", "folds b/w/s/u/d/p"]
    header += ["mutations"] * args.mutations + ["stages"] * args.stages + ["error"]
    print(" | ".join(header), flush=True)
    rows = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="onnxfold-matrix-") as tmp:
        for name in names:
            row = check_one(name, cache, Path(tmp), args.mutations, args.stages)
            rows.append(row)
            print(" | ".join(_cell(row)), flush=True)
    bad = [r.name for r in rows if r.bad]
    known = [r.name for r in rows if r.known]
    print(f"{len(rows)} exports in {time.perf_counter() - start:.0f} s: "
          f"{sum(r.code == 0 for r in rows)} passed, {len(known)} known failures, "
          f"{len(bad)} bad{': ' + ', '.join(bad) if bad else ''}")
    for name, reason in unexportable.items():
        print(f"unexportable: {name}: {reason}")
    if args.json:
        args.json.write_text(json.dumps({"versions": export_matrix.versions(),
                                         "rows": [asdict(r) for r in rows],
                                         "unexportable": unexportable}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
