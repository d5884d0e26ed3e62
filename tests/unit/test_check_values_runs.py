"""Runs of the original's cones for values to feed elsewhere (the rewrite validation's leaves,
read by both windows alike) run at the check's optimization level, in one session kept for the
next input set of the same shapes that holds no weight between runs; runs for the original's
bits stay at ``disable``. And :func:`onnxfold.host.heap.pooled` keeps glibc's large buffers in
the heap only within its block."""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.check.running import runner
from onnxfold.check.running.cones import Cones, WeightStore
from onnxfold.host import heap
from onnxfold.io.reader import load_model


def _model(path) -> None:
    """x -> MatMul(w0) -> Add(b) -> Relu -> MatMul(w1): at ``all`` onnxruntime fuses."""
    rng = np.random.default_rng(0)
    w0, w1 = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    b = rng.standard_normal(64).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("MatMul", ["r", "w1"], ["y"])]
    onnx.save(helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])],
        [numpy_helper.from_array(w0, "w0"), numpy_helper.from_array(w1, "w1"),
         numpy_helper.from_array(b, "b")]),
        opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.fixture
def sessions(monkeypatch):
    """Every session the check's runner builds: (graph optimization level, its model's
    initializers)."""
    import onnxruntime as ort

    built: list[tuple[object, list[str]]] = []
    real = runner.new_session

    def recorded(source, options):
        model = onnx.load_from_string(source) if isinstance(source, bytes) else None
        built.append((options.graph_optimization_level,
                      [t.name for t in model.graph.initializer] if model else []))
        return real(source, options)

    monkeypatch.setattr(runner, "new_session", recorded)
    built.clear()
    return built, ort.GraphOptimizationLevel


def _cones(tmp_path, level: str) -> tuple[Cones, dict]:
    path = tmp_path / "m.onnx"
    _model(path)
    model = load_model(str(path))
    values = {str(o.name): o for n in model.graph for o in n.outputs}
    return Cones(model, list(model.graph.inputs), level=level), values


def test_values_run_at_the_cones_level_and_bits_at_disable(tmp_path, sessions):
    built, levels = sessions
    cones, values = _cones(tmp_path, "all")
    feeds = {"x": np.ones((2, 64), np.float32)}
    with cones.holding(WeightStore(None)):
        fast = cones.run([values["r"], values["y"]], feeds, exact=False)
        exact = cones.run([values["r"], values["y"]], feeds)
    assert [level for level, _ in built] == [levels.ORT_ENABLE_ALL, levels.ORT_DISABLE_ALL]
    for value in (values["r"], values["y"]):  # the same values, within float32's rounding
        np.testing.assert_allclose(fast[value], exact[value], rtol=1e-5, atol=1e-5)


def test_one_session_serves_the_sets_of_one_shape_and_holds_no_weight(tmp_path, sessions):
    built, _ = sessions
    cones, values = _cones(tmp_path, "all")
    wanted = [values["y"]]
    sets = [{"x": np.full((2, 64), k, np.float32)} for k in (1.0, 2.0)] + \
        [{"x": np.full((3, 64), 3.0, np.float32)}]
    with cones.holding(WeightStore(None)):
        got = [cones.run(wanted, feeds, exact=False)[values["y"]] for feeds in sets]
        kept = cones._kept.get("all")
        assert kept is not None and not kept.model.constant_feeds  # fed at each run
    assert not cones._kept  # dropped on leaving the block
    assert len(built) == 2  # sets 1 and 2 (shape [2, 64]) share one; set 3 ([3, 64]) its own
    for feeds, array in zip(sets, got):  # each set's own values
        alone = Cones(cones.model, list(cones.model.graph.inputs), level="all")
        np.testing.assert_array_equal(array, alone.run(wanted, feeds, exact=False)[
            values["y"]])
    assert not np.array_equal(got[0], got[1])
    built.clear()
    for feeds in sets[:2]:  # outside holding(): nothing kept, a session each
        cones.run(wanted, feeds, exact=False)
    assert len(built) == 2 and not cones._kept


# a fresh process's glibc heap, read with mallinfo2
_MALLINFO = """
import ctypes, ctypes.util, sys
import numpy as np
from onnxfold.host import heap

libc = ctypes.CDLL(ctypes.util.find_library("c"))


class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


libc.mallinfo2.restype = Info
"""

_MAPPED_BLOCKS = _MALLINFO + """


def maps_one():
    before = libc.mallinfo2().hblks
    array = np.ones(4 << 20, np.uint8)  # above prepare()'s 1 MiB, below pooled()'s 32 MiB
    during = libc.mallinfo2().hblks
    del array
    return during == before + 1


heap.prepare()
seen = [maps_one()]
with heap.pooled():
    seen.append(maps_one())
seen.append(maps_one())
first, second = heap.pooled(), heap.pooled()  # two blocks that overlap (two threads' checks)
first.__enter__()
second.__enter__()
first.__exit__(None, None, None)
seen.append(maps_one())  # the first to leave puts nothing back
second.__exit__(None, None, None)
seen.append(maps_one())
print(seen)
"""


def test_pooled_keeps_large_buffers_in_the_heap_only_within_its_block():
    """In a fresh process (a heap with a free chunk large enough serves the request from it,
    whatever the threshold: after other tests, a 4 MiB array need not be mapped)."""
    import subprocess
    import sys

    name = ctypes.util.find_library("c")
    if name is None or not hasattr(ctypes.CDLL(name), "mallinfo2"):
        pytest.skip("not glibc 2.33 or later: no mallinfo2 to count mapped blocks")
    done = subprocess.run([sys.executable, "-c", _MAPPED_BLOCKS], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[True, False, True, False, True]"


_KEPT_TOP = _MALLINFO + """


def kept(keep):
    with heap.pooled(keep):
        before = libc.mallinfo2().arena
        array = np.ones(8 << 20, np.uint8)  # from the heap's top (below pooled()'s 32 MiB)
        grown = libc.mallinfo2().arena
        del array
        after = libc.mallinfo2().arena
    return grown - before >= 8 << 20, after >= grown - (1 << 20)


heap.prepare()
print([kept(heap.DEFAULT_TRIM), kept(64 << 20), kept(heap.DEFAULT_TRIM)])
"""


def test_pooled_keeps_the_free_top_of_the_heap_it_is_told_to():
    """A buffer freed at the top of the heap stays there for the next one within
    ``pooled(keep)`` where it fits in ``keep``; glibc's default gives it back at once (and
    the next buffer faults every page in again)."""
    import subprocess
    import sys

    name = ctypes.util.find_library("c")
    if name is None or not hasattr(ctypes.CDLL(name), "mallinfo2"):
        pytest.skip("not glibc 2.33 or later: no mallinfo2 to read the heap's size")
    done = subprocess.run([sys.executable, "-c", _KEPT_TOP], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[(True, False), (True, True), (True, False)]"


def test_pooled_turns_numpys_huge_page_advice_off_within_its_block_only():
    switch = heap._numpy_hugepage_switch()
    if switch is None:
        pytest.skip("this numpy has no switch of its huge page advice")

    def advised() -> bool:
        previous = switch(True)
        switch(previous)
        return bool(previous)

    before = switch(True)
    try:
        with heap.pooled():
            assert not advised()
        assert advised()
        switch(False)
        with heap.pooled():
            assert not advised()
        assert not advised()  # what it was before the block, not on
        switch(True)
        first, second = heap.pooled(), heap.pooled()
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)
        assert not advised()  # the other block is still in
        second.__exit__(None, None, None)
        assert advised()
    finally:
        switch(before)


def test_a_graph_onnxruntime_optimizes_wrongly_runs_at_disable(tmp_path, sessions,
                                                               monkeypatch):
    """Where onnxruntime fails at the cones' level, the values are computed at ``disable``,
    and the next input sets go there at once, in the session kept at ``disable``."""
    built, levels = sessions
    cones, values = _cones(tmp_path, "all")
    real = runner.session_options
    tried: list[str] = []

    def refusing(level="all", *args, **kwargs):
        tried.append(level)
        if level != "disable":
            raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : an optimizer failed")
        return real(level, *args, **kwargs)

    monkeypatch.setattr(runner, "session_options", refusing)
    sets = [{"x": np.full((2, 64), k, np.float32)} for k in (1.0, 2.0, 3.0)]
    with cones.holding(WeightStore(None)):
        got = [cones.run([values["y"]], feeds, exact=False) for feeds in sets]
    monkeypatch.setattr(runner, "session_options", real)
    assert tried == ["all", "disable"]  # one failure, then one session for every set
    for feeds, array in zip(sets, got):
        want = cones.run([values["y"]], feeds)
        np.testing.assert_allclose(array[values["y"]], want[values["y"]], rtol=1e-5,
                                   atol=1e-5)
    assert built[0][0] == levels.ORT_DISABLE_ALL


def test_the_kept_session_serves_fewer_values_of_its_cone(tmp_path, sessions):
    """A later set that asks for some of the values the kept session computes (BERT-base's
    first set asks for 222 leaves, the next two for 220 of them) runs in that session, and
    gets what a session of its own computes."""
    built, _ = sessions
    cones, values = _cones(tmp_path, "all")
    first, later = {"x": np.full((2, 64), 1.0, np.float32)}, {"x": np.full((2, 64), 2.0,
                                                                               np.float32)}
    with cones.holding(WeightStore(None)):
        cones.run([values["r"], values["y"]], first, exact=False)
        got = cones.run([values["y"]], later, exact=False)
        assert len(built) == 1
        assert list(got) == [values["y"]]
        other = cones.run([values["y"]], {"x": np.ones((3, 64), np.float32)}, exact=False)
        assert len(built) == 2 and other[values["y"]].shape == (3, 64)  # other shapes: anew
    alone = Cones(cones.model, list(cones.model.graph.inputs), level="all")
    np.testing.assert_array_equal(got[values["y"]],
                                  alone.run([values["y"]], later, exact=False)[values["y"]])


def test_a_kept_session_is_not_used_for_another_cone(tmp_path):
    """A session kept for [a, b] (weights W1, W2) and a later run of [a, C] (C a large
    Constant handed back as it is) on inputs of the same shapes: the later one is a cone of
    its own (it read W2 from a cone that does not hold it: KeyError, an internal error)."""
    rng = np.random.default_rng(0)
    big = rng.standard_normal((64, 512)).astype(np.float32)
    nodes = [helper.make_node("Constant", [], ["C"], value=numpy_helper.from_array(big, "Cv")),
             helper.make_node("MatMul", ["x", "W1"], ["a"]),
             helper.make_node("MatMul", ["x", "W2"], ["b"]),
             helper.make_node("MatMul", ["a", "C"], ["d"])]
    path = tmp_path / "k.onnx"
    onnx.save(helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("d", TensorProto.FLOAT, ["n", 512]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 64])],
        [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), n)
         for n in ("W1", "W2")]), opset_imports=[helper.make_opsetid("", 17)]), path)
    model = load_model(str(path))
    values = {str(o.name): o for n in model.graph for o in n.outputs}
    cones = Cones(model, list(model.graph.inputs), level="all")
    feeds = {"x": rng.standard_normal((2, 64)).astype(np.float32)}
    with cones.holding(WeightStore(None)):
        first = cones.run([values["a"], values["b"]], feeds, exact=False)
        second = cones.run([values["a"], values["C"]], feeds, exact=False)
    np.testing.assert_array_equal(second[values["a"]], first[values["a"]])
    np.testing.assert_array_equal(second[values["C"]], big)


def test_a_written_large_constant_runs_at_disable_and_is_not_kept(tmp_path, sessions):
    """A bfloat16 weight (onnxruntime takes no such array: it is written into the model) is
    never held by a kept session, nor folded into a float32 copy at another level."""
    import ml_dtypes

    built, levels = sessions
    weight = np.random.default_rng(0).standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    nodes = [helper.make_node("Cast", ["w"], ["w32"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["x", "w32"], ["y"])]
    path = tmp_path / "bf16.onnx"
    onnx.save(helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])],
        [numpy_helper.from_array(weight, "w")]), opset_imports=[helper.make_opsetid("", 17)]),
        path)
    model = load_model(str(path))
    values = {str(o.name): o for n in model.graph for o in n.outputs}
    cones = Cones(model, list(model.graph.inputs), level="all")
    with cones.holding(WeightStore(None)):
        for k in (1.0, 2.0):
            cones.run([values["y"]], {"x": np.full((2, 64), k, np.float32)}, exact=False)
            assert not cones._kept
    assert [level for level, _ in built] == [levels.ORT_DISABLE_ALL] * 2


@pytest.mark.parametrize("domains", [("",), ("", "com.microsoft")])
def test_a_files_window_is_judged_against_the_originals_nodes(tmp_path, domains):
    """The original computes Sigmoid(1 / ((x * 0) + 0.0)) = 1; the file drops the ``+ 0.0``
    and gives 0 where x < 0; onnxruntime at ``basic`` and above drops it too (its no-op
    elimination), so leaves computed there passed the file: where the files' opsets differ
    (as an onnxruntime-optimized file's do) the window is the original's own value of ``y``,
    the reference itself; where they are the same, the file's ``r`` is compared where it is
    read, on the original's value of ``r``. Either is the original's nodes' value."""
    from onnxfold.check.compare import compare

    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    original = [helper.make_node("Mul", ["x", "zero"], ["z"]),
                helper.make_node("Add", ["z", "zero"], ["t"]),
                helper.make_node("Reciprocal", ["t"], ["r"]),
                helper.make_node("Sigmoid", ["r"], ["y"])]
    dropped = [helper.make_node("Mul", ["x", "zero"], ["z"]),
               helper.make_node("Reciprocal", ["z"], ["r"]),
               helper.make_node("Sigmoid", ["r"], ["y"])]
    a, b = str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx")
    onnx.save(helper.make_model(helper.make_graph(original, "g", *io, [zero]),
                                opset_imports=[helper.make_opsetid("", 17)]), a)
    onnx.save(helper.make_model(helper.make_graph(dropped, "g", *io, [zero]), opset_imports=[
        helper.make_opsetid(domain, 17 if not domain else 1) for domain in domains]), b)
    result = compare(a, b, n=3)
    assert result.rewrites is not None and result.rewrites.failing, result.rewrites
    assert not result.ok


def test_a_window_handing_on_a_value_as_it_is_reads_the_originals_nodes_value(tmp_path):
    """A recorded window that hands the original's value on as it is: that value is what
    the replacement is judged against, computed by the original's nodes (1 / (x*0 + 0.0) is
    +inf where x < 0), not onnxruntime's rewrite of them at the cones' level (which drops
    the + 0.0: -inf, the wrong replacement's value)."""
    from onnxfold.check.judging.verdicts import DIFFERS
    from onnxfold.check.rewrites.validation import validate_rewrites
    from onnxfold.rewrite.log import RewriteRecord, Window
    from onnxfold.rewrite.recorder import new_log

    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    nodes = [helper.make_node("Mul", ["x", "zero"], ["z"]),
             helper.make_node("Add", ["z", "zero"], ["t"]),
             helper.make_node("Reciprocal", ["t"], ["r"]),
             helper.make_node("Sigmoid", ["r"], ["y"])]
    path = tmp_path / "a.onnx"
    onnx.save(helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])], [zero]),
        opset_imports=[helper.make_opsetid("", 17)]), path)
    model = load_model(str(path))
    cones = Cones(model, list(model.graph.inputs), level="all")
    log = new_log(load_model(str(path)))
    log.records.append(RewriteRecord(
        "wrong_drop", "Add", before=Window(outputs=["r"], originals={"r": "r"}),
        after=Window(nodes=[helper.make_node("Reciprocal", ["z_in"], ["r_out"])],
                     outputs=["r_out"], originals={"z_in": "z"})))
    feeds = [{"x": np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)}]
    result = validate_rewrites(log, cones, feeds)
    assert [v.state for v in result.rewrites] == [DIFFERS], result.rewrites


def test_pooled_puts_the_settings_back_when_entering_it_is_interrupted(monkeypatch):
    """A KeyboardInterrupt landing while the block sets the process's settings (after
    numpy's advice was turned off, before the block was counted) leaves no block counted
    and numpy's advice as it was."""
    switch = heap._numpy_hugepage_switch()
    if switch is None:
        pytest.skip("this numpy has no switch of its huge page advice")
    real = heap._threshold

    def interrupted(size: int, trim: int | None = None) -> None:
        if size == heap.POOLED_THRESHOLD:
            raise KeyboardInterrupt
        real(size, trim)

    before = switch(True)
    try:
        monkeypatch.setattr(heap, "_threshold", interrupted)
        with pytest.raises(KeyboardInterrupt), heap.pooled():
            pass
        assert not heap._pooling
        previous = switch(True)
        assert previous is True  # the advice is back on
    finally:
        switch(before)
