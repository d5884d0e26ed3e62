"""The check reads the original's weights with ``pread`` wherever it runs them (a cone, a
recipe, a rewrite's leaves), never through the file's mapping: an input truncated while
onnxruntime reads a weight is then an InputError, not a bus error that ends a Python caller of
``compare()`` (the command line turns one into a line; a library caller has no such
handler)."""

from __future__ import annotations

import numpy as np

import onnxfold
from onnxfold.check.compare import compare_models
from onnxfold.check.running import cones, runner
from onnxfold.check.running.options import CompareOptions
from onnxfold.io.mapped import input_origin
from tests.support.models import transposed_weight


def test_what_the_check_runs_reads_no_weight_through_a_mapping(tmp_path, monkeypatch):
    source = transposed_weight(tmp_path / "in", rows=256, cols=1024)
    out = tmp_path / "o.onnx"
    result = onnxfold.optimize(str(source), record_rewrites=True)
    result.save(str(out))
    fed: list[np.ndarray] = []
    original = runner.run_nodes

    def recorded(nodes, outputs, *, constants=None, inputs=None, **kwargs):
        fed.extend((constants or {}).values())
        fed.extend(a for a in (inputs or {}).values() if isinstance(a, np.ndarray))
        return original(nodes, outputs, constants=constants, inputs=inputs, **kwargs)

    monkeypatch.setattr(cones, "run_nodes", recorded)
    checked = compare_models(str(source), str(out), 1, CompareOptions(),
                             evidence=result.evidence)
    assert checked.ok and checked.folds is not None and checked.folds.tensors
    assert fed and not [a.shape for a in fed if input_origin(a) is not None]


def test_an_ir_model_given_to_compare_is_one_line_of_input_error():
    import onnx_ir as ir
    import pytest

    from onnxfold.errors import InputError

    model = ir.Model(ir.Graph([], [], nodes=[]), ir_version=8)
    with pytest.raises(InputError, match=r"a path or an onnx\.ModelProto is compared, not a Model"):
        onnxfold.compare(model, model)
