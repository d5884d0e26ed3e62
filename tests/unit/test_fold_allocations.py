"""A folder allocates no more than its size rule counts (rules/sizes.py): the pool budget is
checked against that count before the fold runs."""

from __future__ import annotations

import tracemalloc

import numpy as np

from onnxfold.declare.catalogue import load_catalogue


def _peak_bytes(fn, *args) -> tuple[int, object]:
    tracemalloc.start()
    try:
        result = fn(*args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, result


def test_range_allocates_one_output_sized_buffer():
    catalogue = load_catalogue()
    rule = catalogue.folder("", "Range", 17)
    counted = catalogue.size_rule("Range")
    assert rule is not None and counted is not None
    start, limit, delta = np.int64(0), np.int64(2_000_000), np.int64(1)
    peak, result = _peak_bytes(rule.fn, np.asarray(start), np.asarray(limit), np.asarray(delta))
    assert np.array_equal(result[:3], [0, 1, 2]) and result[-1] == 1_999_999
    budget = counted.fn(np.asarray(start), np.asarray(limit), np.asarray(delta))
    assert budget == 16_000_000
    assert peak < budget * 1.1, f"Range allocated {peak} B, its size rule counts {budget} B"
