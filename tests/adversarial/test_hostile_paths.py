"""Every entry point against every hostile path (issue 55): one table, the command line and
Python held to the same answers (``tests/support/hostile_paths.py`` has the rows, the cases
and what each must do).

Refused: exit 2 with one ``onnxfold: error:`` line, or an ``OnnxfoldError``; nothing changed
(the FIFO still a FIFO, the input as it was, no temporary or lock file), and never a hang (a
cell that makes no progress, under ``HANG_CPU`` s of CPU in ``HANG_PERIODS`` periods of
``HANG_SECONDS``, fails as hung: a FIFO waited on; a wall alone decides nothing). Ok: done, with no
leftover. In place (``optimize M -o M``): the model replaced, loading, its old data gone. The
read-only and full-disk cases run in one child in a mount namespace (``unshare -rm``).
Adding a subcommand or a public function without a row fails
:func:`test_every_entry_point_has_a_row`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import onnxfold
from onnxfold.app.parser import build_parser
from onnxfold.app.python_api import PUBLIC_CLASSES, PUBLIC_FUNCTIONS
from tests.support import hostile_paths as hp
from tests.support.cli import run_command
from tests.support.interrupts import leftovers

REPO = Path(__file__).resolve().parents[2]
UNSHARE = shutil.which("unshare")
UNMOUNTED = tuple(case for case in hp.CASES if case not in hp.MOUNTED)


def _ids(cells) -> list[str]:
    return [f"{row.name}|{case}|{role}" for row, case, role, _ in cells]


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return hp.build_template(tmp_path_factory.mktemp("hostile"))


def _assert(row: hp.Row, case: str, role: str, want: str, outcome: hp.Outcome,
            cell: Path) -> None:
    """``outcome`` is what ``want`` says (see the module doc)."""
    shown = f"{row.name}, {case} at {role}: {outcome.message}"
    assert leftovers(cell) == [], shown
    paths = {r: str(cell / name) for r, name in row.roles.items()}
    # what a run may change besides its refused output: the FIFO the case made appear, a
    # cache it fills; a second output refused on a full disk leaves the first, complete
    allowed = [paths.get("cache", "\0"), str(cell / row.appears) if row.appears else "\0"]
    if case in hp.MOUNTED and role == "out2" and "out" in paths:
        allowed.append(paths["out"])
    changed = [p for p in outcome.changed  # (or a directory holding one of them)
               if not any(p.startswith(a) or a.startswith(p + os.sep) for a in allowed)]
    if want == "refused":
        assert outcome.ended == "refused", shown
        assert changed == [], shown
        if case in ("fifo", "socket", "appears during the run") and hp.kind(role) != "cache":
            assert outcome.hostile == ("socket" if case == "socket" else "fifo"), shown
        return
    assert outcome.ended == "ok", shown
    assert not any(p.startswith(str(cell / name)) for p in changed
                   for name in ("m.onnx", "n.onnx", "base.onnx", "f.npz", "a.onnx_adapter")
                   if want != "in place"), shown  # inputs as they were
    if case == "dangling link":  # written through: the link stays, its target is the file
        assert outcome.hostile == "link" and (cell / "nowhere.target").exists(), shown
    if hp.kind(role) == "cache":  # the FIFO or socket key replaced by a key
        assert (cell / "cache" / ".onnxfold-key").stat().st_size == 32, shown
    if want == "in place":
        assert sorted(p.name for p in cell.glob("m.onnx*")) == ["m.onnx"], shown  # data gone
        x = np.ones((2, 16), np.float32)
        got = ort.InferenceSession(str(cell / "m.onnx")).run(None, {"x": x})[0]
        want_y = ort.InferenceSession(str(cell / "n.onnx")).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want_y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("row", "case", "role", "want"), list(hp.cells(cases=UNMOUNTED)),
                         ids=_ids(hp.cells(cases=UNMOUNTED)))
def test_a_hostile_path(template, tmp_path, row, case, role, want):
    cell = tmp_path / "cell"
    _assert(row, case, role, want, hp.run_cell(row, case, role, template, cell), cell)


def _namespaces_work() -> bool:
    return UNSHARE is not None and run_command(
        [UNSHARE, "-rm", "sh", "-c", "mount -t tmpfs tmpfs /mnt"], timeout=30).returncode == 0


@pytest.fixture(scope="module")
def mounted(tmp_path_factory) -> tuple[Path, dict]:
    """Every read-only and full-disk cell, run in one child: ``ROOT/ro`` bound read-only,
    ``ROOT/full`` a 64 KiB tmpfs filled up."""
    if not _namespaces_work():
        pytest.skip("needs `unshare -rm` (user and mount namespaces) for a read-only bind "
                    "mount and a full tmpfs")
    root = tmp_path_factory.mktemp("mounted")
    hp.build_template(root)
    ro, full = root / "ro", root / "full"
    ro.mkdir()
    full.mkdir()
    script = (f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro} && "
              f"mount -t tmpfs -o size=64k tmpfs {full} && "
              f"(head -c 1048576 /dev/zero > {full}/fill 2>/dev/null; true) && exec \"$@\"")
    done = run_command([UNSHARE, "-rm", "sh", "-c", script, "sh", sys.executable, "-m",
                        "tests.support.hostile_paths", root], cwd=REPO)
    assert done.returncode == 0, done.stderr
    return root, json.loads(done.stdout)


@pytest.mark.parametrize(("row", "case", "role", "want"), hp.mounted_cells(),
                         ids=_ids(hp.mounted_cells()))
def test_a_read_only_or_full_directory(mounted, row, case, role, want):
    root, outcomes = mounted
    number = next(n for n, cell in enumerate(hp.mounted_cells()) if cell[:3] == (row, case, role))
    outcome = hp.Outcome(**outcomes[f"{row.name}|{case}|{role}"])
    _assert(row, case, role, want, outcome, root / "cells" / str(number))


def test_every_entry_point_has_a_row():
    """Each subcommand, and each public name of ``onnxfold`` that reads or writes a file, has
    a row: one added without one fails here until the table says what it must do."""
    parser = build_parser()
    subcommands = set(next(a for a in parser._actions if a.dest == "command").choices)
    cli_rows = {row.argv(dict.fromkeys(row.roles, "P"))[0] for row in hp.ROWS if row.cli}
    assert subcommands == cli_rows
    api_rows = {row.name.removeprefix("api ") for row in hp.ROWS if not row.cli}
    public = set(onnxfold.__all__) | PUBLIC_FUNCTIONS | PUBLIC_CLASSES
    assert public - hp.NO_FILES == api_rows - {"OptimizeResult.save"}, \
        sorted(public ^ (api_rows | hp.NO_FILES))
    assert public >= hp.NO_FILES  # no stale exemption


@pytest.mark.parametrize(("cli", "api"), hp.PAIRS)
def test_the_command_line_and_python_are_held_to_the_same_answers(cli, api):
    """For the roles both have, every case expects the same of the command and its Python
    call (``optimize M -o M`` writes in place, as asked; Python asks with ``replaces=``)."""
    a, b = hp.BY_NAME[cli], hp.BY_NAME[api]
    for case in hp.CASES:
        for role in set(a.roles) & set(b.roles):
            mine, theirs = hp.expected(a, case, role), hp.expected(b, case, role)
            if (case, role) == ("output is input", "out") and a.in_place:
                assert (mine, theirs) == ("in place", "refused")
            elif case != "appears during the run":  # at each one's own point, when it has one
                assert mine == theirs, (case, role)


def test_a_fifo_cache_entry_is_refused_unread_and_folded_again(template, tmp_path):
    """The cache's entry, a FIFO with no writer: refused at once (it hung a run past every
    signal), said in a warning, removed and folded again."""
    cell = tmp_path / "cell"
    shutil.copytree(template, cell)
    cache = cell / "cache"
    x = {"x": np.ones((3, 16), np.float32)}
    first = onnxfold.Session(str(cell / "base.onnx"), adapter=str(cell / "a.onnx_adapter"),
                             cache_dir=cache)
    want = first.run(None, x)[0]
    [entry] = [p for p in cache.iterdir() if p.suffix == ".npz"]
    entry.unlink()
    os.mkfifo(entry, 0o600)
    session = onnxfold.Session(str(cell / "base.onnx"), adapter=str(cell / "a.onnx_adapter"),
                               cache_dir=cache)
    with hp._bounded(), pytest.warns(UserWarning, match="not a regular file .a FIFO"):
        np.testing.assert_array_equal(session.run(None, x)[0], want)
    assert session.cache_discarded == 1 and entry.is_file()
