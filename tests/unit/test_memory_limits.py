"""The memory a process may use: cgroup v1/v2 limits found from /proc, and the pool budget."""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxfold import FoldOptions, optimize
from onnxfold.fold.budget import MAX_DEFAULT_BUDGET, default_pool_budget, pool_budget
from onnxfold.host.memory_limits import (
    cgroup_dirty_bytes,
    cgroup_limit,
    hierarchies,
    physical_memory,
)

GiB = 1 << 30


def _layout(tmp_path, cgroup: str, mounts: str) -> tuple[str, str]:
    proc_cgroup, proc_mounts = tmp_path / "cgroup", tmp_path / "mounts"
    proc_cgroup.write_text(cgroup)
    proc_mounts.write_text(mounts.format(root=tmp_path))
    return str(proc_cgroup), str(proc_mounts)


def _write(path, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def test_v2_the_tightest_limit_on_the_way_up_counts(tmp_path):
    root = tmp_path / "unified"
    _write(root / "pod" / "memory.max", str(2 * GiB))
    _write(root / "pod" / "job" / "memory.max", "max")
    files = _layout(tmp_path, "0::/pod/job\n", "cgroup2 {root}/unified cgroup2 rw 0 0\n")
    assert [h.limit_file for h in hierarchies(*files)] == ["memory.max"]
    assert cgroup_limit(*files) == 2 * GiB


def test_v1_memory_limit_in_bytes_and_no_limit_as_a_huge_number(tmp_path):
    root = tmp_path / "memory"
    _write(root / "memory.limit_in_bytes", "9223372036854771712")
    _write(root / "ci" / "memory.limit_in_bytes", str(GiB))
    files = _layout(tmp_path, "4:memory:/ci\n1:cpu:/\n",
                    "cgroup {root}/memory cgroup rw,relatime,memory 0 0\n")
    assert cgroup_limit(*files) == GiB
    _write(root / "ci" / "memory.limit_in_bytes", "9223372036854771712")
    assert cgroup_limit(*files) is None


def test_a_container_whose_cgroup_is_its_mount_root(tmp_path):
    """Under a cgroup namespace /proc/self/cgroup may name a path the mount does not show:
    the mount's own limit applies."""
    _write(tmp_path / "unified" / "memory.max", str(512 << 20))
    files = _layout(tmp_path, "0::/kubepods/pod1/abc\n",
                    "cgroup2 {root}/unified cgroup2 rw 0 0\n")
    assert cgroup_limit(*files) == 512 << 20


def test_no_cgroup_files_means_no_cgroup_limit(tmp_path):
    assert cgroup_limit(str(tmp_path / "none"), str(tmp_path / "none")) is None


def test_the_default_budget_is_a_quarter_of_what_may_be_used():
    budget = default_pool_budget()
    physical = physical_memory()
    assert budget <= MAX_DEFAULT_BUDGET
    if physical is not None:
        assert budget <= physical // 4
    limit = cgroup_limit()
    if limit is not None:
        assert budget <= limit // 4


def test_the_budget_never_exceeds_the_memory_limit():
    assert pool_budget(None, 256 << 20) == 256 << 20
    assert pool_budget(GiB, 256 << 20) == 256 << 20
    assert pool_budget(128 << 20, 256 << 20) == 128 << 20
    assert pool_budget(GiB, None) == GiB


def test_an_output_larger_than_the_memory_limit_is_refused_before_it_is_built(tmp_path):
    """It would be built on the heap before it could spill: a 64 MiB Tile under
    --memory-limit 16M is declined for its size, never allocated."""
    graph = helper.make_graph(
        [helper.make_node("Tile", ["x", "reps"], ["t"]),
         helper.make_node("ReduceMax", ["t"], ["y"], keepdims=0)], "g", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array([2.0], np.float32), "x"),
         numpy_helper.from_array(np.array([16 << 20], np.int64), "reps")])
    path = tmp_path / "tile.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    result = optimize(str(path), FoldOptions(memory_limit=16 << 20, pool_budget=GiB))
    assert [n.op_type for n in result.model.graph] == ["Tile", "ReduceMax"]
    assert result.stats.pool_peak_bytes == 0


def test_a_check_takes_at_most_three_quarters_of_what_the_host_has_available(monkeypatch):
    """Without a memory cgroup the limit is the host's RAM, which other processes share: a
    check that took all of it (a UNet's attention grew to 18.5 GB) had the kernel kill it, or
    them. The room a check's inference may take is what is left under the limit, and no more
    than 3/4 of the memory available now; under a limit, 1/8 of it is kept aside for what the
    limit charges beside the process's resident pages."""
    from onnxfold.check.running import memory as memory_room

    gib = 1 << 30
    monkeypatch.setattr(memory_room, "available_memory", lambda: 24 * gib)  # no cgroup
    monkeypatch.setattr(memory_room, "resident_bytes", lambda: 1 * gib)
    monkeypatch.setattr(memory_room, "host_available", lambda: 20 * gib)
    monkeypatch.setattr(memory_room, "cgroup_dirty_bytes", lambda: 0)
    assert memory_room.room() == 15 * gib  # not the 23 GiB the limit leaves
    monkeypatch.setattr(memory_room, "available_memory", lambda: 2 * gib)  # a 2 GiB cgroup
    headroom = gib // 4  # 1/8 of the limit: the page cache and the kernel's, charged too
    assert memory_room.room() == 1 * gib - headroom  # the cgroup's room, tighter
    monkeypatch.setattr(memory_room, "host_available", lambda: None)  # no /proc/meminfo
    assert memory_room.room() == 1 * gib - headroom
    # an output just written, not yet on disk: charged, and not droppable at once
    monkeypatch.setattr(memory_room, "cgroup_dirty_bytes", lambda: 96 << 20)
    assert memory_room.room() == 1 * gib - headroom - (96 << 20)


def test_the_dirty_page_cache_of_a_limited_cgroup_is_read_from_its_memory_stat(tmp_path):
    """v1 counts its own and its children's (total_), v2 its own (file_); a hierarchy without
    a limit on the way up counts nothing (the host's dirty pages are the kernel's to write)."""
    v1 = tmp_path / "memory"
    _write(v1 / "ci" / "memory.limit_in_bytes", str(GiB))
    _write(v1 / "ci" / "memory.stat", "cache 500\ndirty 7\nwriteback 1\ntotal_dirty 4096\n"
                                      "total_writeback 1024\n")
    files = _layout(tmp_path, "4:memory:/ci\n", "cgroup {root}/memory cgroup rw,memory 0 0\n")
    assert cgroup_dirty_bytes(*files) == 5120
    _write(v1 / "ci" / "memory.limit_in_bytes", "9223372036854771712")
    assert cgroup_dirty_bytes(*files) == 0
    v2 = tmp_path / "unified"
    _write(v2 / "job" / "memory.max", str(GiB))
    _write(v2 / "job" / "memory.stat", "file 9\nfile_dirty 2048\nfile_writeback 512\n")
    files = _layout(tmp_path, "0::/job\n", "cgroup2 {root}/unified cgroup2 rw 0 0\n")
    assert cgroup_dirty_bytes(*files) == 2560
    assert cgroup_dirty_bytes(str(tmp_path / "none"), str(tmp_path / "none")) == 0
