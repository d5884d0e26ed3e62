"""What ``--check 3`` costs on top of the fold (issue 54's targets: at most 3x the fold's wall,
and a peak no higher than the larger model's onnxruntime session plus the fold's own peak).

For each model, ``--repeat`` interleaved rounds of four child processes, one at a time:

=============  ==========================================================================
``python``     ``import onnxfold, onnxruntime``: the interpreter's own floor, counted once
``fold``       ``python -m onnxfold optimize IN -o OUT -q``
``check``      ``python -m onnxfold optimize IN -o OUT -q --check 3``
``session``    onnxruntime alone: the original's ``InferenceSession`` (default options) run
               once on the export's example inputs: what running the model costs
``sessions``   onnxruntime alone, the floor of any check that runs both models: a session
               over the original and one over the fold's output, each run once on the first
               input set the check ran (its shapes read off one ``--check 3 --json`` run
               before the rounds; integer inputs the example's values wrapped to them, floats
               random): the floor as the decision of 2026-11-28 (DESIGN.md) defines it
``example``    the same two sessions on the export's example inputs (the floor this bench
               used before the decision: an image model's example is smaller than the set
               the check runs first)
=============  ==========================================================================

Wall seconds are medians over the rounds, peak RSS the largest ``ru_maxrss`` (whole child
processes). The memory target counts the interpreter once: ``check`` peak <= ``session`` peak
+ ``fold`` peak - ``python`` peak. Beside the target, the check's own time (``check`` -
``fold``) against what onnxruntime alone takes to create and run both models' sessions
(``sessions`` - ``python``): how far the check is above that floor. The table is written
into ``bench/README.md`` between its ``check_cost`` markers.

In stages (``--windowed``, default ``slice8``: ``bench/llm_model.py``'s 8 first layers of a
7B-shaped decoder, 2.64 GiB of weights, built once into ``bench.llm``'s cache), the check is
``--check 1`` in a memory cgroup of :data:`WINDOWED` GiB, where a session over the whole model
does not fit and the check compares the models stage by stage; ``fold`` runs in the same
cgroup, and ``sessions`` (the floor: both sessions, each run once on the first input set the
check ran) outside it. The 7B decoder itself is not measured here: its original's session
needs about 24 GB (the floor could not be measured on a machine of 23.5 GiB), and its input and
output files 23.8 GB of disk.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.llm import DEFAULT_CACHE, build, memory_cgroup, remove_output, run_in
from bench.machine import dated
from bench.model_bench import arguments, built
from bench.model_bench import command as bench_command
from bench.process import ChildRun, median, run_child
from bench.readme import replace_section

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("bert_base_ts", "resnet50_ts_folded", "constants_96m")
WALL_TARGET = 3.0
WINDOWED = {"slice8": 2}  # a model checked in stages, and its memory cgroup (GiB)
WINDOWED_TARGET = 1.5  # its check's own time against the floor (issue 84)

_SESSION = """
import sys, numpy as np, onnxruntime as ort
feeds = dict(np.load(sys.argv[2]))
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
names = {i.name for i in session.get_inputs()}
session.run(None, {k: v for k, v in feeds.items() if k in names})
"""
_SESSIONS = """
import sys, numpy as np, onnxruntime as ort
feeds = dict(np.load(sys.argv[1]))
for path in sys.argv[2:]:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    session.run(None, {k: v for k, v in feeds.items() if k in names})
"""


def first_set(model: Path, work: Path, timeout: float, sets: int = 3,
              procs: str | None = None) -> Path:
    """The first input set ``--check SETS`` runs on ``model`` (in the cgroup of ``procs``
    where given), as an ``.npz`` for the floor's sessions: each input at the shape the
    check's JSON gives it; an integer input the example's values (where the export has
    some) wrapped to that shape (ids the table holds, a mask of ones), a float one random,
    a missing one zeros (timing depends on the shapes, not on the values)."""
    report = work / f"{model.stem}.check.json"
    run = run_in(_optimize(model, work, "--check", str(sets), "--json", str(report)),
                 work / f"{model.stem}.first", timeout, procs)
    if run.rc != 0:
        raise RuntimeError(f"{model.stem} check: {run.error_line}")
    examples = model.with_suffix(".inputs.npz")
    example = dict(np.load(examples)) if examples.exists() else {}
    rng = np.random.default_rng(0)
    feeds = {}
    for spec in json.loads(report.read_text())["check"]["inputs"]:
        dtype, shape = np.dtype(spec["dtype"]), spec["shape"]
        given = example.get(spec["name"])
        if np.issubdtype(dtype, np.floating):
            feeds[spec["name"]] = rng.standard_normal(shape).astype(dtype)
        elif given is not None and given.size:
            feeds[spec["name"]] = np.resize(given, shape).astype(dtype)
        else:
            feeds[spec["name"]] = np.zeros(shape, dtype)
    path = work / f"{model.stem}.first.npz"
    np.savez(path, **feeds)
    return path


def _optimize(model: Path, work: Path, *more: str) -> list[str]:
    """``onnxfold optimize MODEL -o WORK/STEM.out.onnx -q MORE``."""
    return [sys.executable, "-m", "onnxfold", "optimize", str(model), "-o",
            str(work / f"{model.stem}.out.onnx"), "-q", *more]


def _round(model: Path, feeds: Path, work: Path, timeout: float) -> dict[str, ChildRun]:
    py = sys.executable
    out = work / f"{model.stem}.out.onnx"
    commands = {
        "python": [py, "-c", "import onnxfold, onnxruntime"],
        "fold": _optimize(model, work),
        "check": _optimize(model, work, "--check", "3"),
        "session": [py, "-c", _SESSION, str(model), str(model.with_suffix(".inputs.npz"))],
        "sessions": [py, "-c", _SESSIONS, str(feeds), str(model), str(out)],
        "example": [py, "-c", _SESSIONS, str(model.with_suffix(".inputs.npz")),
                    str(model), str(out)]}
    runs = {}
    for tool, command in commands.items():
        runs[tool] = run_child(command, work / f"{model.stem}.{tool}", timeout, cwd=ROOT)
        if runs[tool].rc != 0:
            raise RuntimeError(f"{model.stem} {tool}: {runs[tool].error_line}")
    return runs


def measure(name: str, work: Path, repeat: int, timeout: float) -> dict[str, float]:
    model = built(name, work, timeout)
    feeds = first_set(model, work, timeout)
    rounds = [_round(model, feeds, work, timeout) for _ in range(repeat)]
    found = {f"{tool}_wall": median([r[tool].wall_s for r in rounds])
             for tool in ("python", "fold", "check", "session", "sessions", "example")}
    found.update({f"{tool}_peak": max(r[tool].maxrss_mib for r in rounds)
                  for tool in ("python", "fold", "check", "session")})
    found["wall_ratio"] = found["check_wall"] / found["fold_wall"]
    found["floor_ratio"] = (found["check_wall"] - found["fold_wall"]) / \
        (found["sessions_wall"] - found["python_wall"])
    found["example_ratio"] = (found["check_wall"] - found["fold_wall"]) / \
        (found["example_wall"] - found["python_wall"])
    found["peak_budget"] = found["session_peak"] + found["fold_peak"] - found["python_peak"]
    return found


@dataclass(frozen=True)
class Staged:
    """A model checked in stages: medians of the rounds (seconds), whether they ran in the
    cgroup and in stages, the check's largest peak RSS (MiB)."""

    python: float
    fold: float
    check: float
    sessions: float
    limited: bool
    stages: bool
    check_peak: float

    @property
    def own(self) -> float:
        return self.check - self.fold

    @property
    def floor(self) -> float:
        return self.sessions - self.python

    @property
    def ratio(self) -> float:
        return self.own / self.floor


def measure_windowed(name: str, work: Path, repeat: int, timeout: float) -> Staged:
    """``name`` (bench/llm.py's) checked in stages: ``repeat`` interleaved rounds of the
    interpreter's start, the fold and ``--check 1`` in a cgroup of :data:`WINDOWED` GiB, and
    the floor's two sessions outside it."""
    model = build(name, DEFAULT_CACHE, timeout)
    py = sys.executable
    out = work / f"{model.stem}.out.onnx"
    runs: dict[str, list[ChildRun]] = {}
    try:
        with memory_cgroup(WINDOWED[name] << 30) as procs:
            feeds = first_set(model, work, timeout, 1, procs)
            for _ in range(repeat):
                for tool, command, limited in (
                        ("python", [py, "-c", "import onnxfold, onnxruntime"], False),
                        ("fold", _optimize(model, work), True),
                        ("check", _optimize(model, work, "--check", "1"), True),
                        ("sessions", [py, "-c", _SESSIONS, str(feeds), str(model), str(out)],
                         False)):
                    run = run_in(command, work / f"{name}.{tool}", timeout,
                                 procs if limited else None)
                    if run.rc != 0:
                        raise RuntimeError(f"{name} {tool}: {run.error_line}")
                    runs.setdefault(tool, []).append(run)
    finally:
        remove_output(out)
    report = json.loads((work / f"{name}.check.json").read_text())
    walls = {tool: median([r.wall_s for r in done]) for tool, done in runs.items()}
    return Staged(walls["python"], walls["fold"], walls["check"], walls["sessions"],
                  procs is not None, bool(report["check"].get("windows")),
                  max(r.maxrss_mib for r in runs["check"]))


def windowed_table(results: dict[str, Staged]) -> str:
    rows = ["| model | memory cgroup | fold | --check 1 | check's own | both sessions "
            "(no limit) | own / sessions | check's peak RSS |", "|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        cgroup = f"{WINDOWED[name]} GiB" if r.limited else "none could be made"
        stages = "" if r.stages else " (**not in stages**)"
        rows.append(
            f"| {name} | {cgroup} | {r.fold:.1f} s | {r.check:.1f} s{stages} | {r.own:.1f} s | "
            f"{r.floor:.1f} s | {r.ratio:.2f}x{' **over**' if r.ratio > WINDOWED_TARGET else ''}"
            f" | {r.check_peak:,.0f} MiB |")
    return "\n".join(rows)


def table(results: dict[str, dict[str, float]]) -> str:
    rows = ["| model | fold | --check 3 | check / fold | both sessions | check's own / "
            "sessions | at the example | peak: fold, session, check | check's peak / budget |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        rows.append(
            f"| {name} | {r['fold_wall']:.1f} s | {r['check_wall']:.1f} s | "
            f"{r['wall_ratio']:.2f}x{' **over**' if r['wall_ratio'] > WALL_TARGET else ''} | "
            f"{_floor(r)} | {r['floor_ratio']:.2f}x | "
            f"{r['example_wall'] - r['python_wall']:.1f} s: {r['example_ratio']:.2f}x | "
            f"{r['fold_peak']:.0f}, {r['session_peak']:.0f}, {r['check_peak']:.0f} MiB | "
            f"{r['check_peak']:.0f} / {r['peak_budget']:.0f} MiB"
            f"{' **over**' if r['check_peak'] > r['peak_budget'] else ''} |")
    return "\n".join(rows)


def _floor(r: dict[str, float]) -> str:
    """Both sessions' time, the interpreter's start left out, and that against the fold."""
    floor = r["sessions_wall"] - r["python_wall"]
    return f"{floor:.1f} s = {floor / r['fold_wall']:.2f}x the fold"


def main(argv: list[str] | None = None) -> int:
    a = arguments("check_cost", __doc__, MODELS, argv, windowed=tuple(WINDOWED))
    results = {name: measure(name, a.work, a.repeat, a.timeout) for name in a.models}
    staged = {name: measure_windowed(name, a.work, a.repeat, a.timeout)
              for name in a.windowed}
    command = bench_command("check_cost", a.repeat)
    text = dated(command, ("onnxfold", "onnx", "onnxruntime"))
    if results:
        text += ("\n\n" + table(results) + f"\n\nWall: medians of {a.repeat} interleaved "
                 f"rounds (target: check / fold at most {WALL_TARGET:g}x). Peak RSS: the "
                 "largest of the rounds; the budget is the session's peak plus the fold's, the "
                 "interpreter counted once. Both sessions: onnxruntime alone creating a "
                 "session over the original and one over the output and running each once on "
                 "the check's first input set, less the interpreter's start (`import "
                 "onnxfold, onnxruntime`); at the example: the same on the export's example "
                 "inputs (the floor before the decision of 2026-11-28); check's own: --check 3 "
                 "less the fold.")
    if staged:
        text += ("\n\nIn stages (`--check 1` where a session over the whole model does not "
                 f"fit; target: the check's own time at most {WINDOWED_TARGET:g}x the floor):"
                 "\n\n" + windowed_table(staged) + "\n\nThe fold and the check in the "
                 "memory cgroup, the floor's two sessions outside it (they need about 8 GiB); "
                 "check's own: --check 1 less the fold there. The 7B decoder is not measured: "
                 "its original's session needs about 24 GB (more than this machine has), its "
                 "files 23.8 GB of disk.")
    print(text)
    if not a.no_readme:
        replace_section(ROOT / "bench" / "README.md", "check_cost", text)
    over = [r for r in results.values() if r["wall_ratio"] > WALL_TARGET
            or r["check_peak"] > r["peak_budget"]]
    late = [r for r in staged.values() if r.ratio > WINDOWED_TARGET or not r.stages]
    return 1 if over or late else 0
