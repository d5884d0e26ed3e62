"""The hostile-paths grid calls a cell hung by its progress, not by a wall (issue 64: the grid
failed once on a fresh clone, "still running after 20 s", while the disk was busy with a sync):
a cell that waits without computing is hung after HANG_PERIODS quiet periods; one that computes
is not, however long it runs."""

from __future__ import annotations

import time

import pytest

from tests.support import hostile_paths


@pytest.fixture
def short(monkeypatch):
    monkeypatch.setattr(hostile_paths, "HANG_SECONDS", 1)
    monkeypatch.setattr(hostile_paths, "HANG_PERIODS", 2)


def test_a_wait_without_progress_is_hung(short):
    with pytest.raises(hostile_paths.Hung, match="no progress"), hostile_paths._bounded():
        time.sleep(30)  # what a FIFO's open does: no CPU


def test_a_computing_cell_is_never_hung(short):
    with hostile_paths._bounded():
        end = time.process_time() + 3.5  # past HANG_PERIODS * HANG_SECONDS, computing
        while time.process_time() < end:
            sum(range(10_000))
