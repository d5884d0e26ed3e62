"""MatMuls sharing their input merge into one MatMul and a Split (``rules/
shared_input_matmuls.py``): the folded model has fewer nodes, no more weight bytes, and gives
onnxruntime's outputs of the original bit for bit, at every batch size tried; every refusal
keeps the original products."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnxfold import FoldOptions, compare, optimize
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import assert_same_bits

RULE = "merge_shared_input_matmuls"
K = 48  # the inner dim
ELEM = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def _products(columns, *, biased=(), x_shape=("batch", 7, K), dtype=np.float32, opset=17,
              extra_reader=None, inner=K):
    """x times one weight per entry of ``columns`` (each a graph output ``y<i>``); the
    products whose index is in ``biased`` add their own bias; ``extra_reader``: the index of
    a weight a Gather also reads (an embedding tied to a projection)."""
    rng = np.random.default_rng(0)
    elem = ELEM[dtype]
    nodes, inits, outputs = [], [], []
    for i, n in enumerate(columns):
        inits.append(tensor(f"w{i}", rng.standard_normal((inner, n)).astype(dtype)))
        product = f"y{i}" if i not in biased else f"p{i}"
        nodes.append(helper.make_node("MatMul", ["x", f"w{i}"], [product], name=f"mm{i}"))
        if i in biased:
            inits.append(tensor(f"b{i}", rng.standard_normal(n).astype(dtype)))
            nodes.append(helper.make_node("Add", [product, f"b{i}"], [f"y{i}"]))
        outputs.append(vinfo(f"y{i}", elem, [None] * len(x_shape)))
    inputs = [vinfo("x", elem, list(x_shape))]
    if extra_reader is not None:
        inputs.append(vinfo("ids", TensorProto.INT64, [3]))
        nodes.append(helper.make_node("Gather", [f"w{extra_reader}", "ids"], ["rows"]))
        outputs.append(vinfo("rows", elem, [3, None]))
    return make_model(nodes, inputs, outputs, inits, opset=opset)


def _feeds(model, batch, dtype=np.float32):
    rng = np.random.default_rng(batch)
    shape = [batch if isinstance(d.dim_param, str) and d.dim_param else d.dim_value
             for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": rng.standard_normal(shape).astype(dtype)}
    if len(model.graph.input) > 1:
        feeds["ids"] = np.array([0, 5, 2], np.int64)
    return feeds


def _folded(model, **options):
    result = optimize(model, FoldOptions(strict=True, **options))
    return result, result.to_proto()


def _ops(model):
    return Counter(n.op_type for n in model.graph.node)


def _weight_bytes(model):
    return sum(np.prod(t.dims) * (2 if t.data_type == TensorProto.FLOAT16 else 4)
               for t in model.graph.initializer if t.data_type != TensorProto.INT64)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("columns", [(32, 32, 32), (40, 8, 72), (16,) * 12])
def test_products_of_one_input_become_one_matmul_and_a_split(columns, dtype):
    original = _products(columns, dtype=dtype)
    result, folded = _folded(original)
    assert result.report.pattern_hits.get(RULE) == 1
    assert _ops(folded) == {"MatMul": 1, "Split": 1}
    assert [o.name for o in folded.graph.output] == [o.name for o in original.graph.output]
    assert _weight_bytes(folded) == _weight_bytes(original)
    for batch in (1, 5):  # one row (a decode step) and several
        assert_same_bits(original, folded, _feeds(original, batch, dtype))


def test_biased_products_merge_their_biases():
    original = _products((32, 24), biased=(0, 1))
    result, folded = _folded(original)
    assert result.report.pattern_hits.get(RULE) == 1
    assert _ops(folded) == {"MatMul": 1, "Add": 1, "Split": 1}
    for batch in (1, 4):
        assert_same_bits(original, folded, _feeds(original, batch))


def test_biased_products_of_a_2d_input_become_one_gemm():
    original = _products((32, 32, 32), biased=(0, 1, 2), x_shape=("rows", K))
    result, folded = _folded(original)
    assert result.report.pattern_hits.get(RULE) == 1
    assert _ops(folded) == {"Gemm": 1, "Split": 1}
    for rows in (1, 6):
        feeds = _feeds(original, rows)
        assert_same_bits(original, folded, feeds)


def test_a_2d_input_with_some_biases_is_left_to_the_gemm_fusion():
    original = _products((32, 32, 32), biased=(0, 1), x_shape=("rows", K))
    result, folded = _folded(original)
    assert RULE not in result.report.pattern_hits
    assert _ops(folded) == {"Gemm": 2, "MatMul": 1}  # merged: MatMul, Split and two Adds


def test_two_unbiased_products_stay():
    original = _products((32, 32))
    result, folded = _folded(original)
    assert RULE not in result.report.pattern_hits
    assert _ops(folded) == {"MatMul": 2}


def test_a_weight_read_elsewhere_is_not_copied_into_a_merge():
    """The tied weight stays one tensor: its MatMul stays, the other three merge."""
    original = _products((32, 32, 32, 32), extra_reader=0)
    result, folded = _folded(original)
    assert result.report.pattern_hits.get(RULE) == 1
    assert _ops(folded) == {"MatMul": 2, "Split": 1, "Gather": 1}
    assert _weight_bytes(folded) == _weight_bytes(original)
    assert_same_bits(original, folded, _feeds(original, 3))


def test_kept_products_are_not_merged():
    original = _products((32, 32, 32))
    result, folded = _folded(original, keep=("mm1",))
    assert RULE not in result.report.pattern_hits
    assert _ops(folded) == {"MatMul": 3}


def test_a_kept_sibling_refuses_the_merge_with_the_drivers_reason():
    """Four products, one kept: the driver refuses the merge that would take it (the rule
    no longer leaves kept siblings out itself: a merge of the other three was made before)."""
    original = _products((32, 32, 32, 32))
    result, folded = _folded(original, keep=("mm2",))
    assert RULE not in result.report.pattern_hits
    assert _ops(folded) == {"MatMul": 4}
    assert f"{RULE}: it would remove a MatMul --keep keeps" in result.report.patterns_rejected


def test_before_opset_13_the_split_sizes_are_an_attribute():
    original = _products((32, 16, 8), opset=11)
    result, folded = _folded(original)
    assert result.report.pattern_hits.get(RULE) == 1
    split = next(n for n in folded.graph.node if n.op_type == "Split")
    assert [a.name for a in split.attribute] == ["axis", "split"] and len(split.input) == 1
    assert_same_bits(original, folded, _feeds(original, 2))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_the_merge_is_bitwise_where_deployed_and_within_tolerance_without_optimizations(dtype):
    """At onnxruntime's default level (how compare and --check run, and how models are
    deployed) the merged product gives the original's bits; with graph optimizations off a
    float16 product (computed through float32 there) may round apart, and compare accepts it."""
    original = _products((64, 64, 64), biased=(0, 1, 2), dtype=dtype, x_shape=("batch", 7, 512),
                         inner=512)
    _, folded = _folded(original)
    assert _ops(folded) == {"MatMul": 1, "Add": 1, "Split": 1}
    for batch in (1, 6):
        result = compare(original, folded, dims={"batch": batch})
        assert result.ok and all(row.bitwise_equal for row in result.rows), result
        assert compare(original, folded, dims={"batch": batch}, level="disable").ok


def _transposed_products(count, *, tied=False):
    """Dynamo's form: x times Transpose(W_i) of [n, K] initializers, each Transpose right
    before its MatMul (so a later weight is computed after the first product); ``tied``: a
    Gather reads the last W too."""
    rng = np.random.default_rng(0)
    nodes, inits, outputs = [], [], []
    for i in range(count):
        inits.append(tensor(f"W{i}", rng.standard_normal((32, K)).astype(np.float32)))
        nodes += [helper.make_node("Transpose", [f"W{i}"], [f"wt{i}"], perm=[1, 0]),
                  helper.make_node("MatMul", ["x", f"wt{i}"], [f"y{i}"])]
        outputs.append(vinfo(f"y{i}", TensorProto.FLOAT, [None, None, None]))
    inputs = [vinfo("x", TensorProto.FLOAT, ["batch", 7, K])]
    if tied:
        inputs.append(vinfo("ids", TensorProto.INT64, [3]))
        nodes.append(helper.make_node("Gather", [f"W{count - 1}", "ids"], ["rows"]))
        outputs.append(vinfo("rows", TensorProto.FLOAT, [3, K]))
    return make_model(nodes, inputs, outputs, inits)


def test_weights_transposed_from_their_own_initializers_merge_in_the_first_round():
    original = _transposed_products(3)
    result, folded = _folded(original)
    assert result.report.pattern_hits.get(RULE) == 1
    assert result.report.rounds == 1  # merged before the fold: no round more to fold the merge
    assert _ops(folded) == {"MatMul": 1, "Split": 1}
    assert _weight_bytes(folded) == _weight_bytes(original)
    for batch in (1, 4):
        assert_same_bits(original, folded, _feeds(original, batch))


def test_a_transposed_weight_whose_initializer_is_read_elsewhere_stays_apart():
    original = _transposed_products(4, tied=True)
    result, folded = _folded(original)
    assert result.report.pattern_hits.get(RULE) == 1
    assert _ops(folded) == {"MatMul": 2, "Split": 1, "Gather": 1, "Transpose": 1}
    assert_same_bits(original, folded, _feeds(original, 2))


def test_weights_computed_by_kept_nodes_are_not_merged():
    """A kept Transpose does not fold: merging its output would leave a Concat of weights to
    run on every call."""
    original = _transposed_products(3)
    result, folded = _folded(original, keep=("Transpose",))
    assert RULE not in result.report.pattern_hits
    assert _ops(folded) == {"Transpose": 3, "MatMul": 3}
