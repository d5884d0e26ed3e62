"""A Concat of weights' views is never built in the pool (``onnxfold.ir.blocks``): the fold
holds no memory for it, a pool budget smaller than it refuses nothing, and the writer builds
it a block of rows at a time into exactly the bytes ``np.concatenate`` gives."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnxfold
from onnxfold.fold.evaluate import UNBUILT_FROM
from onnxfold.ir.blocks import Concatenated
from tests.support.models import make_model, vinfo

ROWS, COLS = 512, 768  # float32: 1.5 MiB per weight, over UNBUILT_FROM


def _pieces(rng, shapes, transposed):
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    return [a.T if transposed else a for a in arrays]


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("transposed", [False, True])
def test_blocks_and_rows_are_the_concatenation(axis, transposed):
    rng = np.random.default_rng(0)
    shapes = [(7, 5), (7, 3), (7, 9)] if axis == 1 and not transposed else \
        [(5, 7), (3, 7), (9, 7)] if transposed and axis == 1 else \
        [(4, 6), (2, 6), (5, 6)] if not transposed else [(6, 4), (6, 2), (6, 5)]
    pieces = _pieces(rng, shapes, transposed)
    whole = np.concatenate(pieces, axis=axis)
    lazy = Concatenated(pieces, axis)
    assert lazy.shape == whole.shape and lazy.nbytes == whole.nbytes and len(lazy) == len(whole)
    assert np.array_equal(np.asarray(lazy), whole)
    assert lazy.tobytes() == whole.tobytes()
    for start, stop in [(0, 1), (1, 4), (2, len(whole)), (3, 3), (0, len(whole))]:
        block = lazy.rows(start, stop)
        assert np.array_equal(block.block(), whole[start:stop]), (start, stop)
    positions = np.array([0, 5, whole.size // 2, whole.size - 1])
    assert np.array_equal(lazy.take_flat(positions), whole.reshape(-1)[positions])


def test_a_mismatched_piece_is_refused():
    with pytest.raises(ValueError):
        Concatenated([np.zeros((2, 2), np.float32), np.zeros((2, 2), np.float16)], 0)
    with pytest.raises(ValueError):
        Concatenated([np.zeros((2, 2), np.float32)], 2)


def _merged_model(path, rows=ROWS, cols=COLS):
    """y = x @ Concat(Transpose(A), Transpose(B)) with A, B [rows, cols] float32 in external
    data (the merged projections' form)."""
    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array(rng.standard_normal((rows, cols)).astype(np.float32),
                                       name) for name in ("A", "B")]
    nodes = [helper.make_node("Transpose", ["A"], ["At"], perm=[1, 0]),
             helper.make_node("Transpose", ["B"], ["Bt"], perm=[1, 0]),
             helper.make_node("Concat", ["At", "Bt"], ["W"], axis=1),
             helper.make_node("MatMul", ["x", "W"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[1, cols])], [vinfo("y", shape=[1, 2 * rows])],
                       weights)
    onnx.save_model(model, str(path), save_as_external_data=True, location="m.data",
                    size_threshold=0)
    return path


def test_a_concat_of_weight_views_holds_no_pool_memory_and_writes_the_same_bytes(tmp_path):
    source = _merged_model(tmp_path / "m.onnx")
    result = onnxfold.optimize(str(source))
    (merged,) = [v for v in result.model.graph.initializers.values()
                 if v.const_value is not None and tuple(v.const_value.shape) == (COLS, 2 * ROWS)]
    assert isinstance(merged.const_value.raw, Concatenated)  # type: ignore[union-attr]
    assert result.report.pool_peak_bytes == 0
    out = tmp_path / "out.onnx"
    result.save(str(out))
    written = onnx.load(str(out))
    (tensor,) = [t for t in written.graph.initializer if t.name == merged.name]
    original = onnx.load(str(source))
    a, b = (numpy_helper.to_array(t) for t in original.graph.initializer)
    assert numpy_helper.to_array(tensor).tobytes() == np.concatenate([a.T, b.T], 1).tobytes()


def test_a_pool_budget_smaller_than_the_weights_folds_the_same(tmp_path):
    """Views and unbuilt concatenations need no room in the budget: a 64 KiB budget, far
    below one 1.5 MiB weight, folds every Transpose and the Concat as no budget does."""
    source = _merged_model(tmp_path / "m.onnx")
    free = onnxfold.optimize(str(source))
    tight = onnxfold.optimize(str(source), pool_budget=64 << 10)
    assert tight.report.nodes_after == free.report.nodes_after == 1
    assert not tight.report.declined


def test_a_small_concat_is_built(tmp_path):
    """Below UNBUILT_FROM a concatenation is built as before (nothing to save)."""
    rows = 8
    assert 2 * rows * COLS * 4 < UNBUILT_FROM
    result = onnxfold.optimize(str(_merged_model(tmp_path / "m.onnx", rows=rows)))
    raws = [v.const_value.raw for v in result.model.graph.initializers.values()
            if v.const_value is not None and hasattr(v.const_value, "raw")]
    assert raws and not any(isinstance(r, Concatenated) for r in raws)


def test_the_dedupe_samples_an_unbuilt_concatenation_without_building_it():
    """Its sampled digest is the built array's (so equal merged weights still dedupe) and
    reads 64 elements, not the pieces whole."""
    import onnx_ir as ir

    from onnxfold.pipeline.cleanups import _ResidentBound, _sample_digest

    rng = np.random.default_rng(3)
    pieces = _pieces(rng, [(40, 30), (20, 30)], transposed=True)
    lazy = Concatenated(pieces, 1)
    built = np.asarray(lazy)
    as_lazy = ir.Tensor(lazy, ir.DataType.FLOAT)
    as_built = ir.Tensor(built)
    assert _sample_digest(as_lazy, _ResidentBound()) == _sample_digest(as_built, _ResidentBound())
    calls = []
    lazy.block = lambda out=None: calls.append(out) or built  # type: ignore[method-assign]
    _sample_digest(as_lazy, _ResidentBound())
    assert not calls


@pytest.mark.parametrize("inner, outer", [(0, 1), (1, 0)])
def test_a_concat_of_a_concat_along_another_axis_is_written(tmp_path, inner, outer):
    """A Concat of an unbuilt concatenation along another axis (its rows are not the
    pieces' rows) is built by the fold: saved, it is np.concatenate's bytes (it stopped the
    save: 'Concatenated' object is not subscriptable, an internal error)."""
    rng = np.random.default_rng(4)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in
               ((ROWS, COLS), (ROWS, COLS), (ROWS, 2 * COLS) if inner == 0 else (2 * ROWS, COLS)))
    nodes = [helper.make_node("Transpose", [n], [n + "t"]) for n in ("A", "B", "C")] + [
        helper.make_node("Concat", ["At", "Bt"], ["AB"], axis=inner),
        helper.make_node("Concat", ["AB", "Ct"], ["W"], axis=outer),
        helper.make_node("MatMul", ["x", "W"], ["y"])]
    want = np.concatenate([np.concatenate([a.T, b.T], inner), c.T], outer)
    model = make_model(nodes, [vinfo("x", shape=[1, want.shape[0]])],
                       [vinfo("y", shape=[1, want.shape[1]])],
                       [numpy_helper.from_array(t, n) for t, n in ((a, "A"), (b, "B"), (c, "C"))])
    source = tmp_path / "m.onnx"
    onnx.save_model(model, str(source), save_as_external_data=True, location="m.data",
                    size_threshold=0)
    result = onnxfold.optimize(str(source))
    assert result.report.nodes_after == 1
    out = tmp_path / "out.onnx"
    result.save(str(out))
    (tensor,) = onnx.load(str(out)).graph.initializer
    assert numpy_helper.to_array(tensor).tobytes() == want.tobytes()
    (proto,) = result.to_proto().graph.initializer
    assert numpy_helper.to_array(proto).tobytes() == want.tobytes()
