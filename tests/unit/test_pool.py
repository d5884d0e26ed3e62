"""The buffer pool: reference counts, views and peak accounting."""

import mmap

import numpy as np
import pytest

from onnxfold.fold.pool import BufferPool


def test_entry_freed_when_last_reader_releases():
    pool = BufferPool()
    a = np.ones(1000, np.float32)
    pool.put("a", a, count=2)
    assert pool.live_bytes == 4000
    pool.release("a")
    assert "a" in pool and pool.live_bytes == 4000
    pool.release("a")
    assert "a" not in pool and pool.live_bytes == 0
    assert pool.peak_bytes == 4000


def test_zero_count_is_dropped_at_once():
    pool = BufferPool()
    pool.put("dead", np.zeros(10), count=0)
    assert "dead" not in pool and pool.live_bytes == 0 and pool.peak_bytes == 80


def test_views_share_their_base_and_keep_it_alive():
    pool = BufferPool()
    base = np.arange(100, dtype=np.int64)
    pool.put("base", base, count=1)
    pool.put("view", base.reshape(10, 10).T, count=1)
    assert pool.live_bytes == 800  # the view costs nothing
    pool.release("base")
    assert pool.live_bytes == 800  # still owned through the view
    pool.release("view")
    assert pool.live_bytes == 0
    assert pool.peak_bytes == 800


def test_peak_tracks_the_maximum_live_set():
    pool = BufferPool()
    pool.put("x", np.zeros(100, np.uint8), 1)
    pool.put("y", np.zeros(200, np.uint8), 1)
    pool.release("x")
    pool.put("z", np.zeros(50, np.uint8), 1)
    assert pool.peak_bytes == 300 and pool.live_bytes == 250


def test_sources_and_mapped_arrays_are_not_heap(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(np.arange(256, dtype=np.float32).tobytes())
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    pool = BufferPool()
    pool.put("mapped", np.frombuffer(mm, np.float32), 1)
    pool.put("weight", np.ones(10, np.float32), 1, source=True)
    assert pool.live_bytes == 0 and pool.peak_bytes == 0
    pool.release("mapped")
    pool.release("weight")
    assert "mapped" not in pool and "weight" not in pool and pool.live_bytes == 0


def test_hold_and_over_release():
    pool = BufferPool()
    pool.put("k", np.ones(3), 1)
    pool.hold("k")
    pool.release("k", 2)
    assert "k" not in pool
    pool.put("j", np.ones(3), 1)
    with pytest.raises(RuntimeError):
        pool.release("j", 2)


def test_duplicate_key_rejected():
    pool = BufferPool()
    pool.put("k", np.ones(3), 1)
    with pytest.raises(KeyError):
        pool.put("k", np.ones(3), 1)


def test_memory_limit_spills_largest_buffers_to_disk():
    pool = BufferPool(memory_limit=3000)
    a = np.arange(500, dtype=np.float32)  # 2000 B
    b = np.arange(400, dtype=np.float32)  # 1600 B
    pool.put("a", a, 1)
    pool.put("b", b, 1)  # 3600 B > limit: the largest ("a") moves to a file
    assert pool.live_bytes == 1600 and pool.spilled == 1 and pool.spilled_bytes == 2000
    assert isinstance(pool.get("a"), np.memmap)
    np.testing.assert_array_equal(pool.get("a"), np.arange(500, dtype=np.float32))
    assert pool.peak_bytes == 3600  # the moment before the spill
    pool.release("a")
    pool.release("b")
    assert pool.live_bytes == 0 and len(pool) == 0


def test_spill_skips_shared_buffers_and_keeps_scalars_scalar():
    pool = BufferPool(memory_limit=130)
    base = np.arange(16, dtype=np.int64)  # 128 B
    pool.put("base", base, 1)
    pool.put("view", base[::2], 1)  # shares base's memory: spilling it would free nothing
    pool.put("s", np.array(7, np.int64), 1)  # 136 B > limit: only "s" owns its memory alone
    assert pool.spilled == 1 and pool.live_bytes == 128
    assert pool.get("s").shape == () and int(pool.get("s")) == 7
    pool.release("view")
    pool.put("t", np.array(8, np.int64), 1)  # now base owns its memory alone: it moves
    assert pool.spilled == 2 and pool.live_bytes == 8
    np.testing.assert_array_equal(pool.get("base"), np.arange(16))
