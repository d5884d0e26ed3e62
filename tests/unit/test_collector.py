"""onnxfold.collector: the collector's settings during a fold, and nothing left changed after."""

from __future__ import annotations

import gc

import numpy as np
from onnx import helper

import onnxfold
from onnxfold.collector import YOUNG_THRESHOLD, long_lived, settled
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
    try:
        onnxfold.optimize(b"not a model")
    except onnxfold.InputError:
        pass
    assert gc.get_threshold() == before


def test_a_caller_s_own_frozen_objects_stay_frozen():
    gc.freeze()
    try:
        frozen, before = gc.get_freeze_count(), gc.get_threshold()
        with long_lived():
            assert gc.get_threshold() == before  # the caller manages the collector: hands off
            settled(10**6)
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_a_small_model_is_frozen_only_when_the_process_exits():
    """Freezing costs a full collection at the end: for a small model it is not worth it,
    unless the process exits right after (the onnxfold executable) and skips that collection."""
    from onnxfold.collector import FREEZE_MIN_NODES

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
