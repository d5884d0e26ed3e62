"""The comparison of two models' outputs as a function of their runs' results
(``check.outputs.differences.compared_outputs``): no session, no model, only arrays."""

import numpy as np

from onnxfold.check.outputs.differences import compared_outputs


def test_rows_follow_every_run_and_count_what_is_outside_the_tolerance():
    a1, b1 = np.array([1.0, 2.0], np.float32), np.array([1.0, 2.0], np.float32)
    a2, b2 = np.array([1.0, 3.0], np.float32), np.array([1.0, 2.0], np.float32)
    i1 = np.array([4, 5], np.int64)
    rows, maps = compared_outputs(["y", "i"], [([a1, i1], [b1, i1]), ([a2, i1], [b2, i1])],
                                  None, None)
    assert maps == set()
    y, i = rows["y"], rows["i"]
    assert (y.dtype_a, y.shape_a, y.elements) == ("float32", [2], 4)
    assert y.mismatches == 1 and y.max_abs_diff == 1.0
    assert i.mismatches == 0 and i.max_abs_diff == 0.0 and i.elements == 4


def test_a_shape_or_dtype_that_differs_is_a_row_that_says_so():
    rows, _ = compared_outputs(["y"], [([np.zeros((2, 3), np.float32)],
                                        [np.zeros((3, 2), np.float16)])], None, None)
    row = rows["y"]
    assert row.shape_a == [2, 3] and row.shape_b == [3, 2]
    assert row.dtype_a == "float32" and row.dtype_b == "float16"
    assert not row.shapes_equal and not row.dtypes_equal


def test_a_sequence_of_maps_is_compared_as_its_values():
    a = [{1: 0.5, 2: 0.25}, {1: 0.125, 2: 1.0}]
    b = [{1: 0.5, 2: 0.25}, {1: 0.125, 2: 2.0}]
    rows, maps = compared_outputs(["probs"], [([a], [b])], 0.0, 0.0)
    assert maps == {"probs"}
    assert rows["probs"].mismatches == 1 and rows["probs"].max_abs_diff == 1.0
