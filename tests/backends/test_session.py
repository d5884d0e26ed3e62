"""onnxfold.Session: fold once, cache contract, threads, processes, memory."""

import gc
import threading
import weakref

import numpy as np
import pytest

from onnxfold.runtime.feed_check import KEPT_VIEW_BYTES
from onnxfold.runtime.session import RuntimeConstantsChanged, Session
from tests.support.cli import run_python
from tests.support.running import run_ort
from tests.support.weight_models import RUNTIME, weight_feeds, weights_as_inputs_model


@pytest.fixture
def model():
    return weights_as_inputs_model()


def test_drop_in_for_inference_session(model):
    session = Session(model, RUNTIME)
    assert [i.name for i in session.get_inputs()] == ["x", "wq", "scale", "zp", "bias_h"]
    assert [o.name for o in session.get_outputs()] == ["y"]
    feeds = weight_feeds()
    want = run_ort(model, feeds)[0]
    np.testing.assert_allclose(session.run(None, feeds)[0], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(session.run(["y"], feeds)[0], want, rtol=1e-6, atol=1e-6)
    assert session.folds == 1  # the second call ran entry only


def test_changed_runtime_constants_refold(model):
    session = Session(model, RUNTIME)
    first, second = weight_feeds(seed=0), weight_feeds(seed=1)
    session.run(None, first)
    out = session.run(None, second)[0]
    assert session.folds == 2
    np.testing.assert_allclose(out, run_ort(model, second)[0], rtol=1e-6, atol=1e-6)
    second["x"] = first["x"]  # dynamic inputs alone never refold
    session.run(None, second)
    assert session.folds == 2


def test_in_place_change_is_seen_by_fingerprint_not_identity(model):
    feeds = weight_feeds()
    for check, refolds in (("fingerprint", 2), ("identity", 1)):
        session = Session(model, RUNTIME, check=check)
        session.run(None, feeds)
        feeds["wq"][:] = -feeds["wq"]  # same buffer, new content
        session.run(None, feeds)
        assert session.folds == refolds


def test_refuse_and_explicit_refold(model):
    session = Session(model, RUNTIME, check="refuse")
    session.run(None, weight_feeds(seed=0))
    with pytest.raises(RuntimeConstantsChanged):
        session.run(None, weight_feeds(seed=1))
    session.refold(weight_feeds(seed=1))
    assert session.folds == 2
    session.run(None, weight_feeds(seed=1))
    session.invalidate()
    session.run(None, weight_feeds(seed=1))
    assert session.folds == 3


def test_concurrent_first_calls_fold_once(model):
    session = Session(model, RUNTIME)
    feeds = weight_feeds()
    want = run_ort(model, feeds)[0]
    barrier = threading.Barrier(8)
    results, errors = [], []

    def call():
        barrier.wait()
        try:
            results.append(session.run(None, feeds)[0])
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 8 and session.folds == 1
    for r in results:
        np.testing.assert_allclose(r, want, rtol=1e-6, atol=1e-6)


def test_runtime_constant_feeds_are_not_kept():
    """A large feed the fold consumed is not kept after it; a small one (at most
    KEPT_VIEW_BYTES: what the per-call check samples through views made once) only while its
    set is the active one."""
    d = 1100  # a 1.2 MB int8 weight
    session = Session(weights_as_inputs_model(d), RUNTIME)
    feeds = weight_feeds(d=d)
    assert feeds["wq"].nbytes > KEPT_VIEW_BYTES >= feeds["scale"].nbytes
    large, small = weakref.ref(feeds["wq"]), weakref.ref(feeds["scale"])
    session.run(None, feeds)
    feeds["wq"] = feeds["scale"] = None
    gc.collect()
    assert large() is None and small() is not None
    session.invalidate()
    gc.collect()
    assert small() is None


_CHILD = """
import sys, numpy as np
sys.path.insert(0, {root!r})
from tests.support.weight_models import RUNTIME, weight_feeds, weights_as_inputs_model
from onnxfold.runtime.session import Session
s = Session(weights_as_inputs_model(), RUNTIME, cache_dir={cache!r})
y = s.run(None, weight_feeds())[0]
print(s.cache_hits, float(np.abs(y).sum()))
"""


def test_disk_cache_is_hit_by_a_new_process(tmp_path):
    import os

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = _CHILD.format(root=root, cache=str(tmp_path / "cache"))
    runs = [run_python("-c", code, timeout=120) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    (hits1, sum1), (hits2, sum2) = (r.stdout.split() for r in runs)
    assert (hits1, hits2) == ("0", "1") and sum1 == sum2
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 1


def test_missing_runtime_constant_feed(model):
    session = Session(model, RUNTIME)
    feeds = weight_feeds()
    del feeds["zp"]
    with pytest.raises(Exception, match="runtime constants zp"):
        session.run(None, feeds)
