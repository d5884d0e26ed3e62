"""Where the check's runs of the original read its weights. A run whose bits may depend on
where a weight starts (nodes that compute, run for the original's bits) gets a copy read with
``pread`` into memory starting at 64 bytes, as a session holds a weight; a run whose bits
cannot (nodes that only move data; values both windows read alike) reads the weight where it
lies in the file, through its mapping (no copy: BERT-base's fold verification read 340 MB of
weights for its transposes). An input truncated during such a run is a bus error, as for the
fold's own kernels and onnxruntime's mappings (docs/trust.md; the command line's one line:
tests/cli/test_checked_save_writes_once.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.check import compare as compare_module
from onnxfold.check.compare import compare_models
from onnxfold.check.running import runner
from onnxfold.check.running.handed import ALIGNED
from onnxfold.check.running.options import CompareOptions
from onnxfold.io.mapped import input_origin


def _fed_to_runs(monkeypatch) -> list[tuple[bool, bool, list[np.ndarray]]]:
    """Each run of the original's nodes the check makes: whether it prepacks, whether it
    feeds arrays aligned, and the arrays it is given (fed, and handed as initializers)."""
    seen: list[tuple[bool, bool, list[np.ndarray]]] = []
    real = runner.NodesModel.run

    def recorded(self, inputs, libraries=(), session=None, aligned=True):
        arrays = [a for a in [*inputs.values(), *self.constant_feeds.values(),
                              *self.handed.values()] if isinstance(a, np.ndarray)]
        seen.append((self.prepacking, aligned, arrays))
        return real(self, inputs, libraries, session, aligned)

    monkeypatch.setattr(runner.NodesModel, "run", recorded)
    return seen


def _checked(source, tmp_path):
    out = tmp_path / "o.onnx"
    result = onnxfold.optimize(str(source), record_rewrites=True)
    result.save(str(out))
    return compare_models(str(source), str(out), 1, CompareOptions(), evidence=result.evidence)


def _model(directory, offset: int, scaled: bool):
    """y = x @ Transpose(W) (* 2 where ``scaled``), W [256, 512] random float32 at ``offset``
    in a file of external data: the fold stores Transpose(W) (* 2)."""
    w = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)
    (directory / "m.onnx.data").write_bytes(b"\0" * offset + w.tobytes())
    weight = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[256, 512],
                         data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "m.onnx.data"), ("offset", str(offset)),
                       ("length", str(w.nbytes))):
        weight.external_data.add(key=key, value=value)
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [helper.make_node("Transpose", ["W"], ["wt"]),
             helper.make_node("Mul", ["wt", "two"], ["w2"]),
             helper.make_node("MatMul", ["x", "w2" if scaled else "wt"], ["y"])]
    onnx.save(helper.make_model(helper.make_graph(
        nodes if scaled else [nodes[0], nodes[2]], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
        [weight, two] if scaled else [weight]),
        opset_imports=[helper.make_opsetid("", 17)]), directory / "m.onnx")
    return directory / "m.onnx"


def test_a_run_that_computes_from_a_weight_reads_a_copy_that_starts_at_64_bytes(
        tmp_path, monkeypatch):
    """W at the start of its file (a view of it would start at 64 bytes, and be handed over
    as it is): the fold of Transpose(W) * 2 is re-derived from a copy of W, never from the
    file's mapping."""
    seen = _fed_to_runs(monkeypatch)
    checked = _checked(_model(tmp_path, 0, scaled=True), tmp_path)
    assert checked.ok and checked.folds is not None and checked.folds.tensors
    computing = [arrays for prepacking, _, arrays in seen if prepacking]
    assert any(a.shape == (256, 512) for arrays in computing for a in arrays), seen
    for arrays in computing:
        assert not [a.shape for a in arrays if input_origin(a) is not None]
        assert not [a.shape for a in arrays if a.ctypes.data % ALIGNED]


def test_a_run_that_only_moves_a_weight_reads_it_where_it_lies(tmp_path, monkeypatch):
    """W 4 bytes into its file: the fold of Transpose(W) is re-derived by onnxruntime fed W
    where it lies (a view of the file, not copied to start at 64 bytes)."""
    fed: list[np.ndarray] = []
    real = runner._fed

    def recorded(array, *args):
        fed.append(real(array, *args))
        return fed[-1]

    monkeypatch.setattr(runner, "_fed", recorded)
    checked = _checked(_model(tmp_path, 4, scaled=False), tmp_path)
    assert checked.ok and checked.folds is not None and checked.folds.tensors
    in_place = [a.shape for a in fed if input_origin(a) is not None]
    assert in_place == [(256, 512)], [a.shape for a in fed]


def test_an_ir_model_given_to_compare_is_one_line_of_input_error():
    import onnx_ir as ir
    import pytest

    from onnxfold.errors import InputError

    model = ir.Model(ir.Graph([], [], nodes=[]), ir_version=8)
    with pytest.raises(InputError, match=r"a path or an onnx\.ModelProto is compared, not a Model"):
        onnxfold.compare(model, model)


def test_moved_weights_are_read_in_place_beside_a_fold_that_computes(tmp_path, monkeypatch):
    """A computing fold (V * 2) before a moving one (Transpose(W)) in the graph: the fold
    verification batches them apart, so W is still fed where it lies (a batch of both
    copied every weight it read: BERT-base's first batch, 16 transposes beside a mask's
    cone, copied 63 MB) while V is read into a copy."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 512)).astype(np.float32)
    v = rng.standard_normal((1, 256)).astype(np.float32)
    (tmp_path / "m.onnx.data").write_bytes(b"\0" * 4 + w.tobytes() + v.tobytes())
    tensors = []
    for name, array, offset in (("W", w, 4), ("V", v, 4 + w.nbytes)):
        tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=array.shape,
                             data_location=TensorProto.EXTERNAL)
        for key, value in (("location", "m.onnx.data"), ("offset", str(offset)),
                           ("length", str(array.nbytes))):
            tensor.external_data.add(key=key, value=value)
        tensors.append(tensor)
    nodes = [helper.make_node("Mul", ["V", "two"], ["v2"]),
             helper.make_node("Transpose", ["W"], ["wt"]),
             helper.make_node("MatMul", ["x", "wt"], ["y1"]),
             helper.make_node("Add", ["y1", "v2"], ["y"])]
    onnx.save(helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
        [*tensors, numpy_helper.from_array(np.array(2.0, np.float32), "two")]),
        opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    fed: list[np.ndarray] = []  # by the fold verification's runs
    verifying: list[bool] = []
    real, real_verify = runner._fed, compare_module.verify_folds

    def recorded(array, *args):
        got = real(array, *args)
        if verifying:
            fed.append(got)
        return got

    def verify(*args, **kwargs):
        verifying.append(True)
        try:
            return real_verify(*args, **kwargs)
        finally:
            verifying.clear()

    monkeypatch.setattr(runner, "_fed", recorded)
    monkeypatch.setattr(compare_module, "verify_folds", verify)
    checked = _checked(tmp_path / "m.onnx", tmp_path)
    assert checked.ok and checked.folds is not None and len(checked.folds.tensors) == 2
    assert {t.state for t in checked.folds.tensors} == {"bitwise"}, checked.folds.summary()
    in_place = [a.shape for a in fed if input_origin(a) is not None]
    assert in_place == [(256, 512)], [a.shape for a in fed]
