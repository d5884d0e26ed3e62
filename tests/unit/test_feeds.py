"""Untrusted .npz files (``--inputs``, Session caches): plain arrays only, bounded before read."""

from __future__ import annotations

import numpy as np
import pytest

from onnxfold.errors import InputError
from onnxfold.io.feeds import load_arrays


def test_plain_arrays_load(tmp_path):
    path = tmp_path / "f.npz"
    np.savez(path, x=np.arange(6).reshape(2, 3), y=np.float32(1.5))
    arrays = load_arrays(path)
    assert arrays["x"].tolist() == [[0, 1, 2], [3, 4, 5]] and arrays["y"] == 1.5


@pytest.mark.parametrize("content", [b"not a zip", b"PK\x03\x04garbage"])
def test_garbage_is_one_error(tmp_path, content):
    path = tmp_path / "f.npz"
    path.write_bytes(content)
    with pytest.raises(InputError, match=r"not an \.npz"):
        load_arrays(path)


def test_pickles_and_single_arrays_are_refused(tmp_path):
    np.savez(tmp_path / "o.npz", o=np.array([{"a": 1}], dtype=object))
    with pytest.raises(InputError, match="object arrays"):
        load_arrays(tmp_path / "o.npz")
    np.save(tmp_path / "a.npy", np.ones(3))
    with pytest.raises(InputError, match=r"not an \.npz"):
        load_arrays(tmp_path / "a.npy")


def test_a_decompression_bomb_is_refused_before_it_is_inflated(tmp_path):
    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, x=np.zeros(80 << 20, np.uint8))  # 80 MiB in ~80 KiB
    assert path.stat().st_size < 1 << 20
    with pytest.raises(InputError, match="decompression bomb"):
        load_arrays(path)


def test_many_members_each_under_the_bound_are_refused_as_one_bomb(tmp_path):
    """40 members of 2 MiB of zeros: each under the per-member bound, 80 MiB in ~80 KiB."""
    path = tmp_path / "members.npz"
    zeros = np.zeros(2 << 20, np.uint8)
    np.savez_compressed(path, **{f"m{i}": zeros for i in range(40)})
    assert path.stat().st_size < 1 << 20
    with pytest.raises(InputError, match="decompression bomb"):
        load_arrays(path)


def test_the_total_is_bounded(tmp_path):
    path = tmp_path / "f.npz"
    np.savez(path, x=np.zeros(1000, np.float64))
    with pytest.raises(InputError, match="larger than"):
        load_arrays(path, limit=4000)
