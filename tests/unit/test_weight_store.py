"""The original's weights copied once for the fold verification and the rewrite validation of
one check (``cones.WeightStore``): a weight both steps' cones copy comes from the file once,
and nothing the check says changes; a store with no room reads it again each time, as before;
the store is emptied before the optimized model's session. Runs that read a weight where it
lies (nodes that only move data, values both windows read alike) copy it not at all, and say
what the copies say."""

from __future__ import annotations

from collections import Counter

import numpy as np

from onnxfold.check import compare as compare_module
from onnxfold.check.running import cones as cones_module
from onnxfold.check.running.cones import WeightStore
from onnxfold.check.running.options import CompareOptions
from tests.support.checked_folds import checked_fold, said, transposed_layer_norm

# (taken before any test patches them: a second check in one test must not count through the
# first one's patches)
REAL_READ, REAL_WEIGHT = cones_module.read_constant, cones_module.Cones._weight


def _check(tmp_path, monkeypatch, budget: int | None, allowed: bool = True):
    """The check of the model's fold, its store of ``budget`` bytes (``allowed=False``: no
    run reads a weight where it lies): the result, how many times each weight was copied
    from the file for a cone's run, and the stores made."""
    reads: Counter = Counter()
    stores: list[WeightStore] = []
    in_run: list[bool] = []

    def counted(tensor, in_place: bool = False):
        if in_run and not in_place:  # (the fold verification compares tensors read
            reads[tensor.name] += 1  # elsewhere too)
        return REAL_READ(tensor, in_place)

    def weight(self, leaf, asked: bool = False):
        in_run.append(True)
        try:
            return REAL_WEIGHT(self, leaf, asked and allowed)
        finally:
            in_run.pop()

    def store() -> WeightStore:
        stores.append(WeightStore(budget))
        return stores[-1]

    monkeypatch.setattr(cones_module, "read_constant", counted)
    monkeypatch.setattr(cones_module.Cones, "_weight", weight)
    monkeypatch.setattr(compare_module, "_weight_store", store)
    compared = checked_fold(tmp_path, transposed_layer_norm(256, 128, seed=3),
                            CompareOptions())
    return compared, reads, stores


def test_a_weight_both_steps_copy_is_copied_once(tmp_path, monkeypatch):
    for name in ("kept", "none", "in_place"):
        (tmp_path / name).mkdir()
    kept, once, stores = _check(tmp_path / "kept", monkeypatch, None, allowed=False)
    unkept, again, _ = _check(tmp_path / "none", monkeypatch, 0, allowed=False)
    assert kept.ok and kept.folds is not None and kept.rewrites is not None
    assert kept.folds.tensors and kept.rewrites.rewrites  # both steps ran their cones
    assert once["W"] == 1 and again["W"] >= 2
    assert said(kept) == said(unkept)
    assert stores and all(not s.arrays for s in stores)  # emptied before B's session
    # the fold (a transpose) and the leaves (values both windows read) read W where it lies
    in_place, never, _ = _check(tmp_path / "in_place", monkeypatch, None)
    assert never["W"] == 0 and said(in_place) == said(kept)


def test_a_store_keeps_what_fits_its_budget():
    store = WeightStore(1000)
    small, large = np.zeros(100, np.float32), np.zeros(1000, np.float32)
    assert store.get("s", lambda: small) is small and store.room == 600
    assert store.get("l", lambda: large) is large and "l" not in store.arrays
    assert store.get("s", lambda: np.ones(1)) is small  # kept: not read again


def test_a_cone_run_on_every_input_set_is_prepared_once(tmp_path, monkeypatch):
    """The rewrite's leaves are the same cone on the 3 input sets: walked, stripped of its
    large Constants and serialized once (``Cones._prepared``); what the check says is what it
    says with each run preparing its own."""
    real = cones_module.Cones._prepared
    made: Counter = Counter()
    asked: Counter = Counter()

    def counted(self, sources):
        key = (id(self), tuple(str(s.name) for s in sources))
        asked[key] += 1
        if tuple(sources) not in self._cones:
            made[key] += 1
        return real(self, sources)

    def fresh(self, sources):
        self._cones.clear()
        return real(self, sources)

    for name in ("once", "each"):
        (tmp_path / name).mkdir()
    monkeypatch.setattr(cones_module.Cones, "_prepared", counted)
    once, _, _ = _check(tmp_path / "once", monkeypatch, None)
    assert made and max(made.values()) == 1
    leaves = [key for key in asked if "xw" in key[1]]  # the rewrite's leaves' cone
    assert leaves and asked[leaves[0]] == 3 and made[leaves[0]] == 1
    monkeypatch.setattr(cones_module.Cones, "_prepared", fresh)
    each, _, _ = _check(tmp_path / "each", monkeypatch, None)
    assert once.ok and said(once) == said(each)
