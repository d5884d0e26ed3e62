"""Low-rank branches over runtime constants merged into their base weight (``rules/low_rank.py``):
each form exporters and peft produce, merged model (a Session's) against the unmerged model,
both in onnxruntime, within the documented bound (docs/exactness.md).

The bound, elementwise: ``|y_merged - y| <= (K + R + 4) * u * M`` where ``M`` is the same model
run on the absolute values of every input and weight (what the products sum in magnitude), K
the base product's inner dim (times the kernel's taps for a Conv), R the rank and u the unit
roundoff of the dtype.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from onnxfold.pipeline.options import FoldOptions
from onnxfold.runtime.session import Session
from tests.support import low_rank_models as lr
from tests.support.running import run_ort

BACKENDS = ["ort", "numpy", "mlir"]


def _magnitude(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The model on the absolute values of its weights and feeds: each output element's sum
    of product magnitudes."""
    absolute = onnx.ModelProto()
    absolute.CopyFrom(model)
    for init in absolute.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype.kind == "f":
            init.CopyFrom(numpy_helper.from_array(np.abs(array), init.name))
    magnitudes = {n: np.asarray(np.abs(a)) for n, a in feeds.items()}
    return run_ort(absolute, magnitudes)[0].astype(np.float64)


def _within_bound(case: lr.LowRank, got: np.ndarray, inner: int) -> None:
    want = run_ort(case.model, case.feeds)[0]
    unit = np.finfo(want.dtype).eps / 2
    bound = (inner + lr.R + 4) * unit * _magnitude(case.model, case.feeds)
    excess = np.abs(got.astype(np.float64) - want.astype(np.float64)) - bound
    assert excess.max() <= 0, f"outside the bound by {excess.max()}"
    assert not np.array_equal(got, np.zeros_like(got))


def _merged(case: lr.LowRank, backend: str = "ort", **kwargs) -> tuple[Session, np.ndarray]:
    session = Session(case.model, case.runtime, backend=backend, **kwargs)
    out = session.run(None, case.feeds)[0]
    return session, out


def _entry_ops(session: Session) -> list[str]:
    return [n.op_type for n in session.parts.entry.graph]


@pytest.mark.parametrize("form", sorted(lr.FORMS))
def test_each_form_merges_and_stays_within_the_bound(form):
    case = lr.FORMS[form](np.dtype(np.float32))
    session, out = _merged(case)
    assert session.parts.low_rank.merged == 1, session.parts.low_rank.summary()
    ops = _entry_ops(session)
    layers = [op for op in ops if op in ("MatMul", "Gemm", "Conv")]
    assert len(layers) == 1, ops  # the base product alone: the branch went into its weight
    inner = lr.K if "conv" not in form else 6 * (1 if "1x1" in form else 9)
    _within_bound(case, out, inner)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", ["scale_after", "gemm_base", "conv_adapter", "scale_between"])
def test_every_backend_computes_the_merged_weight(backend, form):
    case = lr.FORMS[form](np.dtype(np.float32))
    session, out = _merged(case, backend)
    assert session.parts.low_rank.merged == 1
    inner = lr.K if "conv" not in form else 6 * 9
    _within_bound(case, out, inner)


def test_float16_is_merged_in_float32_and_rounded_once():
    """The merge's recipe (the runtime fold's graph) computes the branch's product in float32,
    rounds it to float16 once and adds it to the float16 weight: run node by node as written
    (onnx's reference evaluator), it gives ``W + f16(s * A^T B^T in float32)`` bit for bit,
    and the data tells that apart from a product computed in float16 and from a product
    rounded with the sum (a float16 Gemm). Each backend then computes it within the bound
    (onnxruntime's float16 Add of a Cast from float32 drops the Cast pair: the sum rounded
    once, more precise still; test_every_backend_computes_the_merged_weight)."""
    case = lr.scale_after(np.dtype(np.float16))
    scale = np.float16(0.3)  # not a power of two: scaling a rounded product rounds again
    scaling = next(i for i in case.model.graph.initializer if i.name == "scaling")
    scaling.CopyFrom(numpy_helper.from_array(np.array(scale), "scaling"))
    session, out = _merged(case)
    assert session.parts.low_rank.merged == 1
    assert out.dtype == np.float16
    _within_bound(case, out, lr.K)
    weight = next(numpy_helper.to_array(i) for i in case.model.graph.initializer
                  if i.name == "W")
    a16, b16 = case.feeds["lora_A"], case.feeds["lora_B"]
    product = np.float32(scale) * (a16.astype(np.float32).T @ b16.astype(np.float32).T)
    recipe = weight + product.astype(np.float16)  # float16 + float16, as the Add node says
    fold = ir.to_proto(session.parts.runtime_fold)
    constants = {i.name: case.feeds[i.name] for i in fold.graph.input}
    (folded,) = ReferenceEvaluator(fold).run(None, constants)
    np.testing.assert_array_equal(folded, recipe)
    in_half = weight + scale * (a16.T @ b16.T)
    with_the_sum = (weight.astype(np.float32) + product).astype(np.float16)
    assert not np.array_equal(in_half, recipe) and not np.array_equal(with_the_sum, recipe)


def test_a_quantized_base_weight_keeps_its_branch_and_says_why():
    case = lr.quantized_base()
    session, out = _merged(case)
    merges = session.parts.low_rank
    assert merges.merged == 0
    assert any("DequantizeLinear" in why and "requantize" in why for why in merges.kept)
    assert "DequantizeLinear" in merges.summary()
    np.testing.assert_allclose(out, run_ort(case.model, case.feeds)[0], rtol=1e-5, atol=1e-6)


def test_disabling_the_rule_keeps_the_branch():
    case = lr.scale_after()
    options = FoldOptions(disabled_rules={"merge_low_rank_branches"})
    session, out = _merged(case, options=options)
    assert session.parts.low_rank.merged == 0 and not session.parts.low_rank.enabled
    assert _entry_ops(session).count("MatMul") == 3
    np.testing.assert_array_equal(out, run_ort(case.model, case.feeds)[0])


def test_a_new_adapter_gives_the_new_merged_result():
    case = lr.scale_after()
    session, _ = _merged(case)
    other = dict(case.feeds)
    other["lora_B"] = case.feeds["lora_B"] * -3
    out = session.run(None, other)[0]
    _within_bound(lr.LowRank(case.model, other, case.runtime), out, lr.K)


def test_a_branch_of_constants_only_is_left_to_the_fold():
    """Factors that are initializers, over a base of one: no runtime fold's business (the
    fold's results are bitwise; a merge is not), nothing merges."""
    case = lr.scale_after()
    graph = case.model.graph
    for name in ("lora_A", "lora_B"):
        graph.initializer.append(numpy_helper.from_array(case.feeds.pop(name), name))
        graph.input.remove(next(i for i in graph.input if i.name == name))
    extra = lr._Graph(np.dtype(np.float32))
    graph.input.append(onnx.helper.make_tensor_value_info("unused", onnx.TensorProto.FLOAT, [1]))
    case.feeds["unused"] = extra.array((1,))
    session = Session(case.model, ["unused"])
    assert session.parts.low_rank.merged == 0 and not session.parts.low_rank.kept


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_merged_weight_is_within_its_bound(backend):
    """Each merged element within (r + 3) u (|W| + |s| |A| @ |B|) of the exact W + s A B."""
    case = lr.stacked(layers=2, width=64, rank=lr.R)
    session = Session(case.model, case.runtime, backend=backend)
    folded = session.backend.run({**{n: case.feeds[n] for n in session.parts.fold_inputs},
                                  **session._fold_weights})
    graph = session.parts.runtime_fold.graph
    assert [n.op_type for n in graph] == ["Gemm", "Gemm"]
    unit = np.finfo(np.float32).eps / 2

    def array(value) -> np.ndarray:
        if value.name in graph.initializers:
            return graph.initializers[value.name].const_value.numpy()
        return session._fold_weights.get(value.name, case.feeds.get(value.name))

    for node in graph:
        p, q, c = (array(v) for v in node.inputs)
        alpha = node.attributes.get_float("alpha", 1.0)
        a = p.astype(np.float64).T if node.attributes.get_int("transA", 0) else p
        b = q.astype(np.float64).T if node.attributes.get_int("transB", 0) else q
        exact = c.astype(np.float64) + alpha * (np.asarray(a, np.float64) @ b)
        magnitude = np.abs(c) + abs(alpha) * (np.abs(np.asarray(a, np.float64)) @ np.abs(b))
        error = np.abs(folded[node.outputs[0].name] - exact)
        assert (error <= (lr.R + 3) * unit * magnitude).all()


def _non_finite(case: lr.LowRank, seed: int) -> dict[str, np.ndarray]:
    """An adapter of ``case`` holding infinities and a NaN (a diverged training's)."""
    rng = np.random.default_rng(seed)
    adapter = lr.adapter(case, seed)
    for k, array in enumerate(adapter.values()):
        flat = array.reshape(-1)
        flat[rng.integers(flat.size, size=2)] = [np.inf, -np.inf]
        if k == 0 and seed % 2:
            flat[rng.integers(flat.size)] = np.nan
    return adapter


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("form", list(lr.FORMS))
def test_an_adapter_that_is_not_finite_runs_as_onnxruntime_runs_the_model(form, dtype):
    """``W + s A B`` computes NaN where the model, summing ``x W`` and ``s (x A) B``, computes
    an infinity (and another NaN pattern): such an adapter's set runs the model unmerged, its
    constants fed each call, bit for bit onnxruntime's; finite adapters stay merged. Fed in
    the call or set as the adapter."""
    case = lr.FORMS[form](np.dtype(dtype))
    session = Session(case.model, case.runtime)
    inputs = {n: a for n, a in case.feeds.items() if n not in case.runtime}
    for seed in range(4):
        adapter = _non_finite(case, seed)
        want = run_ort(case.model, {**inputs, **adapter})[0]
        assert not np.isfinite(want).all()
        np.testing.assert_array_equal(session.run(None, {**inputs, **adapter})[0], want)
        session.set_adapter(adapter)
        np.testing.assert_array_equal(session.run(None, inputs)[0], want)
    finite = lr.adapter(case, 9)
    merged = session.run(None, {**inputs, **finite})[0]
    np.testing.assert_allclose(merged, run_ort(case.model, {**inputs, **finite})[0],
                               rtol=2e-2, atol=2e-2)
    assert session.fold_seconds > 0  # folded: merged, not run as the model


@pytest.mark.parametrize("form", list(lr.FORMS))
def test_an_adapter_whose_merged_weight_overflows_runs_as_onnxruntime_runs_the_model(form):
    """Finite, but past float32 once multiplied out: ``A B`` overflows where ``(x A) B``,
    with a small ``x``, does not. The merged set gave infinities where onnxruntime fed the
    adapter gives finite outputs; it runs unmerged, as onnxruntime runs the model."""
    case = lr.FORMS[form](np.dtype(np.float32))
    session = Session(case.model, case.runtime)
    inputs = {n: np.full_like(a, 1e-30) for n, a in case.feeds.items() if n not in case.runtime}
    adapter = {n: np.full_like(a, 1e30) if a.ndim > 1 else a  # a scale stays a scale
               for n, a in lr.adapter(case, 0).items()}
    want = run_ort(case.model, {**inputs, **adapter})[0]
    assert np.isfinite(want).all()
    np.testing.assert_array_equal(session.run(None, {**inputs, **adapter})[0], want)

