"""The hostile-path table (issue 55): every entry point that reads or writes a file, command
line and Python API, against the paths a user's machine can hold, each run in this process.

A :class:`Row` is an entry point: the paths it takes by *role* (``in``: a model it reads, with
external data; ``in2``: a second one; ``arrays``: ``--inputs``; ``adapter``; ``cache``: a
cache directory; ``out``/``out2``: files it writes; ``outdir``: a directory it writes into)
and how to run it on them. A case (:data:`CASES`) puts one hostile thing at one role's path:
the output is the input or its external data, two outputs on one path, a FIFO, a socket, a
dangling or looping link, a read-only directory, a full disk, a FIFO that appears at an
output while the run works, the same input twice. :func:`expected` says what the entry point
must do (``refused``: exit 2 and one line, or an ``OnnxfoldError``; ``ok``; ``in place``), by
the case and the role's kind alone, so that the command line and Python are held to the same
answer. :func:`run_cell` runs one and returns what happened; ``tests/adversarial/
test_hostile_paths.py`` asserts it. The full-disk and read-only cases need a mount: they run in
one child in a private mount namespace (``python -m tests.support.hostile_paths ROOT``).

Every row runs on tiny models built here with ``onnx.helper`` (a LoRA branch beside a MatMul,
16 x 8), so the whole table costs seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import stat
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from tests.support.files import snapshot

A, B = "w.lora_A.default.weight", "w.lora_B.default.weight"
# a cell is hung (a FIFO waited on) when, in HANG_PERIODS periods of HANG_SECONDS in a row,
# this process spent under HANG_CPU seconds of CPU: progress, not a wall, decides (a cell that
# is slow because the disk is busy with a sync still computes; one waiting on a FIFO does not)
HANG_SECONDS = 20
HANG_PERIODS = 3
HANG_CPU = 0.05


# -- the files every cell starts from ---------------------------------------------------------
def build_template(root: Path) -> Path:
    """The files the rows read, in ``root/template``: ``m.onnx`` (a LoRA model, its weights
    in ``m.onnx.data``), ``n.onnx`` (the same, inline), ``folded.onnx`` (``m`` optimized),
    ``base.onnx`` (its LoRA weights as inputs, weights in ``base.onnx.data``), ``a.onnx_adapter``
    and ``f.npz`` (``x``)."""
    import onnxfold
    from tests.cli.test_split_adapter_cli import lora_model

    template = root / "template"
    template.mkdir(parents=True)
    lora_model(template / "n.onnx")
    onnx.save(onnx.load(str(template / "n.onnx")), str(template / "m.onnx"),
              save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    onnxfold.optimize(str(template / "n.onnx")).save(str(template / "folded.onnx"))
    onnxfold.split_adapter(str(template / "n.onnx"), str(template / "lifted.onnx"),
                           str(template / "a.onnx_adapter"))
    onnx.save(onnx.load(str(template / "lifted.onnx")), str(template / "base.onnx"),
              save_as_external_data=True, location="base.onnx.data", size_threshold=0)
    (template / "lifted.onnx").unlink()
    np.savez(template / "f.npz", x=np.ones((3, 16), np.float32))
    return template


# -- the rows -----------------------------------------------------------------------------------
INPUT_ROLES = ("in", "in2", "arrays", "adapter")
OUTPUT_ROLES = ("out", "out2")


@dataclass
class Row:
    """An entry point: its default path for each role (relative to the cell's directory) and
    how it runs (``run(paths)``, raising for an API row; a CLI row gives its argv).
    ``in_place``: an output naming the input replaces it (``optimize M -o M``); ``point``:
    the named point (``onnxfold.host.points``) after its claim and before it publishes;
    ``costly``: only cells that are refused before any work run (the rest take minutes)."""

    name: str
    roles: dict[str, str]
    argv: Callable[[dict[str, str]], list[str]] | None = None
    call: Callable[[dict[str, str]], object] | None = None
    in_place: bool = False
    point: str | None = None
    appears: str | None = None  # the file a FIFO appears at, when the run reaches ``point``
    costly: str = ""
    hostile_roles: tuple[str, ...] | None = None  # the roles cases apply to (None: all)
    cases: tuple[str, ...] | None = None  # the cases that apply (None: all)
    # (case, role) -> what this row does instead of what the role's kind says (None: n/a)
    overrides: dict[tuple[str, str], str | None] = field(default_factory=dict)

    @property
    def cli(self) -> bool:
        return self.argv is not None


def _api_optimize(p: dict[str, str]) -> object:
    import onnxfold

    return onnxfold.optimize(p["in"])


def _api_save(p: dict[str, str]) -> object:
    import onnxfold

    return onnxfold.optimize(p["in"]).save(p["out"])


def _api_save_model(p: dict[str, str]) -> object:
    import onnxfold

    return onnxfold.save_model(onnxfold.load_model(p["in"]), p["out"])


def _api_load(p: dict[str, str]) -> object:
    import onnxfold

    return onnxfold.load_model(p["in"])


def _api_simplify(p: dict[str, str]) -> object:
    import onnxfold

    return onnxfold.simplify(p["in"], check_n=1, inputs=p["arrays"])


def _api_compare(p: dict[str, str]) -> object:
    import onnxfold

    return onnxfold.compare(p["in"], p["in2"], n=1, inputs=p["arrays"])


def _api_latency(p: dict[str, str]) -> object:
    import onnxfold

    return onnxfold.measure_latency(p["in"], p["in2"], runs=1)


def _api_split_adapter(p: dict[str, str]) -> object:
    import onnxfold

    return onnxfold.split_adapter(p["in"], p["out"], p["out2"])


def _api_write_split(p: dict[str, str]) -> object:
    import onnxfold

    parts = onnxfold.split_model(onnxfold.load_model(p["in"]), [A, B])
    return onnxfold.write_split(parts, p["outdir"])


def _api_session(p: dict[str, str]) -> object:
    import onnxfold

    session = onnxfold.Session(p["in"], adapter=p["adapter"], cache_dir=p["cache"])
    return session.run(None, {"x": np.ones((3, 16), np.float32)})


MODEL = {"in": "m.onnx"}
BASE = {"in": "base.onnx"}
ROWS = [
    Row("cli optimize", {**MODEL, "out": "o.onnx", "out2": "o.json"},
        lambda p: ["optimize", p["in"], "-o", p["out"], "--json", p["out2"], "-q"],
        in_place=True, point="loaded", appears="o.onnx"),
    # one model, shard 1 of 2: this shard folds nothing (shard 0's job reads the model, as
    # the "cli optimize" row does); its manifest may replace no model shard 0 writes (out2 at
    # zo/m.onnx is "two outputs on one path")
    Row("cli optimize --shard", {**MODEL, "outdir": "zo", "out2": "s.json"},
        lambda p: ["optimize", p["in"], "-o", p["outdir"] + "/", "--shard", "1/2", "--json",
                   p["out2"], "-q"], point="batch-planned", appears="s.json",
        hostile_roles=("outdir", "out2"),
        overrides={("full disk", "outdir"): "ok"}),  # it writes nothing there
    # two jobs would write one output: refused by every shard, one taking no model included
    Row("cli optimize, a batch", {**MODEL, "in2": "n.onnx", "outdir": "zo"},
        lambda p: ["optimize", p["in"], p["in2"], "-o", p["outdir"] + "/", "--shard", "2/3",
                   "-q"], cases=("same input twice",),
        overrides={("same input twice", "in2"): "refused"}),
    Row("cli split", {**BASE, "outdir": "sp"},
        lambda p: ["split", p["in"], "--runtime-const", A, B, "-o", p["outdir"]],
        point="saving", appears="sp/entry.onnx"),
    Row("cli split-adapter", {**MODEL, "out": "b.onnx", "out2": "b.onnx_adapter"},
        lambda p: ["split-adapter", p["in"], "-o", p["out"], "--adapter", p["out2"]],
        point="loaded", appears="b.onnx"),
    Row("cli run", {**BASE, "arrays": "f.npz", "adapter": "a.onnx_adapter", "out": "r.npz",
                    "cache": "cache"},
        lambda p: ["run", p["in"], "--inputs", p["arrays"], "--adapter", p["adapter"], "-o",
                   p["out"], "--cache-dir", p["cache"]], point="ran", appears="r.npz"),
    Row("cli compare", {**MODEL, "in2": "n.onnx", "arrays": "f.npz", "out": "c.json"},
        lambda p: ["compare", p["in"], p["in2"], "--inputs", p["arrays"], "--json", p["out"]],
        point="inference", appears="c.json"),
    Row("cli verify-folds", {**MODEL, "in2": "folded.onnx", "out": "v.json"},
        lambda p: ["verify-folds", p["in"], p["in2"], "--json", p["out"]], point="inference",
        appears="v.json"),
    Row("cli inspect", dict(MODEL), lambda p: ["inspect", p["in"]]),
    Row("cli rules", {"out": "coverage.json"},
        lambda p: ["rules", "--coverage", "--json", p["out"]],
        costly="the coverage of the ONNX node tests takes minutes; its --json is claimed "
               "before that work, so every refusal is tested",
        overrides={("full disk", "out"): None}),  # found full only once written, minutes on
    Row("api optimize", dict(MODEL), call=_api_optimize),
    Row("api OptimizeResult.save", {**MODEL, "out": "o.onnx"}, call=_api_save, point="saving",
        appears="o.onnx"),
    Row("api save_model", {**MODEL, "out": "o.onnx"}, call=_api_save_model, point="saving",
        appears="o.onnx"),
    Row("api load_model", dict(MODEL), call=_api_load),
    Row("api simplify", {**MODEL, "arrays": "f.npz"}, call=_api_simplify),
    Row("api compare", {**MODEL, "in2": "n.onnx", "arrays": "f.npz"}, call=_api_compare),
    Row("api measure_latency", {**MODEL, "in2": "n.onnx"}, call=_api_latency),
    Row("api split_adapter", {**MODEL, "out": "b.onnx", "out2": "b.onnx_adapter"},
        call=_api_split_adapter, point="loaded", appears="b.onnx"),
    Row("api write_split", {**BASE, "outdir": "sp"}, call=_api_write_split, point="saving",
        appears="sp/entry.onnx"),
    Row("api Session", {**BASE, "adapter": "a.onnx_adapter", "cache": "cache"},
        call=_api_session),
]
BY_NAME = {row.name: row for row in ROWS}
# what each command line has in Python: the same cells must end the same way
PAIRS = [("cli optimize", "api OptimizeResult.save"), ("cli split", "api write_split"),
         ("cli split-adapter", "api split_adapter"), ("cli compare", "api compare"),
         ("cli inspect", "api load_model")]
# entries of onnxfold.__all__ that touch no file (a row of their own would test nothing)
NO_FILES = {
    "CompareResult", "FoldOptions", "FoldStats", "InferenceTimeout", "InputError",
    "LatencyResult", "OnnxfoldError", "OutputError", "Report", "__version__",
    "inference_time_limit",
    "split_model",  # splits an ir.Model in memory (write_split writes it: a row)
    "OptimizeResult",  # what optimize returns; its save() is a row
}


# -- the cases ----------------------------------------------------------------------------------
CASES = ("output is input", "output is its data", "two outputs on one path", "fifo", "socket",
         "dangling link", "looping link", "read-only directory", "full disk",
         "appears during the run", "same input twice")
MOUNTED = ("read-only directory", "full disk")  # run in a mount namespace (see the doc)


def kind(role: str) -> str:
    return "input" if role in INPUT_ROLES else "output" if role in OUTPUT_ROLES else role


def _appears_at(row: Row) -> str | None:
    """The role a FIFO appears at during the run: the row's first output."""
    return next((r for r in ("out", "outdir", "out2") if r in row.roles), None) \
        if row.appears else None


def expected(row: Row, case: str, role: str) -> str | None:
    """What ``row`` must do when ``case`` is put at ``role`` (None: the case does not apply
    there): ``refused``, ``ok`` or ``in place``. The same for every row whose role has that
    kind: the command line and Python are held to one answer."""
    what = kind(role)
    if (row.hostile_roles is not None and role not in row.hostile_roles) or \
            (row.cases is not None and case not in row.cases):
        return None
    if (case, role) in row.overrides:
        return row.overrides[case, role]
    if case in ("output is input", "output is its data", "two outputs on one path"):
        if what not in ("output", "outdir") or "in" not in row.roles or (
                case == "two outputs on one path" and role != "out2"):
            return None
        return "in place" if case == "output is input" and row.in_place and role == "out" \
            else "refused"
    if case == "same input twice":  # read twice: no harm
        return "ok" if role == "in2" else None
    if case == "appears during the run":
        return "refused" if role == _appears_at(row) else None
    if case in MOUNTED:
        return None if what in ("cache", "input") else "refused"
    if what == "cache":  # a trusted cache's key: refused unread, a new one made
        return "ok" if case in ("fifo", "socket") else "refused"
    if case == "dangling link":  # an output is written through to the link's target
        return "ok" if what in ("output", "outdir") else "refused"
    return "refused"  # a FIFO, a socket, a loop of links: never read, never replaced


def cells(rows: list[Row] = ROWS, cases: tuple[str, ...] = CASES
          ) -> Iterator[tuple[Row, str, str, str]]:
    """Every (row, case, role, expected) that applies."""
    for row in rows:
        for case in cases:
            for role in row.roles:
                want = expected(row, case, role)
                if want is not None and not (row.costly and want != "refused"):
                    yield row, case, role, want


# -- one cell -----------------------------------------------------------------------------------
@dataclass
class Outcome:
    """How a cell ended: ``refused`` (exit 2 and one error line, or an OnnxfoldError), ``ok``
    (exit 0, or returned), or ``other`` (anything else: a traceback, exit 3, another
    exception), with the message; what happened to the hostile path; the files the run left
    that it should not have."""

    ended: str
    message: str = ""
    hostile: str = ""  # what is at the hostile path after the run (a FIFO: "fifo")
    changed: list[str] = field(default_factory=list)


class Hung(Exception):
    """The cell ran past :data:`HANG_SECONDS`."""


def _hostile(case: str, path: Path, cell: Path) -> None:
    """Put ``case``'s hostile thing at ``path`` (in place of the file there)."""
    if os.path.lexists(path):
        os.unlink(path)
    if case == "fifo":
        os.mkfifo(path, 0o600)
    elif case == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif case == "dangling link":
        os.symlink(cell / "nowhere.target", path)
    elif case == "looping link":
        os.symlink(path.name, path)


def _paths(row: Row, case: str, role: str, cell: Path, mount: Path | None) -> dict[str, str]:
    """The row's paths in ``cell`` with ``case`` applied to ``role``."""
    paths = {r: str(cell / name) for r, name in row.roles.items()}
    target = Path(paths[role])
    if case == "output is input":
        paths[role] = paths.get("in", str(cell / "m.onnx"))
    elif case == "output is its data":
        paths[role] = paths.get("in", str(cell / "m.onnx")) + ".data"
    elif case == "two outputs on one path":
        paths[role] = paths["out"] if "out" in paths else \
            str(Path(paths["outdir"]) / Path(paths["in"]).name)
    elif case == "same input twice":
        paths[role] = paths["in"]
    elif case in MOUNTED:
        assert mount is not None
        paths[role] = str(mount / target.name)
    elif kind(role) == "cache" and case in ("fifo", "socket"):  # its key, in a trusted one
        target.mkdir(mode=0o700)
        _hostile(case, target / ".onnxfold-key", cell)
    elif case != "appears during the run":
        _hostile(case, target, cell)
    return paths


@contextlib.contextmanager
def _bounded() -> Iterator[None]:
    """Raise :class:`Hung` in this (the main) thread once the process has made no progress
    (under :data:`HANG_CPU` s of CPU) for :data:`HANG_PERIODS` periods of
    :data:`HANG_SECONDS` in a row."""
    seen = [time.process_time()]
    idle = [0]

    def check(*_: object) -> None:
        now = time.process_time()
        idle[0] = idle[0] + 1 if now - seen[0] < HANG_CPU else 0
        seen[0] = now
        if idle[0] >= HANG_PERIODS:
            raise Hung(f"no progress: under {HANG_CPU} s of CPU in "
                       f"{HANG_PERIODS * HANG_SECONDS} s")
        signal.alarm(HANG_SECONDS)

    previous = signal.signal(signal.SIGALRM, check)
    signal.alarm(HANG_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _appearing(point: str | None, at: Path | None, pauses: Path) -> Iterator[None]:
    """While the block runs: each time the run reaches ``point`` (the test-only pause of
    ``onnxfold.host.points``), a FIFO appears at ``at`` (once), and the run goes on."""
    if point is None or at is None:
        yield
        return
    from onnxfold.host.points import PAUSE_AT_ENV, PAUSE_DIR_ENV

    done = threading.Event()

    def watch() -> None:
        marker = pauses / f"{point}.{os.getpid()}"
        while not done.is_set():
            if marker.exists():
                if not os.path.lexists(at):
                    os.mkfifo(at, 0o600)
                marker.unlink()
            time.sleep(0.002)

    pauses.mkdir(exist_ok=True)
    saved = {k: os.environ.get(k) for k in (PAUSE_AT_ENV, PAUSE_DIR_ENV)}
    os.environ[PAUSE_AT_ENV], os.environ[PAUSE_DIR_ENV] = point, str(pauses)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _run(row: Row, paths: dict[str, str]) -> tuple[str, str]:
    """Run the row: (``refused``/``ok``/``other``, the message)."""
    from onnxfold.errors import OnnxfoldError

    if row.argv is not None:
        from onnxfold.app.cli import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(row.argv(paths))
            except SystemExit as e:  # argparse's usage errors
                code = e.code if isinstance(e.code, int) else 2
        lines = err.getvalue().strip().splitlines()
        errors = [line for line in lines if not line.startswith("onnxfold: warning: ")]
        if code == 2 and len(errors) == 1 and errors[0].startswith("onnxfold: error: ") and \
                "Traceback" not in err.getvalue():
            return "refused", errors[0]
        return ("ok" if code == 0 and not errors else "other"), f"exit {code}: {err.getvalue()}"
    assert row.call is not None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a cache's warnings: said, not what is tested
            row.call(paths)
    except OnnxfoldError as e:
        return "refused", f"{type(e).__name__}: {e}"
    except Exception as e:  # any other is the cell's failure
        return "other", f"{type(e).__name__}: {e}"
    return "ok", ""


def _kind_of(path: Path) -> str:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "nothing"
    return next((name for test, name in ((stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"),
                                         (stat.S_ISLNK, "link"), (stat.S_ISDIR, "directory"),
                                         (stat.S_ISREG, "file")) if test(mode)), "other")


def run_cell(row: Row, case: str, role: str, template: Path, cell: Path,
             mount: Path | None = None) -> Outcome:
    """Run ``row`` with ``case`` at ``role`` in a fresh copy of ``template`` at ``cell``
    (``mount``: the read-only or full directory of a mounted case)."""
    shutil.copytree(template, cell)
    paths = _paths(row, case, role, cell, mount)
    appears = case == "appears during the run"
    hostile = cell / row.appears if appears and row.appears else Path(paths[role])
    watched = [cell] + ([mount] if mount is not None else [])
    before = snapshot(*watched)
    with _bounded(), _appearing(row.point if appears else None, hostile, cell / ".pauses"):
        try:
            ended, message = _run(row, paths)
        except Hung as e:
            ended, message = "other", f"hung: {e}"
    shutil.rmtree(cell / ".pauses", ignore_errors=True)
    after = snapshot(*watched)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    return Outcome(ended, message, _kind_of(hostile), changed)


# -- the mounted cases, in a child of their own --------------------------------------------------
def mounted_cells() -> list[tuple[Row, str, str, str]]:
    return list(cells(cases=MOUNTED))


def main(root: str) -> None:
    """In a private mount namespace (the caller's ``unshare -rm``): ``ROOT/ro`` read-only,
    ``ROOT/full`` a full tmpfs; every mounted cell's outcome as JSON on stdout."""
    base = Path(root)
    template = base / "template"
    results = {}
    for n, (row, case, role, _) in enumerate(mounted_cells()):
        mount = base / ("ro" if case == "read-only directory" else "full")
        outcome = run_cell(row, case, role, template, base / "cells" / str(n), mount)
        results[f"{row.name}|{case}|{role}"] = outcome.__dict__
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1])
