"""The op groups of ``rules/op_groups.py`` name real ops, and the rules that read them cover
each of their ops."""

from __future__ import annotations

import onnx
import pytest

from onnxfold.declare.catalogue import load_catalogue
from rules import op_groups

GROUPS = {name: getattr(op_groups, name) for name in
          ("SAME_SHAPE", "POINTWISE_UNARY", "BROADCASTING", "MULTIDIRECTIONAL", "POINTWISE",
           "REDUCE_TO_AXES")}


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_every_op_of_a_group_is_an_onnx_op(name):
    assert [op for op in GROUPS[name] if not onnx.defs.has(op)] == []


def test_broadcasting_ops_have_a_size_rule_and_dims():
    catalogue = load_catalogue()
    assert [op for op in op_groups.BROADCASTING if catalogue.size_rule(op) is None] == []
    dims = catalogue.shape_steps.dims
    assert [op for op in op_groups.MULTIDIRECTIONAL if op not in dims] == []
    assert frozenset(op_groups.BROADCASTING) - {"PRelu"} == op_groups.MULTIDIRECTIONAL


def test_same_shape_and_reduction_ops_have_dims():
    dims = load_catalogue().shape_steps.dims
    ops = op_groups.SAME_SHAPE | op_groups.REDUCE_TO_AXES
    assert [op for op in sorted(ops) if op not in dims] == []
