"""The pages of the weights a cone's run reads where they lie (the rewrite validation's leaves,
``Cones.run(exact=False)``) are given back after the run, but where the session kept for the
next input set will read them all again: there they stay resident until that session goes
(another cone's session, the end of ``Cones.holding``), where they take at most a
``LINGER_SHARE`` of the memory left. The values are the same either way."""

from __future__ import annotations

import numpy as np

from onnxfold.check.running import cones as cones_module
from onnxfold.check.running.cones import Cones, WeightStore
from onnxfold.io.reader import load_model
from tests.support.checked_folds import matmul_chain

SETS = 3


def _events(tmp_path, monkeypatch, cones_asked: list[list[str]], hold: bool = True,
            optimized: bool = True, room: int | None = None):
    """Each list of ``cones_asked`` run on three input sets of one shape, in turn: the
    events, in order ("run NAMES" after each run, "drop" at each give-back), and the values
    of each run."""
    path = tmp_path / "m.onnx"
    matmul_chain(path)
    model = load_model(str(path))
    cones = Cones(model, list(model.graph.inputs))
    events: list[str] = []
    monkeypatch.setattr(cones_module, "drop_resident_pages", lambda: events.append("drop"))
    monkeypatch.setattr(cones_module.memory, "room", lambda: room)
    values = {str(o.name): o for n in model.graph for o in n.outputs}
    found = []

    def run_all() -> None:
        for names in cones_asked:
            for k in range(SETS):
                got = cones.run([values[n] for n in names],
                                {"x": np.full((2, 64), 0.5 * (k + 1), np.float32)},
                                exact=False, optimized=optimized)
                found.append([got[values[n]].tobytes() for n in names])
                events.append(f"run {' '.join(names)}")

    if hold:
        with cones.holding(WeightStore(None)):
            run_all()
    else:
        run_all()
    return events, found


def test_a_kept_sessions_weights_stay_resident_until_it_goes(tmp_path, monkeypatch):
    events, found = _events(tmp_path, monkeypatch, [["h1", "h3"]])
    assert events == ["run h1 h3"] * SETS + ["drop"]  # given back on leaving the block
    alone, each = _events(tmp_path, monkeypatch, [["h1", "h3"]], hold=False)
    assert alone == ["drop", "run h1 h3"] * SETS  # no session kept: after each run
    assert found == each


def test_another_cones_session_gives_them_back_before_it_is_built(tmp_path, monkeypatch):
    events, _ = _events(tmp_path, monkeypatch, [["h1"], ["h3"]])
    assert events == ["run h1"] * SETS + ["drop"] + ["run h3"] * SETS + ["drop"]


def test_where_the_memory_left_is_short_they_go_after_each_run(tmp_path, monkeypatch):
    weights = 4 * 64 * 64 * 4
    short, _ = _events(tmp_path, monkeypatch, [["h3"]],
                       room=weights * cones_module.LINGER_SHARE - 1)
    assert short == ["drop", "run h3"] * SETS
    roomy, _ = _events(tmp_path, monkeypatch, [["h3"]], room=weights * cones_module.LINGER_SHARE)
    assert roomy == ["run h3"] * SETS + ["drop"]


def test_runs_of_weights_copied_give_their_pages_back_at_once(tmp_path, monkeypatch):
    """Runs of values compared as they are (``optimized=False``) copy their weights: what
    they mapped is given back after each run, as before."""
    events, _ = _events(tmp_path, monkeypatch, [["h3"]], optimized=False)
    assert events == ["drop", "run h3"] * SETS
