"""Differential fuzzing, CI tier: 200 random models folded and compared with the original.

Each seed's model (``graphgen``) is folded with ``FoldOptions(strict=True)`` and run next to the
original in onnxruntime (graph optimizations off) at two values of each symbolic dim
(``fuzzcheck``). A crash, a folded model onnxruntime (or onnx.checker) refuses, or a different
output fails the seed; its model is saved to $ONNXFOLD_FUZZ_FAIL_DIR (default /tmp/fuzz_fail)
as SEED.onnx with its feeds. Reduce it with ``python tests/fuzz/shrink.py SEED``; run many more
with ``python bench/fuzz.py --n 10000``.

KNOWN lists the seeds that fail today, each with its reason, as strict xfails: a fix makes
them XPASS, which fails the run until the seed is removed from KNOWN.
"""

from __future__ import annotations

import os

import fuzzcheck
import graphgen
import pytest

SEEDS = range(0, 200)
FAIL_DIR = os.environ.get("ONNXFOLD_FUZZ_FAIL_DIR", "/tmp/fuzz_fail")

# None in this range today. Of seeds 0..9999, 3 (3096, 3728, 4070, all above it) differ by
# 1-5 float16 ulps where onnxruntime's own float16 kernels give different results for the same
# nodes in different graphs (4070 folds nothing at all); see bench/fuzz.py.
KNOWN: dict[int, str] = {}


def _param(seed: int):
    if seed in KNOWN:
        return pytest.param(seed, marks=pytest.mark.xfail(strict=True, reason=KNOWN[seed]))
    return seed


@pytest.mark.parametrize("seed", [_param(s) for s in SEEDS])
def test_folded_model_computes_what_the_original_computes(seed, tmp_path):
    res = fuzzcheck.check_seed(seed, workdir=str(tmp_path), timeout=30, inspect=False)
    if res.status == "discard":
        pytest.skip(f"generated model not usable: {res.kind}: {res.detail}")
    if res.failed:
        try:
            path = fuzzcheck.save_failure(seed, res, FAIL_DIR)
        except OSError:
            path = "(could not be saved)"
        pytest.fail(f"{res.line()}\nmodel: {path}", pytrace=False)


def test_generator_is_deterministic():
    for seed in (0, 1, 17):
        a, b = graphgen.generate(seed), graphgen.generate(seed)
        assert a.model.SerializeToString() == b.model.SerializeToString()
        for which in (0, 1):
            fa, fb = a.feeds(which), b.feeds(which)
            assert fa.keys() == fb.keys()
            assert all((fa[k] == fb[k]).all() for k in fa)
