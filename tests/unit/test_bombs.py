"""Memory and time bombs: folds are sized and refused before they allocate, within a budget.

Each bomb runs in a child process whose peak RSS is measured (and whose address space is
capped, so a regression fails instead of taking the machine down).
"""

from __future__ import annotations

import os
import resource

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.support.cli import run_python
from tests.support.measured_child import run_measured
from tests.support.models import make_model, tensor, vinfo

BUDGET = 256 << 20
CAP = 3 << 30  # address space of the child: well under what any bomb would need


def _fold_measured(path, out, *flags):
    """Run ``onnxfold optimize`` in a child; return (exit code, stderr, peak RSS, CPU
    seconds: a loaded machine stretches wall time, not the work done)."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))

    done, peak = run_measured(["optimize", path, "-o", out, "-q", *flags], cap)
    return done.returncode, done.stderr, peak, done.cpu


def _const(name, arr):
    return helper.make_node("Constant", [], [name], value=tensor(name + "_v", arr))


def _scalar_out(nodes, tmp_path, name, initializers=()):
    """``nodes`` end in ``big``; the model returns ReduceMax(big) + x (a scalar-sized fold)."""
    nodes = [*nodes, helper.make_node("ReduceMax", ["big"], ["reduced"], keepdims=0),
             helper.make_node("Add", ["reduced", "x"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[])], [vinfo("y", shape=[])], initializers)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path


GIB3 = 3 << 30
BOMBS = {
    "constant_of_shape": lambda: [
        _const("s", np.array([GIB3 // 4], np.int64)),
        helper.make_node("ConstantOfShape", ["s"], ["big"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]))],
    "tile": lambda: [_const("c", np.ones((1, 1024), np.float32)),
                     _const("r", np.array([GIB3 // 4096, 1], np.int64)),
                     helper.make_node("Tile", ["c", "r"], ["big"])],
    "broadcast_add": lambda: [_const("a", np.ones((1 << 15, 1), np.float32)),
                              _const("b", np.ones((1, 1 << 15), np.float32)),
                              helper.make_node("Add", ["a", "b"], ["big"])],
    "matmul": lambda: [_const("a", np.ones((1 << 15, 1), np.float32)),
                       _const("b", np.ones((1, 1 << 15), np.float32)),
                       helper.make_node("MatMul", ["a", "b"], ["big"])],
    "range": lambda: [_const("lo", np.array(0, np.int64)), _const("hi", np.array(10**12)),
                      _const("d", np.array(1, np.int64)),
                      helper.make_node("Range", ["lo", "hi", "d"], ["i"]),
                      helper.make_node("Cast", ["i"], ["big"], to=TensorProto.FLOAT)],
    "concat_doublings": lambda: [_const("c0", np.ones(1024, np.float32))] + [
        helper.make_node("Concat", [f"c{i}", f"c{i}"], [f"c{i + 1}" if i < 39 else "big"],
                         axis=0) for i in range(40)],
    "pad": lambda: [_const("p", np.ones((4, 4), np.float32)),
                    _const("pads", np.array([0, 0, 1 << 14, 1 << 14], np.int64)),
                    helper.make_node("Pad", ["p", "pads"], ["big"])],
    "one_hot": lambda: [_const("i", np.arange(1 << 14, dtype=np.int64)),
                        _const("depth", np.array(1 << 16, np.int64)),
                        _const("vals", np.array([0, 1], np.float32)),
                        helper.make_node("OneHot", ["i", "depth", "vals"], ["big"])],
}


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_a_bomb_is_refused_within_the_budget(tmp_path, bomb):
    path = _scalar_out(BOMBS[bomb](), tmp_path, bomb)
    code, err, rss, cpu = _fold_measured(path, tmp_path / "out.onnx",
                                             "--pool-budget", str(BUDGET), "--explain")
    assert code == 0, err
    assert rss < BUDGET + (300 << 20), f"peak RSS {rss >> 20} MiB"
    assert cpu < 60
    assert onnx.load(tmp_path / "out.onnx").graph.node  # declined: the bomb stays unfolded


def test_a_constant_loop_of_a_trillion_iterations_is_refused(tmp_path):
    body = helper.make_graph([helper.make_node("Add", ["s_in", "one"], ["s_out"]),
                              helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
                             [vinfo("i", TensorProto.INT64, []),
                              vinfo("cond_in", TensorProto.BOOL, []), vinfo("s_in", shape=[])],
                             [vinfo("cond_out", TensorProto.BOOL, []), vinfo("s_out", shape=[])])
    nodes = [_const("n", np.array(10**12)), _const("t", np.array(True)),
             _const("s0", np.float32(0)), _const("one", np.float32(1)),
             helper.make_node("Loop", ["n", "t", "s0"], ["big"], body=body),
             helper.make_node("Add", ["big", "x"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[])], [vinfo("y", shape=[])])
    path = tmp_path / "loop.onnx"
    onnx.save(model, path)
    code, err, _, cpu = _fold_measured(path, tmp_path / "out.onnx")
    assert code == 0, err
    assert cpu < 60
    assert "Loop" in [n.op_type for n in onnx.load(tmp_path / "out.onnx").graph.node]


@pytest.mark.parametrize("chain", ["tile_mean", "range_cast_max"])
def test_large_intermediates_with_a_small_result_fold(tmp_path, chain):
    # the pool exists so that only final results are materialized: 64 MiB in flight, 4 B kept
    if chain == "tile_mean":
        nodes = [_const("c", np.arange(1024, dtype=np.float32).reshape(1, 1024)),
                 _const("r", np.array([1 << 14, 1], np.int64)),
                 helper.make_node("Tile", ["c", "r"], ["big"])]
    else:
        nodes = [_const("lo", np.array(0, np.int64)), _const("hi", np.array(1 << 24)),
                 _const("d", np.array(1, np.int64)),
                 helper.make_node("Range", ["lo", "hi", "d"], ["i"]),
                 helper.make_node("Cast", ["i"], ["big"], to=TensorProto.FLOAT)]
    path = _scalar_out(nodes, tmp_path, chain)
    code, err, _rss, _ = _fold_measured(path, tmp_path / "out.onnx")
    assert code == 0, err
    folded = onnx.load(tmp_path / "out.onnx")
    assert [n.op_type for n in folded.graph.node] == ["Add"]
    assert sum(t.ByteSize() for t in folded.graph.initializer) < 1024


def test_a_full_spill_directory_is_one_line(tmp_path, monkeypatch):
    import errno

    from onnxfold.errors import OutputError
    from onnxfold.fold.pool import BufferPool

    def full(*_args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    pool = BufferPool(memory_limit=1 << 10, spill_dir=str(tmp_path))
    with pytest.raises(OutputError, match="cannot spill"):
        pool.put("v", np.ones(1 << 12, np.float32), 1)
    assert os.listdir(tmp_path) == []


def test_data_propagation_stays_on_for_long_tables_read_a_scalar_at_a_time():
    # GPT-2's position table: a Gather of one scalar from a 1-D constant of 100,000 elements
    # yields a scalar; treating it as 100,000 long turned data propagation off for the model
    from onnxfold.analysis.shapes import _data_prop_is_bounded

    nodes = [_const("table", np.arange(100_000, dtype=np.int64)), _const("i", np.array(3)),
             helper.make_node("Gather", ["table", "i"], ["g"]),
             helper.make_node("Unsqueeze", ["g", "ax"], ["u"]),
             helper.make_node("Concat", ["u", "u"], ["y"], axis=0)]
    ok = make_model(nodes, [], [vinfo("y", TensorProto.INT64, [2])],
                    [tensor("ax", np.array([0]))])
    assert _data_prop_is_bounded(ok)
    doubled = make_model(BOMBS["concat_doublings"]()[:18], [], [vinfo("c17", shape=None)])
    assert not _data_prop_is_bounded(doubled)


def test_data_propagation_bound_reads_declared_lengths_where_a_propagating_op_reads_them():
    """Only ops that propagate data lengthen it; a long 1-D value declared by ``value_info``
    counts once such an op reads it, whatever produced it (an op the bound skips)."""
    from onnxfold.analysis.shapes import DATA_PROP_MAX, _data_prop_is_bounded

    long = DATA_PROP_MAX + 1
    read = make_model([helper.make_node("Softmax", ["x"], ["s"]),
                       helper.make_node("Identity", ["s"], ["y"])],
                      [vinfo("x", shape=[long])], [vinfo("y", shape=[long])])
    read.graph.value_info.append(vinfo("s", shape=[long]))
    assert not _data_prop_is_bounded(read)
    unread = make_model([helper.make_node("Softmax", ["x"], ["s"]),
                         helper.make_node("Softmax", ["s"], ["y"])],
                        [vinfo("x", shape=[long])], [vinfo("y", shape=[long])])
    unread.graph.value_info.append(vinfo("s", shape=[long]))
    assert _data_prop_is_bounded(unread)


def test_a_memory_limit_never_raises_the_peak(tmp_path):
    """Spilling a 128 MiB result under ``--memory-limit`` writes it out; copying it into a
    writable mapping kept a third copy resident (peak +128 MiB over no limit at all)."""
    from onnx import numpy_helper

    weight = numpy_helper.from_array(
        np.random.default_rng(0).random((256, 1 << 17), dtype=np.float32), "W")
    nodes = [helper.make_node("Neg", ["W"], ["n"]), helper.make_node("Mul", ["x", "n"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[256, 1 << 17])],
                       [vinfo("y", shape=[256, 1 << 17])], [weight])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="m.data")
    peaks = {}
    for flags in ((), ("--memory-limit", "16M")):
        code, stderr, peaks[flags], _ = _fold_measured(path, tmp_path / "out.onnx", *flags)
        assert code == 0, stderr
    assert peaks[("--memory-limit", "16M")] <= peaks[()] + (32 << 20), peaks


@pytest.mark.parametrize("step", [2**40, -(2**62)])
def test_data_propagation_is_off_for_a_slice_step_beyond_32_bits(step, tmp_path):
    """``Slice(Shape(x), 0, 3, axes=0, steps=2**40)``: with data propagation on, onnx
    allocates 5.7 GB for this 2-node model (OOM-killed without a limit), so it stays off."""
    from onnxfold.analysis.shapes import _data_prop_is_bounded

    nodes = [helper.make_node("Shape", ["x"], ["sh"]),
             helper.make_node("Slice", ["sh", "s", "e", "a", "t"], ["y"])]
    inits = [tensor("s", np.array([0 if step > 0 else 2])),
             tensor("e", np.array([3 if step > 0 else -4])), tensor("a", np.array([0])),
             tensor("t", np.array([step]))]
    model = make_model(nodes, [vinfo("x", shape=["N", 3, 4])],
                       [vinfo("y", TensorProto.INT64, shape=["k"])], inits)
    assert not _data_prop_is_bounded(model)
    small = make_model(nodes, [vinfo("x", shape=["N", 3, 4])],
                       [vinfo("y", TensorProto.INT64, shape=None)],
                       [*inits[:3], tensor("t", np.array([2 ** 31 - 1]))])
    assert _data_prop_is_bounded(small)
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    proc = run_python("-c", (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
        "from onnxfold.app import cli; sys.exit(cli.main(sys.argv[1:]))"),
        "optimize", src, "-o", tmp_path / "o.onnx", "-q", timeout=120)
    assert proc.returncode == 0, proc.stderr  # within 2 GiB of address space, at once
