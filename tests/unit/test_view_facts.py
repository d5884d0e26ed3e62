"""Every op the catalogue says folds to a view of its input (``view`` op facts, which exempt
its node from the pool budget) does so, for the inputs exporters give it: a fact that is not
true would let a copy the size of a weight past the budget."""

from __future__ import annotations

import numpy as np
import pytest

from onnxfold.declare.catalogue import load_catalogue

CATALOGUE = load_catalogue()
X = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
# (op, opset, extra inputs, attributes): the forms exporters write
CASES = {
    "Transpose": [(13, (), {}), (13, (), {"perm": [0, 2, 1, 3]}), (13, (), {"perm": [3, 2, 1, 0]})],
    "Reshape": [(14, (np.array([6, 20]),), {}), (14, (np.array([0, -1]),), {}),
                (14, (np.array([2, 3, 20]),), {"allowzero": 1})],
    "Squeeze": [(13, (np.array([0]),), {})],
    "Unsqueeze": [(13, (np.array([0, 5]),), {})],
    "Flatten": [(13, (), {"axis": 2}), (13, (), {"axis": 0})],
    "Identity": [(16, (), {})],
}


def test_every_view_op_is_tested():
    assert CATALOGUE.views == set(CASES)


@pytest.mark.parametrize("op", sorted(CASES))
def test_the_folder_returns_a_view_of_a_c_ordered_input(op):
    for opset, extra, attributes in CASES[op]:
        rule = CATALOGUE.folder("", op, opset)
        assert rule is not None, op
        x = X[:1] if op == "Squeeze" else X
        out = np.asarray(rule.fn(x, *extra, **attributes))
        assert np.shares_memory(out, x), (op, extra, attributes)
