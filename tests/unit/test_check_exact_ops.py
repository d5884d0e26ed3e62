"""The check's own list of ops it holds to bits (``check/judging/exact_ops.py``; issue 63,
items 3 and 4): a value made only by a ``Constant``, data movement or exact arithmetic is
bitwise or it differs, and no op fact of the rules decides it."""

from __future__ import annotations

import inspect

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

import onnxfold
from onnxfold.check.compare import compare_models
from onnxfold.check.folds.verification import verify_folds
from onnxfold.check.judging import exact_ops
from tests.support.models import make_model, tensor, vinfo
from tests.unit import test_op_facts as facts

F32 = TensorProto.FLOAT


def _constant_model() -> onnx.ModelProto:
    """A ``Constant`` reshaped and added to the input: the fold makes one initializer of the
    Constant's values, where nothing is computed."""
    values = np.linspace(-1.0, 1.0, 12, dtype=np.float32)
    nodes = [helper.make_node("Constant", [], ["c"],
                              value=onnx.numpy_helper.from_array(values, "c")),
             helper.make_node("Constant", [], ["shape"], value=onnx.numpy_helper.from_array(
                 np.array([3, 4], np.int64), "shape")),
             helper.make_node("Reshape", ["c", "shape"], ["r"]),
             helper.make_node("Add", ["x", "r"], ["y"])]
    return make_model(nodes, [vinfo("x", F32, ["n", 4])], [vinfo("y", F32, ["n", 4])], [])


def _nudged(path, out, ulps: int) -> None:
    """The optimized model at ``path`` with its folded float tensor moved by ``ulps`` in its
    first element and no record of how it was made (a file whose records were stripped, or
    another tool's), written to ``out``."""
    model = onnx.load(str(path))
    for t in model.graph.initializer:
        if t.data_type == F32:
            array = onnx.numpy_helper.to_array(t).copy()
            array.reshape(-1).view(np.int32)[0] += ulps
            t.CopyFrom(onnx.numpy_helper.from_array(array, t.name))
    onnx.save(model, str(out))


def test_a_constant_one_ulp_off_differs(tmp_path):
    """Issue 63, item 3: a folded Constant written 1 ulp off, without onnxfold's records, was
    'within 1 ulps (not bitwise ops)' in verify-folds and compare: nothing computed it (the
    check's own list holds Constant and Reshape exact), so any difference is a wrong value."""
    path, out, nudged = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "n.onnx"
    onnx.save(_constant_model(), path)
    result = onnxfold.optimize(str(path))
    result.save(str(out))
    clean = verify_folds(str(path), str(out))
    assert [t.state for t in clean.tensors] == ["bitwise"], clean
    _nudged(out, nudged, 1)
    verdicts = verify_folds(str(path), str(nudged))
    assert [t.state for t in verdicts.tensors] == ["differs"], verdicts
    compared = onnxfold.compare(str(path), str(nudged), n=1)
    assert not compared.ok, compared.summary()


def _scaled_weight_model() -> onnx.ModelProto:
    """A weight doubled and added to the input: the fold makes one initializer by an exact
    product."""
    nodes = [helper.make_node("Mul", ["w", "two"], ["r"]),
             helper.make_node("Add", ["x", "r"], ["y"])]
    return make_model(nodes, [vinfo("x", F32, ["n", 4])], [vinfo("y", F32, ["n", 4])], [
        tensor("w", np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)),
        tensor("two", np.array(2.0, np.float32))])


def test_the_rules_facts_decide_nothing_of_the_verdicts(tmp_path):
    """The check reads none of the rules' facts: it takes no catalogue at all (what a run's
    rewrites may round differently, each record says itself), and a fold 1 ulp off differs
    (a product of two floats is correctly rounded)."""
    path, out, nudged = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "n.onnx"
    onnx.save(_scaled_weight_model(), path)
    onnxfold.optimize(str(path)).save(str(out))
    _nudged(out, nudged, 1)
    result = onnxfold.compare(str(path), str(nudged))
    assert [t.state for t in result.folds.tensors] == ["differs"]
    for entry in (onnxfold.compare, compare_models, verify_folds):
        assert "catalogue" not in inspect.signature(entry).parameters, entry


def _node(op: str, **attrs) -> ir.Node:
    return ir.Node("", op, [], attributes=[ir.convenience.convert_attribute(k, v)
                                           for k, v in attrs.items()])


def test_casts_with_modes_of_their_own_and_sums_are_not_exact():
    assert exact_ops.exact(_node("Cast", to=int(ir.DataType.FLOAT16)))
    assert not exact_ops.exact(_node("Cast", to=int(ir.DataType.BFLOAT16)))
    assert not exact_ops.exact(_node("Cast", to=int(ir.DataType.FLOAT8E4M3FN)))
    assert not exact_ops.exact(helper.make_node("Cast", ["a"], ["b"], to=TensorProto.BFLOAT16))
    assert exact_ops.exact(helper.make_node("Cast", ["a"], ["b"], to=TensorProto.FLOAT))
    for op in ("MatMul", "ReduceSum", "Exp", "Pow", "LayerNormalization", "Softmax"):
        assert not exact_ops.exact(_node(op)), op
    assert exact_ops.order_varies(_node("BatchNormalization", training_mode=1))
    assert not exact_ops.order_varies(_node("BatchNormalization"))
    assert not exact_ops.exact(ir.Node("com.microsoft", "Add", []))


EXACT_WITH_CASES = sorted(op for _, op in exact_ops.EXACT if op in facts.cases())


@pytest.mark.parametrize("op", EXACT_WITH_CASES)
def test_an_exact_op_gives_the_same_bits_at_every_alignment(op):
    """onnxruntime's kernel for each exact op gives the same bits fed aligned and not (a
    kernel whose order of summation follows its input's memory is not exact), and those of
    numpy's folder where the rules have one (``tests/unit/test_op_facts.py``)."""
    ran = 0
    for k, case in enumerate(facts.cases()[op]):
        inputs = case.inputs(np.random.default_rng(63 + k))
        sess = facts._session(case, op, inputs)
        if sess is None:
            continue
        runs = facts._runs(sess, inputs, [])
        for other in runs[1:]:
            for a, b in zip(runs[0], other):
                facts.assert_same(a, b)
        ran += 1
    assert ran, op


def test_every_exact_op_has_cases_or_computes_nothing():
    """Each exact op is run above, or computes nothing (a Constant, a shape)."""
    computes_nothing = {"Constant", "Shape", "Size", "DepthToSpace", "SpaceToDepth",
                        "ReverseSequence", "Unique", "Dropout"}
    missing = {op for _, op in exact_ops.EXACT} - set(EXACT_WITH_CASES) - computes_nothing
    assert not missing, missing
