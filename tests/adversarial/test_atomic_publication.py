"""A model and its external data are replaced together: a kill or a second writer never leaves
the old model reading the new data.

The model's folded weight is transposed, so the new data file holds other bytes at the offsets
the old model reads: a model paired with the other run's data computes something else, and
``onnxfold compare`` against a pristine copy fails. Kills are injected with the test-only
``ONNXFOLD_TEST_KILL_AT`` hook (``onnxfold.io.publication``) at each step of the publication.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.host.points import PAUSE_AT_ENV, PAUSE_DIR_ENV
from onnxfold.io.publication import KILL_AT_ENV, STEPS, lock_path
from onnxfold.io.tempfiles import remove_stale
from tests.support import breadth
from tests.support.cli import onnxfold_argv, run_cli

TIMEOUT = 120
N = 64


def _save_model(directory, name: str, seed: int, suffix: str = ".data") -> str:
    """y = x @ Transpose(W), W in ``<name><suffix>``: folding stores W transposed."""
    w = np.random.default_rng(seed).standard_normal((N, N)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["W"], ["wt"]),
         helper.make_node("MatMul", ["x", "wt"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, N])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, N])],
        [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = os.path.join(directory, name)
    onnx.save(model, path, save_as_external_data=True, location=name + suffix,
              size_threshold=0)
    return path


def _onnxfold(*args, env=None):
    return run_cli(*args, timeout=TIMEOUT, env={**os.environ, **(env or {})})


def _computes_one_of(path: str, pristine: list[str]) -> str:
    """The pristine model ``path`` computes what it computes (``onnxfold compare``)."""
    for candidate in pristine:
        if _onnxfold("compare", candidate, path, "-n", "2").returncode == 0:
            return candidate
    raise AssertionError(f"{path} computes neither {pristine}")


def _data_of(path: str) -> set[str]:
    model = onnx.load(path, load_external_data=False)
    return {entry.value for t in model.graph.initializer for entry in t.external_data
            if entry.key == "location"}


def _pristine_copy(model: str, directory) -> str:
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(os.path.dirname(model)):
        source = os.path.join(os.path.dirname(model), name)
        if os.path.isfile(source):
            shutil.copy(source, os.path.join(directory, name))
    return os.path.join(directory, os.path.basename(model))


@pytest.mark.parametrize(("step", "suffix"), [  # torch's, optimum's convention: in turn (CI)
    pytest.param(step, suffix, id=f"{suffix}-{step}",
                 marks=() if (k + turn) % 2 == 0 else breadth.MARK)
    for k, step in enumerate(STEPS) for turn, suffix in enumerate([".data", "_data"])])
def test_kill_at_each_step_of_an_in_place_save_leaves_the_old_or_new_pair(tmp_path, step,
                                                                          suffix):
    """onnxsim's in-place form (``onnxfold m.onnx m.onnx``) and ``-o m.onnx`` are one save:
    killed at each step of it, the directory holds the old pair or the new one, and the data
    keeps the input's name once the output is written again."""
    work = tmp_path / "work"
    work.mkdir()
    model = _save_model(work, "m.onnx", seed=0, suffix=suffix)
    data = "m.onnx" + suffix
    old = _pristine_copy(model, tmp_path / "old")

    killed = _onnxfold(model, model, "--external-data", "yes", env={KILL_AT_ENV: step})
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr)

    new_dir = tmp_path / "new"
    new_dir.mkdir()
    new = str(new_dir / "m.onnx")
    assert _onnxfold("optimize", old, "-o", new, "--external-data", "yes").returncode == 0
    _computes_one_of(model, [old, new])
    published = _data_of(model) != {data}  # the new pair names a fresh data file
    # the model's rename publishes it; the data's plain name comes back after that
    assert published == (step in ("old-data-removal", "data-second-name"))
    assert onnx.load(model, load_external_data=False).graph.node  # a whole model is there

    # What the kill left is removed: temporary files by the stale rule, an unpublished data
    # variant by the next write of the same output.
    remove_stale(str(work), min_age=0)
    assert _onnxfold("optimize", model, "-o", model, "--external-data", "yes").returncode == 0
    assert sorted(os.listdir(work)) == ["m.onnx", data], os.listdir(work)
    assert _data_of(model) == {data}
    _computes_one_of(model, [old])


@pytest.mark.parametrize("in_place", [True, False])
def test_a_second_write_of_an_output_keeps_its_data_name(tmp_path, in_place):
    """Written again (in place, or the same output from the same input), the data is still
    ``<output>.data``: it was written under a fresh name because that one was taken, and
    renamed once published (it came out as ``m.onnx.onnxfold-3f9a0c12.data``)."""
    model = _save_model(tmp_path, "m.onnx", seed=0)
    pristine = _pristine_copy(model, tmp_path / "old")
    output = model if in_place else str(tmp_path / "o.onnx")
    name = os.path.basename(output)
    for _ in range(3):
        proc = _onnxfold("optimize", model, "-o", output, "--external-data", "yes")
        assert proc.returncode == 0, proc.stderr
        assert f"{output} + {output}.data (" in proc.stdout
        assert _data_of(output) == {f"{name}.data"}
    expected = {"m.onnx", "m.onnx.data"} | (set() if in_place else {"o.onnx", "o.onnx.data"})
    assert set(os.listdir(tmp_path)) - {"old"} == expected
    _computes_one_of(output, [pristine])


def test_a_killed_runs_unpublished_data_is_a_temporary_file(tmp_path):
    """Killed before any rename, the new data is under a temporary name that the stale rule
    removes (with the lock file no process holds any more); the output is untouched."""
    work = tmp_path / "work"
    work.mkdir()
    model = _save_model(work, "m.onnx", seed=0)
    before = {name: (work / name).read_bytes() for name in os.listdir(work)}
    killed = _onnxfold("optimize", model, "-o", model, "--external-data", "yes",
                       env={KILL_AT_ENV: "data-rename"})
    assert killed.returncode == -signal.SIGKILL
    left = set(os.listdir(work)) - set(before) - {".m.onnx.onnxfold-lock"}
    assert left and all(re.match(r"^\..*\.onnxfold-\d+-", name) for name in left), left
    assert {name: (work / name).read_bytes() for name in before} == before
    remove_stale(str(work), min_age=0)
    assert set(os.listdir(work)) == set(before)


def _blocked_on(path: str, pid: int) -> bool:
    """Whether process ``pid`` waits for a lock on the file at ``path`` (/proc/locks lists a
    waiter as ``N: -> FLOCK ... PID MAJ:MIN:INODE ...``)."""
    inode = os.stat(path).st_ino
    with open("/proc/locks") as f:
        for line in f:
            fields = line.split()
            if "->" in fields and str(pid) in fields and \
                    any(f.endswith(f":{inode}") for f in fields):
                return True
    return False


def test_a_second_writer_waits_for_the_output_lock(tmp_path):
    """While another run holds the output's lock, a writer writes its pair under temporary
    names and then blocks in the lock's wait (the kernel lists it as a waiter), publishing
    nothing; once the lock is free it publishes a whole pair and leaves nothing else."""
    if not os.path.exists("/proc/locks"):
        pytest.skip("no /proc/locks to see the waiter in")
    source = _save_model(tmp_path, "a.onnx", seed=1)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = str(out_dir / "m.onnx")
    fd = os.open(lock_path(out), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    writer = None
    try:
        writer = subprocess.Popen(
            onnxfold_argv("optimize", source, "-o", out, "--external-data", "yes"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + TIMEOUT
        while not _blocked_on(lock_path(out), writer.pid):
            assert writer.poll() is None, writer.communicate()
            assert time.monotonic() < deadline, "the writer never waited for the lock"
            time.sleep(0.05)
        waiting = set(os.listdir(out_dir)) - {os.path.basename(lock_path(out))}
        assert len(waiting) == 2 and "m.onnx" not in waiting  # written, not published
        assert not os.path.exists(out)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    _, err = writer.communicate(timeout=TIMEOUT)
    assert writer.returncode == 0, err
    _computes_one_of(out, [source])
    assert sorted(os.listdir(out_dir)) == sorted({"m.onnx", *_data_of(out)})


def test_two_concurrent_writers_leave_one_whole_pair(tmp_path):
    sources = [_save_model(tmp_path, f"{name}.onnx", seed) for seed, name in enumerate("ab")]
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = str(out_dir / "m.onnx")
    for _ in range(3):
        writers = [subprocess.Popen(onnxfold_argv("optimize", source, "-o", out,
                                                  "--external-data", "yes"),
                                    stderr=subprocess.PIPE, text=True) for source in sources]
        for writer in writers:
            _, err = writer.communicate(timeout=TIMEOUT)
            assert writer.returncode == 0, err
        _computes_one_of(out, sources)
        assert sorted(os.listdir(out_dir)) == sorted({"m.onnx", *_data_of(out)})


def _split_source(path, tag: str) -> str:
    """y = x @ W + (x @ A) @ B, A and B runtime constants named ``A<tag>``, ``B<tag>``: the
    runtime fold merges them into W, and every part of its split names them."""
    f = TensorProto.FLOAT
    w = numpy_helper.from_array(np.ones((N, N), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["base"]),
         helper.make_node("MatMul", ["x", f"A{tag}"], ["xa"]),
         helper.make_node("MatMul", ["xa", f"B{tag}"], ["xab"]),
         helper.make_node("Add", ["base", "xab"], ["y"])],
        "g", [helper.make_tensor_value_info("x", f, [2, N]),
              helper.make_tensor_value_info(f"A{tag}", f, [N, 2]),
              helper.make_tensor_value_info(f"B{tag}", f, [2, N])],
        [helper.make_tensor_value_info("y", f, [2, N])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    return str(path)


def test_two_splits_into_one_directory_leave_one_splits_parts(tmp_path):
    """The second split waits for the first (its manifest's lock) instead of publishing its
    parts between the first's: entry, runtime_fold and manifest are all of one source."""
    if not os.path.exists("/proc/locks"):
        pytest.skip("no /proc/locks to see the waiter in")
    first, second = _split_source(tmp_path / "a.onnx", "1"), _split_source(tmp_path / "b.onnx", "2")
    out, pauses = tmp_path / "sp", tmp_path / "pauses"
    pauses.mkdir()
    paused = subprocess.Popen(onnxfold_argv("split", first, "--runtime-const", "A1", "B1", "-o",
                                            out),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, PAUSE_AT_ENV: "saving",
                                   PAUSE_DIR_ENV: str(pauses)})
    deadline = time.monotonic() + TIMEOUT
    while not os.listdir(pauses):  # the first holds the lock, inside its first save
        assert paused.poll() is None and time.monotonic() < deadline, paused.communicate()
        time.sleep(0.01)
    other = subprocess.Popen(onnxfold_argv("split", second, "--runtime-const", "A2", "B2", "-o",
                                           out),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = lock_path(str(out / "manifest.json"))
    while not _blocked_on(lock, other.pid):
        assert other.poll() is None and time.monotonic() < deadline, other.communicate()
        time.sleep(0.05)
    while paused.poll() is None:  # it pauses at each part's save: let it go on each time
        for marker in os.listdir(pauses):
            os.unlink(pauses / marker)
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for proc in (paused, other):
        assert proc.wait(TIMEOUT) == 0, proc.communicate()
    with open(out / "manifest.json") as f:
        manifest = json.load(f)
    fold = [i.name for i in onnx.load(str(out / "runtime_fold.onnx")).graph.input]
    assert manifest["runtime_constants"] == ["A2", "B2"]  # the second, written after the first
    assert sorted(fold) == sorted(i["name"] for i in manifest["runtime_fold"]["inputs"]) == \
        ["A2", "B2"]


@pytest.mark.parametrize("errno_", [1, 28], ids=["no-hard-links", "disk-full"])
def test_a_directory_that_refuses_the_plain_name_keeps_the_fresh_one(tmp_path, monkeypatch,
                                                                    errno_):
    """Giving the data its plain name back is a courtesy: where the directory refuses a step
    (a file system without hard links: EPERM; a full disk: ENOSPC), the published pair stands
    under the fresh name, the save succeeds, and nothing else is left."""
    import onnxfold
    from onnxfold.io.pinned import PinnedDirectory

    model = _save_model(tmp_path, "m.onnx", seed=0)
    pristine = _pristine_copy(model, tmp_path / "old")

    def refused(self, source, target):
        raise OSError(errno_, os.strerror(errno_))

    output = str(tmp_path / "o.onnx")
    onnxfold.optimize(model).save(output, external_data=True)  # o.onnx.data: the plain name
    monkeypatch.setattr(PinnedDirectory, "link", refused)
    info = onnxfold.optimize(model).save(output, external_data=True)  # again: a fresh name
    (data,) = _data_of(output)
    assert re.fullmatch(r"o\.onnx\.onnxfold-[0-9a-f]{8}\.data", data)
    assert data in str(info.data_path)
    assert sorted(os.listdir(tmp_path)) == sorted(["m.onnx", "m.onnx.data", "o.onnx", data,
                                                   "old"])
    _computes_one_of(output, [pristine])
