"""onnxfold.pipeline.collector: the collector's settings during a fold, and nothing left changed
after;
a caller's own settings and frozen heap are left alone, and no folded-away weight outlives the
call that dropped it."""

from __future__ import annotations

import contextlib
import gc
import weakref

import numpy as np
import onnx_ir as ir
from onnx import helper

import onnxfold
from onnxfold import FoldOptions
from onnxfold.pipeline import collector
from onnxfold.pipeline.collector import YOUNG_THRESHOLD, long_lived, settled
from onnxfold.pipeline.optimizer import optimize
from tests.support.models import make_model, tensor, vinfo


def test_settings_are_restored_and_nested_use_is_a_no_op():
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with long_lived():
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        with long_lived():
            settled(10**6)
            assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD  # the inner exit undid nothing
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen


def test_settled_outside_a_fold_freezes_nothing():
    frozen = gc.get_freeze_count()
    settled(10**6)
    assert gc.get_freeze_count() == frozen


def test_optimize_leaves_the_collector_as_it_found_it():
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    nodes = [helper.make_node("Transpose", ["w"], ["t"]),
             helper.make_node("Add", ["x", "t"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[2, 2])], [vinfo("y", shape=[2, 2])],
                       [tensor("w", np.eye(2, dtype=np.float32))])
    result = onnxfold.optimize(model)
    assert [n.op_type for n in result.to_proto().graph.node] == ["Add"]
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen


def test_a_failing_optimize_restores_the_collector_too():
    before = gc.get_threshold()
    with contextlib.suppress(onnxfold.InputError):
        onnxfold.optimize(b"not a model")
    assert gc.get_threshold() == before and gc.isenabled()


def test_no_automatic_collection_until_the_model_is_loaded():
    """Loading allocates the model itself: collections then would walk it for nothing."""
    with long_lived():
        assert not gc.isenabled()
        settled(10)
        assert gc.isenabled()
    assert gc.isenabled()
    with long_lived():  # never settled (the model could not be loaded): turned back on
        assert not gc.isenabled()
    assert gc.isenabled()


def test_collection_a_caller_turned_off_stays_off():
    gc.disable()
    try:
        with long_lived():
            settled(10)
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_caller_s_own_frozen_objects_stay_frozen():
    gc.freeze()
    try:
        frozen, before = gc.get_freeze_count(), gc.get_threshold()
        with long_lived():
            assert gc.get_threshold() == before  # the caller manages the collector: hands off
            settled(10**6)
        # neither frozen again (the count would jump by every object made since) nor unfrozen
        # (0); a frozen object freed by reference counting meanwhile lowers the count
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


def test_a_small_model_is_frozen_only_when_the_process_exits():
    """Freezing costs a full collection at the end: for a small model it is not worth it,
    unless the process exits right after (the onnxfold executable) and skips that collection."""
    from onnxfold.pipeline.collector import FREEZE_MIN_NODES

    with long_lived():
        settled(FREEZE_MIN_NODES - 1)
        assert gc.get_freeze_count() == 0
        settled(FREEZE_MIN_NODES)
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    with long_lived(collect_after=False):
        settled(10)
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def _in_memory_model(n=64):
    """An ir.Model whose weight is a numpy array only the model holds; the weight folds away."""
    nodes = [helper.make_node("Mul", ["w", "two"], ["w2"]),
             helper.make_node("MatMul", ["x", "w2"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[1, n])], [vinfo("y", shape=[1, n])],
                       [tensor("w", np.zeros((1, 1), np.float32)),
                        tensor("two", np.array(2, np.float32))])
    model = ir.serde.deserialize_model(proto)
    weight = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    value = model.graph.initializers["w"]
    value.const_value = ir.Tensor(weight, name="w")
    value.shape = ir.Shape([n, n])
    return model, weakref.ref(weight)


def test_repeated_optimize_calls_do_not_keep_every_folded_model_alive(monkeypatch):
    # what one call leaves as garbage must be collected, not frozen by the next call's
    # long_lived() (a frozen object is never collected): no folded-away weight stays
    monkeypatch.setattr(collector, "FREEZE_MIN_NODES", 0)  # freeze even this small model
    gc.collect()
    alive = []
    for _ in range(4):
        model, weight = _in_memory_model()
        result = optimize(model)  # not strict: a snapshot is taken for a restart
        result.to_proto()
        del model, result
        alive.append(weight)
    assert sum(w() is not None for w in alive) == 0


def test_a_folded_away_weight_is_freed_while_the_result_lives():
    # the light serialization adds the large initializers to graph.inputs and removes them
    # again: nothing of that may keep the value, and with it its weight, alive
    model, weight = _in_memory_model()
    result = optimize(model, FoldOptions(strict=True))
    assert [n.op_type for n in result.model.graph] == ["MatMul"]
    gc.collect()
    assert weight() is None


def test_a_caller_s_own_threshold_equal_to_ours_is_not_mistaken_for_a_fold():
    # settled() freezes only inside the fold's own long_lived(), not whenever the young
    # threshold has a value a caller may have chosen too: nothing would unfreeze those objects
    old, frozen = gc.get_threshold(), gc.get_freeze_count()
    gc.set_threshold(YOUNG_THRESHOLD, *old[1:])  # the fold's own threshold
    try:
        with collector.long_lived():
            collector.settled(10**6)
        onnxfold.optimize(_in_memory_model()[0])
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)


def test_automatic_collection_turned_off_by_a_zero_threshold_stays_off():
    old = gc.get_threshold()
    gc.set_threshold(0)
    try:
        with collector.long_lived():
            assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*old)


def test_a_caller_s_frozen_heap_with_a_round_threshold_is_left_alone():
    """A caller with its own frozen heap and a round threshold of 50,000: settled() must not
    take it for the fold's own setting and freeze each fold's model for good; the caller's
    heap and threshold are left as they are."""
    old = gc.get_threshold()
    gc.set_threshold(50_000, *old[1:])
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with long_lived():
            settled(10**6)
            assert gc.get_threshold()[0] == 50_000
        # neither frozen again nor unfrozen; a frozen object freed by reference counting
        # meanwhile lowers the count (772,067 for 772,069 in one full run)
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)
