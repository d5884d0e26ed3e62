"""The magnitude of what was summed to make each element (``check/judging/magnitudes.py``) and
the tolerance built on it (issue 67, item 1), on small models in real onnxruntime.

An element of a sum whose terms cancel is only as exact as its terms: two honest evaluations of
``x @ W`` (the weights a few ulps apart, as a fold and onnxruntime round them) differ there by
more than ``1e-4`` of the element, and ``compare`` passes them, saying how many elements only the
magnitude let through. A real error (a weight off by a thousandth, two elements swapped, a bias
dropped) still fails, and so does any difference where ``--rtol``/``--atol`` ask for that
formula alone.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper

import onnxfold
from onnxfold.check.judging.magnitudes import magnitudes
from onnxfold.check.judging.tolerance import SUMMED_UNITS, for_dtype
from onnxfold.check.running.cones import reinferred
from onnxfold.check.running.models import graph_of
from tests.support.models import make_model, tensor, vinfo

F32 = TensorProto.FLOAT
K, N = 256, 64  # terms summed per element, output columns


def _product(w: np.ndarray, b: np.ndarray | None = None):
    """``y = x @ w (+ b)``, x ``[batch, K]`` fed."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p" if b is not None else "y"])]
    inits = [tensor("w", w)]
    if b is not None:
        nodes.append(helper.make_node("Add", ["p", "b"], ["y"]))
        inits.append(tensor("b", b))
    return make_model(nodes, [vinfo("x", F32, ["batch", K])], [vinfo("y", F32, ["batch", N])],
                      inits)


def _weights() -> np.ndarray:
    return np.random.default_rng(67).standard_normal((K, N)).astype(np.float32)


def _rounded_apart(w: np.ndarray, ulps: int = 3) -> np.ndarray:
    """``w`` with each element moved up to ``ulps`` ulps, as another order of rounding leaves
    a computed weight."""
    steps = np.random.default_rng(1).integers(-ulps, ulps + 1, w.shape)
    return (w + steps * np.spacing(w)).astype(np.float32)


def _inputs(scale: float = 1000.0) -> dict[str, np.ndarray]:
    return {"x": (np.random.default_rng(2).standard_normal((256, K)) * scale).astype(np.float32)}


def test_an_element_of_a_cancelling_sum_is_judged_by_its_terms(tmp_path):
    """The outputs near zero of ``x @ W`` with ``x`` of ~1000: the terms sum to ~1e5, a weight
    rounded 3 ulps apart moves them by ~1e-3, ten times rtol/atol there. Passes, counted."""
    w = _weights()
    inputs = tmp_path / "x.npz"
    np.savez(inputs, **_inputs())
    result = onnxfold.compare(_product(w), _product(_rounded_apart(w)), inputs=str(inputs))
    [row] = result.rows
    assert result.ok, result.summary()
    assert row.summed > 0 and row.mismatches == 0, row
    assert row.tolerance == for_dtype(np.dtype(np.float32)).describe()
    assert f"{row.summed} elements beyond rtol/atol, within {SUMMED_UNITS:g}u" in \
        result.summary()
    # rtol/atol given: that formula alone, no magnitude
    given = onnxfold.compare(_product(w), _product(_rounded_apart(w)), inputs=str(inputs),
                             rtol=1e-4, atol=1e-5)
    assert not given.ok and given.rows[0].summed == 0


def test_a_real_error_in_a_cancelling_sum_still_fails(tmp_path):
    """A weight column off by a thousandth, two weights swapped, a bias dropped: each is far
    beyond 64 units of roundoff of the summed terms."""
    w = _weights()
    b = np.random.default_rng(3).uniform(-0.1, 0.1, N).astype(np.float32)
    inputs = tmp_path / "x.npz"
    np.savez(inputs, **_inputs(1.0))
    scaled = w.copy()
    scaled[:, 5] *= np.float32(1.001)
    swapped = w.copy()
    swapped[[0, 1], 7] = swapped[[1, 0], 7]
    for wrong, bias in ((scaled, b), (swapped, b), (w, np.zeros_like(b))):
        result = onnxfold.compare(_product(w, b), _product(wrong, bias), inputs=str(inputs),
                                  verify=False)
        assert not result.ok, result.summary()
        assert result.rows[0].mismatches > 0


def _twins(model, feeds: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
    graph = reinferred(graph_of(model, "m"))
    values = {v.name: v for node in graph.graph for v in node.outputs}
    return magnitudes(graph, [values[n] for n in names], feeds)


def test_twins_follow_the_error_analysis():
    """A product starts from the absolute values it reads (``|x| @ |W|``, not its output's
    magnitude); a difference adds the twins; a quotient carries them to first order; Relu
    and data movement move them; every twin is at least its value's magnitude."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    c = rng.standard_normal(3).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]),
             helper.make_node("Sub", ["p", "c"], ["d"]),
             helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
             helper.make_node("Div", ["d", "c"], ["q"]),
             helper.make_node("Tanh", ["d"], ["h"])]
    model = make_model(nodes, [vinfo("x", F32, [2, 4])], [vinfo("t", F32, [3, 2])],
                       [tensor("w", w), tensor("c", c)])
    x = rng.standard_normal((2, 4)).astype(np.float32)
    p, d, q, h = _twins(model, {"x": x}, ["p", "d", "q", "h"])
    r, t = _twins(model, {"x": x}, ["r", "t"])
    with np.errstate(all="ignore"):
        xp = x.astype(np.float64) @ w
        dv = xp - c
        qv = dv / c
    np.testing.assert_allclose(p, np.maximum(np.abs(x) @ np.abs(w), np.abs(xp)), rtol=1e-6)
    np.testing.assert_allclose(d, p + np.abs(c), rtol=1e-6)
    np.testing.assert_allclose(r, d, rtol=1e-6)
    np.testing.assert_allclose(t, d.T, rtol=1e-6)
    np.testing.assert_allclose(q, (d + np.abs(qv) * np.abs(c)) / np.abs(c), rtol=1e-5)
    np.testing.assert_allclose(h, d + np.abs(np.tanh(dv)), rtol=1e-5)
    assert (p >= np.abs(xp) * (1 - 1e-6)).all() and (q >= np.abs(qv) * (1 - 1e-6)).all()


def test_a_normalization_and_a_second_product_start_anew():
    """A LayerNormalization carries its input's twin over sigma, not its worst case three times
    (a twin carried so through every layer grows exponentially); a second product reads the
    absolute values of its operands, not their twins: the magnitude of a deep model's output
    stays within a few times its value."""
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((16, 16)).astype(np.float32)
    w2 = rng.standard_normal((16, 16)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["p"]),
             helper.make_node("LayerNormalization", ["p", "s"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w2"], ["y"])]
    model = make_model(nodes, [vinfo("x", F32, [4, 16])], [vinfo("y", F32, [4, 16])],
                       [tensor("w1", w1), tensor("w2", w2), tensor("s", np.ones(16, np.float32))])
    x = rng.standard_normal((4, 16)).astype(np.float32)
    p, n, y = _twins(model, {"x": x}, ["p", "n", "y"])
    pv = x.astype(np.float64) @ w1
    mean = pv.mean(-1, keepdims=True)
    sigma = np.sqrt(((pv - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    nv = (pv - mean) / sigma
    np.testing.assert_allclose(n, np.maximum((p + np.abs(mean)) / sigma + np.abs(nv),
                                             np.abs(nv)), rtol=1e-4)
    np.testing.assert_allclose(y, np.maximum(np.abs(nv) @ np.abs(w2), np.abs(nv @ w2)),
                               rtol=1e-4)


def test_an_element_without_a_finite_magnitude_gets_the_dtype_tolerance_alone():
    """``1 / x`` at ``x = 0``: the twin is not finite there; the comparison judges that
    element by rtol/atol (and a model whose twin cannot run is judged the same way)."""
    nodes = [helper.make_node("Reciprocal", ["x"], ["y"])]
    model = make_model(nodes, [vinfo("x", F32, [3])], [vinfo("y", F32, [3])])
    (twin,) = _twins(model, {"x": np.array([0.0, 2.0, -4.0], np.float32)}, ["y"])
    assert not np.isfinite(twin[0]) and np.isfinite(twin[1:]).all()
    graph = reinferred(graph_of(model, "m"))
    assert isinstance(graph.graph.outputs[0].type, ir.TensorType)
