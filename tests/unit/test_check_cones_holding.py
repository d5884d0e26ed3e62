"""The original's cones run again and again on the same weights (rewrite validation: once per
input set): within ``Cones.holding`` each weight a run copies is read once, up to a bound, and
what the runs compute is what they compute without it; runs for values both windows read
alike copy no weight at all (they read it where it lies)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxfold.check.running import cones as cones_module
from onnxfold.check.running.cones import Cones, WeightStore
from onnxfold.io.reader import load_model
from tests.support.checked_folds import matmul_chain

READ = cones_module.read_constant  # the real one, whatever a test patched in before


def _runs(path, monkeypatch, budget: int | None, hold: bool, optimized: bool = False):
    """Runs of two values' cone on three input sets (``optimized``: values both windows read
    alike; else the original's nodes as they are, copying their weights): the weights copied,
    in order, and the values."""
    model = load_model(str(path))
    cones = Cones(model, list(model.graph.inputs))
    reads: list[str] = []

    def counted(tensor: ir.TensorProtocol, in_place: bool = False) -> np.ndarray:
        if not in_place:
            reads.append(str(tensor.name))
        return READ(tensor, in_place)

    monkeypatch.setattr(cones_module, "read_constant", counted)
    values = {str(o.name): o for n in model.graph for o in n.outputs}
    sets = [{"x": np.full((k, 64), 0.5 * k, np.float32)} for k in (1, 2, 3)]
    found = []

    def run_all() -> None:
        for feeds in sets:
            got = cones.run([values["h1"], values["h3"]], feeds, exact=False,
                            optimized=optimized)
            found.append([got[values["h1"]], got[values["h3"]]])

    if hold:
        with cones.holding(WeightStore(budget)):
            run_all()
        assert cones._held is None  # nothing held past the block
    else:
        run_all()
    return reads, found


def test_within_the_block_each_weight_is_read_once_and_the_values_do_not_change(
        tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    matmul_chain(path)
    plain_reads, plain = _runs(path, monkeypatch, None, hold=False)
    held_reads, held = _runs(path, monkeypatch, None, hold=True)
    assert sorted(plain_reads) == sorted([f"w{i}" for i in range(4)] * 3)
    assert sorted(held_reads) == [f"w{i}" for i in range(4)]
    for a, b in zip(plain, held):
        for x, y in zip(a, b):
            assert x.tobytes() == y.tobytes()


def test_what_the_bound_does_not_hold_is_read_again(tmp_path, monkeypatch):
    """Two weights of 16 KiB fit a 40 KiB bound: those two are read once, the others at every
    run."""
    path = tmp_path / "m.onnx"
    matmul_chain(path)
    reads, _ = _runs(path, monkeypatch, 40 << 10, hold=True)
    counts = {name: reads.count(name) for name in set(reads)}
    assert sorted(counts.values()) == [1, 1, 3, 3], counts


def test_runs_for_values_both_windows_read_copy_no_weight(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    matmul_chain(path)
    reads, found = _runs(path, monkeypatch, None, hold=True, optimized=True)
    _, copied = _runs(path, monkeypatch, None, hold=True)
    assert reads == [] and len(found) == 3
    assert [[a.shape for a in f] for f in found] == [[a.shape for a in f] for f in copied]
