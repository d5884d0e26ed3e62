"""A Session keeps several folded sets (one per adapter) by content: switching back to a kept set
folds and compiles nothing, the least recently used set goes first, the memory budget holds,
``cache_dir`` keeps sets across processes, and onnxruntime's adapter files are runtime-constant
feeds. Speeds are measured in ``python -m bench run adapters``, not here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc

import numpy as np
import onnxruntime as ort
import pytest

from onnxfold.errors import InputError
from onnxfold.runtime.session import RuntimeConstantsChanged, Session
from tests.support import low_rank_models as lr
from tests.support.running import run_ort

TOL = {"rtol": 2e-5, "atol": 2e-5}


def _with(case: lr.LowRank, constants: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**case.feeds, **constants}


def _want(case: lr.LowRank, constants: dict[str, np.ndarray]) -> np.ndarray:
    return run_ort(case.model, _with(case, constants))[0]


@pytest.mark.parametrize("backend", ["ort", "mlir"])
def test_switching_to_a_kept_set_folds_nothing(backend):
    case = lr.scale_after()
    adapters = [lr.adapter(case, i) for i in range(4)]
    session = Session(case.model, case.runtime, backend=backend)
    for constants in adapters:
        session.run(None, _with(case, constants))
    assert session.folds == 4
    for _ in range(2):
        for constants in adapters:
            out = session.run(None, _with(case, constants))[0]
            np.testing.assert_allclose(out, _want(case, constants), **TOL)
    assert session.folds == 4 and len(session.folded_keys) == 4
    assert session.switches == 12  # each call changed the set, none folded


def test_the_least_recently_used_set_goes_first():
    case = lr.scale_after()
    first, second, third = (lr.adapter(case, i) for i in range(3))
    session = Session(case.model, case.runtime, max_sets=2)
    for constants in (first, second, first, third):  # second is the least recently used
        session.run(None, _with(case, constants))
    assert session.folds == 3 and len(session.folded_keys) == 2
    session.run(None, _with(case, first))
    assert session.folds == 3
    session.run(None, _with(case, second))
    assert session.folds == 4


def _resident() -> int:
    """This process's resident bytes once freed memory went back to the system (glibc)."""
    gc.collect()
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_the_memory_budget_holds():
    """Sets of 8 MiB of merged weights each, a budget of about two: cycling through six
    adapters keeps at most what the budget counts, and the process grows by no more."""
    case = lr.stacked(layers=8, width=512)
    adapters = [lr.adapter(case, i) for i in range(6)]
    probe = Session(case.model, case.runtime)
    probe.run(None, _with(case, adapters[0]))
    per_set = probe.cached_bytes
    del probe
    budget = int(2.5 * per_set)
    session = Session(case.model, case.runtime, max_bytes=budget, max_sets=16)
    session.run(None, _with(case, adapters[0]))
    before = _resident()
    for _ in range(3):
        for constants in adapters:
            session.run(None, _with(case, constants))
            assert session.cached_bytes <= budget and len(session.folded_keys) <= 2
    grown = _resident() - before
    # the kept sets, plus one set's worth for the allocator: onnxruntime's sessions leave the
    # heap fragmented by a few MiB that malloc_trim cannot return (measured: 18-24 MiB after
    # these 18 folds, 23-39 MiB after 240, not rising with them); keeping every set would be
    # 6 sets, 48 MiB
    slack = per_set
    assert grown <= budget + slack, \
        f"grew {grown >> 20} MiB over a budget of {budget >> 20} MiB + {slack >> 20} MiB"
    assert session.folds == 18  # every switch folded: six sets never fit


def test_a_kept_set_is_held_once_by_onnxruntime():
    """A set's folded tensors are loaded by onnxruntime from a file and the Session drops its
    arrays: each kept set of 8 MiB of merged weights costs about 8 MiB (onnxruntime's packed
    copy), not 16 (the arrays handed over, kept, and the packed copy)."""
    case = lr.stacked(layers=8, width=512)
    adapters = [lr.adapter(case, i) for i in range(6)]
    session = Session(case.model, case.runtime, max_sets=8)
    session.run(None, _with(case, adapters[0]))
    before = _resident()
    for constants in adapters[1:]:
        out = session.run(None, _with(case, constants))[0]
        np.testing.assert_allclose(out, _want(case, constants), **TOL)
    per_set = (_resident() - before) / (len(adapters) - 1)
    folded = 8 * 512 * 512 * 4
    assert per_set < 1.3 * folded, f"{per_set / 2**20:.1f} MiB per set of {folded >> 20} MiB"
    assert session.cached_bytes == len(adapters) * folded  # what the budget counts


def test_sets_persist_through_cache_dir(tmp_path):
    case = lr.scale_after()
    adapters = [lr.adapter(case, i) for i in range(2)]
    for expected_hits in (0, 2):
        session = Session(case.model, case.runtime, cache_dir=tmp_path / "cache")
        for constants in adapters:
            out = session.run(None, _with(case, constants))[0]
            np.testing.assert_allclose(out, _want(case, constants), **TOL)
        assert session.cache_hits == expected_hits and session.folds == 2
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 2


def test_a_new_adapter_in_memory_a_freed_one_used_is_seen():
    """Identity is held by weak references: a new adapter whose arrays reuse the freed
    memory of the old one is still a new adapter."""
    case = lr.scale_after()
    session = Session(case.model, case.runtime)
    for i in range(6):
        constants = lr.adapter(case, i)
        out = session.run(None, _with(case, constants))[0]
        np.testing.assert_allclose(out, _want(case, constants), **TOL)
        del constants
    assert session.folds == 6


def test_an_adapter_file_is_the_runtime_constant_feeds(tmp_path):
    """One line for a multi-LoRA user: the runtime constants are the file's tensors; the
    results are onnxruntime's own multi-LoRA run's (LoraAdapter + add_active_adapter)."""
    case = lr.scale_after()
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"a{i}.onnx_adapter")
        lr.write_adapter(lr.adapter(case, i), paths[-1])
    inputs = {n: case.feeds[n] for n in ("x",)}
    model = lr.with_default_adapter(case)
    session = Session(model, adapter=paths[0])
    assert sorted(session.runtime_constants) == sorted(case.runtime)
    assert session.parts.low_rank.merged == 1
    plain = ort.InferenceSession(model.SerializeToString())
    for path in paths:
        session.set_adapter(path)
        active = ort.LoraAdapter()
        active.Load(str(path))
        options = ort.RunOptions()
        options.add_active_adapter(active)
        want = plain.run(None, inputs, options)[0]
        np.testing.assert_allclose(session.run(None, inputs)[0], want, **TOL)
    assert session.folds == 2
    session.set_adapter(paths[0])
    assert session.folds == 2


def test_a_file_that_is_no_adapter_is_one_input_error(tmp_path):
    case = lr.scale_after()
    bogus = tmp_path / "x.onnx_adapter"
    bogus.write_bytes(b"not an adapter")
    with pytest.raises(InputError, match="not an onnxruntime adapter file"):
        Session(case.model, adapter=bogus)
    with pytest.raises(InputError, match="no such adapter file"):
        Session(case.model, adapter=tmp_path / "missing.onnx_adapter")


def test_an_object_array_as_a_runtime_constant_is_one_input_error():
    case = lr.scale_after()
    session = Session(case.model, case.runtime)
    feeds = dict(case.feeds)
    feeds["lora_A"] = np.array([object()] * 4)
    with pytest.raises(InputError, match="lora_A"):
        session.run(None, feeds)


def test_refuse_allows_no_other_set():
    case = lr.scale_after()
    session = Session(case.model, case.runtime, check="refuse")
    session.run(None, case.feeds)
    with pytest.raises(RuntimeConstantsChanged):
        session.run(None, _with(case, lr.adapter(case, 1)))


def test_set_adapter_none_drops_the_adapter():
    """``set_adapter(None)``: no adapter; a call must then feed the runtime constants (it
    raised TypeError)."""
    case = lr.scale_after()
    first, second = lr.adapter(case, 0), lr.adapter(case, 1)
    session = Session(case.model, adapter=first)
    inputs = {"x": case.feeds["x"]}
    np.testing.assert_allclose(session.run(None, inputs)[0], _want(case, first), **TOL)
    session.set_adapter(None)
    with pytest.raises(InputError, match="feeds lack the runtime constants"):
        session.run(None, inputs)
    out = session.run(None, _with(case, second))[0]
    np.testing.assert_allclose(out, _want(case, second), **TOL)
    session.set_adapter(first)  # its set is still kept: nothing folded
    np.testing.assert_allclose(session.run(None, inputs)[0], _want(case, first), **TOL)
    assert session.folds == 2


def test_adapter_names_with_escapes_reach_errors_escaped(tmp_path):
    """An adapter's tensor names come from a file: a terminal escape or a bidi override in
    one is shown escaped in the Python error (it reached the message as it was)."""
    from onnxfold.host.terminal import printable

    case = lr.scale_after()
    hostile = {("lora_A\x1b[31m\u202e" if n == "lora_A" else n): a
               for n, a in lr.adapter(case, 0).items()}
    lr.write_adapter(hostile, tmp_path / "a.onnx_adapter")
    for source in (hostile, tmp_path / "a.onnx_adapter"):
        with pytest.raises(InputError) as raised:
            Session(case.model, adapter=source)
        message = str(raised.value)
        assert message == printable(message) and "lora_A\\x1b[31m\\u202e" in message
    session = Session(case.model, case.runtime)
    with pytest.raises(InputError) as raised:  # its names are not the runtime constants'
        session.set_adapter(hostile)
    message = str(raised.value)
    assert message == printable(message) and "the adapter holds lora_A\\x1b" in message
    with pytest.raises(InputError) as raised:  # the adapter that failed was not taken
        session.run(None, {"x": case.feeds["x"]})
    assert "adapter holds" not in str(raised.value)


def test_base_weights_stay_in_the_models_file(tmp_path):
    """A base weight the merge reads through a Transpose (as dynamo exports a Linear) is not
    transposed at compile time and kept: the runtime fold reads it from the file's mapping
    (each fold transposes it), and the Session holds no copy of the base weights."""
    from onnx import TensorProto, helper, numpy_helper

    from onnxfold.io.mapped import MappedTensor

    k, n, r, layers = 1024, 1024, 8, 8
    g = np.random.default_rng(0)
    nodes, inits, inputs, feeds, h = [], [], [], {"x": g.standard_normal((1, k), np.float32)}, "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array(g.standard_normal((n, k), np.float32) * 0.04,
                                             f"W{i}"))
        for name, shape in ((f"A{i}", (k, r)), (f"B{i}", (r, n))):
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
            feeds[name] = g.standard_normal(shape, np.float32) * 0.05
        nodes += [helper.make_node("Transpose", [f"W{i}"], [f"Wt{i}"], perm=[1, 0]),
                  helper.make_node("MatMul", [h, f"Wt{i}"], [f"base{i}"]),
                  helper.make_node("MatMul", [h, f"A{i}"], [f"xa{i}"]),
                  helper.make_node("MatMul", [f"xa{i}", f"B{i}"], [f"lora{i}"]),
                  helper.make_node("Add", [f"base{i}", f"lora{i}"], [f"h{i}"])]
        h = f"h{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, k]), *inputs], [helper.make_tensor_value_info(
            h, TensorProto.FLOAT, [1, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    import onnx

    written = onnx.ModelProto()
    written.CopyFrom(model)
    onnx.save(written, tmp_path / "m.onnx", save_as_external_data=True, location="m.data")
    runtime = [name for name in feeds if name != "x"]
    Session(lr.scale_after().model, lr.scale_after().runtime).run(None, lr.scale_after().feeds)
    before = _resident()  # onnxruntime and the rules loaded: what follows is the model's
    session = Session(str(tmp_path / "m.onnx"), runtime)
    fold = session.parts.runtime_fold.graph
    assert sum(node.op_type == "Transpose" for node in fold) == layers
    weights = [v.const_value for v in fold.initializers.values()]
    assert len(weights) == layers and all(isinstance(t, MappedTensor) for t in weights)
    np.testing.assert_allclose(session.run(None, feeds)[0], run_ort(model, feeds)[0],
                               rtol=1e-4, atol=1e-4)
    base = layers * n * k * 4  # held once: onnxruntime's packed merged weights
    grown = _resident() - before  # (a transposed copy, the merged arrays: 2 more)
    assert grown < base + base // 2, f"grew {grown >> 20} MiB for {base >> 20} MiB of weights"
