"""The mutation tier: does ``optimize --check`` catch every bug a fold or rewrite could have?

For every export of the matrix (``tests/support/export_matrix.py``; ``--held-out``: the
families no rule or test was written against; ``--fresh``: the second such set,
``tests/support/fresh_exports.py``) and every mutant of ``tools/mutants.py`` (the rules' and
the machinery's: ``--machinery``, the fold's runner, pool, materialization and writer only):

1. the export is folded clean, without and with ``--check 3`` (the clean check must pass: a
   failure there is a false alarm);
2. it is folded with the mutant planted (``python -m tools.mutants NAME optimize ...``); a
   model byte-identical to the clean one means the mutant did not fire here (``inert``; a
   mutant fold that onnxruntime refuses to load exits 3 without writing: it fired);
3. otherwise ``optimize --check 3`` runs with the mutant planted, as a user's run with that
   bug would: exit 1 naming a tensor, a rewrite or an output is ``caught``;
4. a mutant that passes the check is compared with the clean fold on ``ORACLE_SETS`` input
   sets, every output bit for bit: if none differs, the mutant is ``equivalent`` here (it
   changed the file, not what it computes); if one does, the check MISSED a bug that changes
   what the model computes (a defect of the check), unless the mutant changed nothing but
   folded tensors that the check judges within a tolerance (their cones hold ops that are
   not bitwise: a weight standardized by a training-mode BatchNormalization, whose
   onnxruntime kernel itself gives other bits at another alignment), each within the budget
   of such a fold of the clean one's value (``docs/exactness.md``: 4 ulps of each element plus
   2 of the tensor's largest). That is ``rounding``: a fault as large as the rounding such a
   fold is allowed, which no check can tell from it (an export whose folds are all of that
   kind has no bitwise fold to catch a 4-ulp fault with).

    python -m tools.mutation_tier [--only NAME ...] [--mutants NAME ... | --machinery]
                                  [--held-out | --fresh] [--json FILE] [--cache DIR]

Prints one row per export and a summary per family; exit 1 when a mutant was missed or a clean
check failed, 2 on bad arguments. Needs ``pip install .[exports]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools.mutants import MACHINERY, MUTANTS

TIMEOUT = 900  # seconds, one child
ORACLE_SETS = 12
_NAMED = ("DIFFERS", "outside tolerance:", "fails where")


@dataclass
class Row:
    name: str
    what: str
    exporter: str
    clean: str = ""  # "passed", or why the clean check failed (a false alarm)
    outcomes: dict[str, str] = field(default_factory=dict)  # mutant -> outcome
    details: dict[str, str] = field(default_factory=dict)  # mutant -> the line that named it
    seconds: float = 0.0

    @property
    def bad(self) -> bool:
        return self.clean != "passed" or any(o.startswith(("MISSED", "error"))
                                             for o in self.outcomes.values())


def _run(args: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                              timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(args, -1, str(e.stdout or ""),
                                           f"timed out after {TIMEOUT} s")


def _named(stdout: str) -> str:
    """The first line of a failed check that names what differs."""
    return next((line.strip() for line in stdout.splitlines()
                 if any(key in line for key in _NAMED)), "")


def _same_outputs(clean: Path, mutant: Path) -> str | None:
    """None when both models compute bit for bit the same outputs on ORACLE_SETS input sets
    (every binding of the dims the check uses), else which output differs."""
    import onnxfold

    try:
        result = onnxfold.compare(str(clean), str(mutant), n=ORACLE_SETS, rtol=0.0, atol=0.0,
                                  verify=False)
    except Exception as exc:  # the mutant does not even run where the clean fold does
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    differing = [row.name for row in result.rows if not row.bitwise_equal]
    if result.failure:
        return result.failure
    return ", ".join(differing) if differing else None


def mutate_one(name: str, mutants: list[str], cache: Path, work: Path) -> Row:
    """Every mutant on export ``name`` (see module)."""
    from tests.support import export_matrix

    entry = export_matrix.ENTRIES[name]
    row = Row(name, entry.what, entry.exporter)
    start = time.perf_counter()
    try:
        src = export_matrix.build(name, cache)
    except Exception as exc:  # one export that fails must not stop the others
        row.clean = f"export failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        return row
    plain, checked = work / f"{name}.clean.onnx", work / f"{name}.checked.onnx"
    fold = _run(["-m", "onnxfold", "optimize", str(src), "-o", str(plain)])
    check = _run(["-m", "onnxfold", "optimize", str(src), "-o", str(checked), "--check", "3"])
    row.clean = "passed" if fold.returncode == 0 and check.returncode == 0 else \
        f"exit {check.returncode}: {_named(check.stdout) or check.stderr.strip()[-200:]}"
    for mutant in mutants:
        out = work / f"{name}.{mutant}.onnx"
        planted = _run(["-m", "tools.mutants", mutant, "optimize", str(src), "-o", str(out)])
        if planted.returncode == 0 and out.read_bytes() == plain.read_bytes():
            row.outcomes[mutant] = "inert"
            continue
        run = _run(["-m", "tools.mutants", mutant, "optimize", str(src), "-o",
                    str(work / f"{name}.{mutant}.checked.onnx"), "--check", "3"])
        named = _named(run.stdout)
        if run.returncode == 1 and named:
            row.outcomes[mutant], row.details[mutant] = "caught", named
            if mutant in MACHINERY and planted.returncode == 0:
                _by_the_other_checks(row, mutant, src, out)
        elif run.returncode == 0 and planted.returncode != 0:
            row.outcomes[mutant] = "MISSED"  # a fold that cannot even be written passed
            row.details[mutant] = planted.stderr.strip()[-200:]
        elif run.returncode == 0:
            differs = _same_outputs(plain, out)
            rounding = _within_rounding(src, plain, out) if differs is not None else None
            row.outcomes[mutant] = "equivalent" if differs is None else \
                "rounding" if rounding is not None else "MISSED"
            row.details[mutant] = rounding or differs or "no output differs on any input set"
        else:
            row.outcomes[mutant] = f"error: the check exited {run.returncode}"
            row.details[mutant] = (run.stderr.strip() or run.stdout.strip())[-200:]
    row.seconds = time.perf_counter() - start
    return row


def _within_rounding(src: Path, clean: Path, mutant: Path) -> str | None:
    """What the mutant changed, where it changed only folded tensors the check judges within
    a tolerance (``within``: not bitwise ops), each within the budget of such a fold of the
    clean fold's tensor; None otherwise (anything else changed, a tensor held to its bits
    changed, or one moved beyond that budget)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from onnxfold.check.folds.verdicts import ulp_distance
    from onnxfold.check.folds.verification import verify_folds

    a, b = onnx.load(str(clean)), onnx.load(str(mutant))
    tensors_a = {t.name: t for t in a.graph.initializer}
    tensors_b = {t.name: t for t in b.graph.initializer}
    del a.graph.initializer[:], b.graph.initializer[:]
    if a.SerializeToString() != b.SerializeToString() or set(tensors_a) != set(tensors_b):
        return None  # the graph itself changed
    moved = {name: (numpy_helper.to_array(tensors_a[name]), numpy_helper.to_array(t))
             for name, t in tensors_b.items()
             if t.SerializeToString() != tensors_a[name].SerializeToString()}
    if not moved:
        return None
    states = {t.name: t.state for t in verify_folds(str(src), str(clean)).tensors}
    worst = 0.0
    for name, (was, now) in moved.items():
        if states.get(name) != "within" or was.dtype != now.dtype or was.shape != now.shape \
                or was.dtype.kind != "f":
            return None
        same, ulps, within = ulp_distance(now, was, exact=False)
        if not np.all(same | within):
            return None
        worst = max(worst, float(np.nanmax(ulps)) if ulps.size else 0.0)
    return (f"moved {', '.join(sorted(moved))} (judged within a tolerance: not bitwise ops) by "
            f"at most {worst:.3g} ulps, within the budget of a fold that is not bitwise")


def _by_the_other_checks(row: Row, mutant: str, src: Path, out: Path) -> None:
    """A machinery fault caught by ``optimize --check`` must be caught by ``verify-folds`` and
    ``compare`` too, run with the same fault on the model it wrote."""
    for command in ("verify-folds", "compare"):
        run = _run(["-m", "tools.mutants", mutant, command, str(src), str(out)])
        if run.returncode != 1:
            row.outcomes[mutant] = f"MISSED by {command}"
            row.details[mutant] = f"exit {run.returncode}: " + \
                (run.stdout.strip().splitlines() or [run.stderr.strip()])[-1][-200:]
            return


def summary(rows: list[Row], mutants: list[str]) -> list[str]:
    """Per family: mutants caught of those that changed the model, missed, equivalent, inert;
    clean checks failed (false alarms)."""
    families: dict[str, list[Row]] = {}
    for row in rows:
        families.setdefault(row.what, []).append(row)
    lines = ["family | exports | caught / fired | missed | equivalent | rounding | inert | "
             "false alarms / clean runs"]
    for what, group in families.items():
        outcomes = [o for r in group for o in r.outcomes.values()]
        fired = [o for o in outcomes if o != "inert"]
        lines.append(" | ".join([
            what, str(len(group)), f"{outcomes.count('caught')} / {len(fired)}",
            str(sum(o.startswith("MISSED") for o in outcomes)), str(outcomes.count("equivalent")),
            str(outcomes.count("rounding")), str(outcomes.count("inert")),
            f"{sum(r.clean != 'passed' for r in group)} / {len(group)}"]))
    for mutant in mutants:
        got = [r.outcomes.get(mutant, "") for r in rows]
        lines.append(f"mutant {mutant}: caught {got.count('caught')}, missed "
                     f"{sum(g.startswith('MISSED') for g in got)}, equivalent "
                     f"{got.count('equivalent')}, rounding {got.count('rounding')}, inert "
                     f"{got.count('inert')}")
    return lines


def main(argv: list[str] | None = None) -> int:
    from tests.support import export_matrix

    every = {**MUTANTS, **MACHINERY}
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="only these exports")
    ap.add_argument("--mutants", nargs="+", metavar="NAME", choices=sorted(every),
                    help="only these mutants")
    ap.add_argument("--machinery", action="store_true",
                    help="only the faults in the fold's runner, pool, materialization, writer")
    control = ap.add_mutually_exclusive_group()
    control.add_argument("--held-out", action="store_true",
                         help="the held-out exports instead of the matrix")
    control.add_argument("--fresh", action="store_true",
                         help="the fresh exports (tests/support/fresh_exports.py) instead of "
                              "the matrix")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the rows as JSON")
    ap.add_argument("--cache", type=Path, default=None, help="export cache")
    args = ap.parse_args(argv)
    names = list(args.only or (export_matrix.HELD_OUT if args.held_out else
                               export_matrix.FRESH if args.fresh else export_matrix.MATRIX))
    unknown = [n for n in names if n not in export_matrix.ENTRIES]
    if unknown:
        print(f"not in the matrix: {', '.join(unknown)}", file=sys.stderr)
        return 2
    mutants = list(args.mutants or (MACHINERY if args.machinery else every))
    cache = (args.cache or export_matrix.default_cache()).expanduser().resolve()
    print(f"{export_matrix.versions()}; mutants: {', '.join(mutants)}", flush=True)
    rows = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="onnxfold-mutants-") as tmp:
        for name in names:
            row = mutate_one(name, mutants, cache, Path(tmp))
            rows.append(row)
            cells = [f"{m}: {row.outcomes.get(m, '-')}" for m in mutants]
            print(f"{name} ({row.exporter}, {row.seconds:.0f} s): clean {row.clean}; "
                  + ", ".join(cells), flush=True)
            for mutant, detail in row.details.items():
                if row.outcomes[mutant] != "caught":
                    print(f"    {mutant}: {detail}", flush=True)
    print(f"{len(rows)} exports in {time.perf_counter() - start:.0f} s")
    print("\n".join(summary(rows, mutants)))
    if args.json:
        args.json.write_text(json.dumps({"versions": export_matrix.versions(),
                                         "mutants": {m: every[m].what for m in mutants},
                                         "rows": [asdict(r) for r in rows]}, indent=1))
    return 1 if any(r.bad for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
