"""A check that failed only on its outputs, onnxfold's folds and rewrites exact, says on its
one line what rounded and the flag that compares without it: the rewrites validated within
tolerance but not bit for bit (``--disable-rule R``); with ``--rtol 0 --atol 0`` and every
fold and rewrite bitwise, onnxruntime's own optimizations meeting two graphs
(``--ort-level basic``), and ``--disable-rule merge_shared_input_matmuls`` where Q/K/V
products were merged. Nothing is suggested where a fold or rewrite differs: that is a bug to
see, not a rounding to explain. The results are real comparisons of two models that differ by
one rounding, with the rewrite validation a run would have attached."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxfold
from onnxfold.app.failure_line import rounding_hint
from onnxfold.check.rewrites.validation import RewriteValidation, rewrite_verdict


def _model(path, factors):
    """y = x * factors[0] * factors[1] ..., x float32 [4]."""
    nodes = [helper.make_node("Mul", ["x" if i == 0 else f"v{i - 1}", f"c{i}"], [f"v{i}"])
             for i in range(len(factors))]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(f"v{len(factors) - 1}", TensorProto.FLOAT, [4])],
        [helper.make_tensor(f"c{i}", TensorProto.FLOAT, [], [f]) for i, f in enumerate(factors)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    return str(path)


@pytest.fixture(scope="module")
def rounded(tmp_path_factory):
    """A comparison of x * 0.1 * 10 against x * 1.0, exact tolerances: not bitwise."""
    tmp = tmp_path_factory.mktemp("hint")
    a = _model(tmp / "a.onnx", [0.1, 10.0])
    b = _model(tmp / "b.onnx", [1.0, 1.0])
    inputs = {"x": np.array([0.7, 1.3, 3.3, 9.1], np.float32)}
    result = onnxfold.compare(a, b, inputs=inputs, rtol=0, atol=0, verify=False)
    assert not result.ok and not result.failure  # the outputs differ by a rounding
    return result


def _with(result, *verdicts):
    return dataclasses.replace(result, rewrites=RewriteValidation(list(verdicts), 1))


def test_a_rewrite_within_tolerance_is_named_with_its_flag(rounded):
    hint = rounding_hint(_with(rounded, rewrite_verdict("merge_shared_input_matmuls", "mm",
                                                       "within"),
                               rewrite_verdict("drop_noop", "r", "bitwise")))
    assert hint == ("; these rewrites round apart from the original (their sums in another "
                    "order): --disable-rule merge_shared_input_matmuls")


def test_every_change_bitwise_points_to_onnxruntimes_level_and_the_merged_products(rounded):
    hint = rounding_hint(_with(rounded, rewrite_verdict("merge_shared_input_matmuls", "mm",
                                                       "bitwise")))
    assert "onnxruntime's optimizations at level all round the two graphs apart " \
        "(--ort-level basic compares without its fusions)" in hint
    assert hint.endswith("; --disable-rule merge_shared_input_matmuls keeps the Q/K/V products "
                         "as exported")
    assert "merge_shared" not in rounding_hint(_with(rounded, rewrite_verdict("drop_noop", "r",
                                                                             "bitwise")))


def test_nothing_is_suggested_for_a_bug_or_a_loose_tolerance(rounded):
    assert rounding_hint(_with(rounded, rewrite_verdict("drop_noop", "r", "differs"))) == ""
    assert rounding_hint(rounded) == ""  # no rewrite recorded: compare, not optimize --check
    loose = dataclasses.replace(rounded, rtol=1e-9)
    assert rounding_hint(_with(loose, rewrite_verdict("drop_noop", "r", "bitwise"))) == ""
    basic = dataclasses.replace(rounded, level="basic")
    assert rounding_hint(_with(basic, rewrite_verdict("drop_noop", "r", "bitwise"))) == ""
