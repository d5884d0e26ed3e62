"""The real clients' model directories for the tests (``bench.client_models``): each flow's
directory and its reference generation made once per cache key (``ONNXFOLD_CLIENTS_CACHE`` or
``~/.cache/onnxfold-clients``; the key is the flows module's own digest), optimum's pinned
overlay installed on first use. xdist workers make one at a time (a lock in the cache); where
the registry cannot be reached for the overlay, or genai is not installed, the test skips
saying why."""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bench import client_models

TIMEOUT = 600  # a child making or generating (an export of a tiny model takes ~20 s)


def _key() -> str:
    return hashlib.sha256(Path(client_models.__file__).read_bytes()).hexdigest()[:12]


def _overlay(flow: client_models.Flow) -> Path | None:
    if flow.client != "optimum":
        if importlib.util.find_spec("onnxruntime_genai") is None:
            pytest.skip("onnxruntime-genai is not installed (the exports extra has it)")
        return None
    try:
        return client_models.optimum_overlay()
    except subprocess.CalledProcessError as e:  # pip: no registry, or a pin it cannot find
        pytest.skip(f"optimum's overlay not installed: {(e.stderr or '').strip()[-300:]}")


def run_flow(flow: client_models.Flow, *args: str | Path) -> None:
    """Run ``bench.client_models`` with ``args`` for ``flow`` (optimum's under its overlay);
    AssertionError with the child's stderr where it fails."""
    cmd, env = client_models.child_command(flow, *args, overlay=_overlay(flow))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, f"{' '.join(map(str, args))}: {done.stderr[-2000:]}"


def made(name: str) -> tuple[Path, Path]:
    """Flow ``name``'s directory as its client made it, and its reference generation (.npz),
    made on first use into the cache."""
    flow = client_models.FLOWS[name]
    cache = client_models.cache_dir() / "models"
    directory, reference = cache / f"{name}-{_key()}", cache / f"{name}-{_key()}.npz"
    if reference.exists():
        return directory, reference
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "make.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not reference.exists():
            shutil.rmtree(directory, ignore_errors=True)
            staging = reference.with_suffix(".tmp.npz")
            run_flow(flow, "make", name, directory, staging)
            os.replace(staging, reference)
    return directory, reference


def generation(path: Path) -> dict[str, np.ndarray]:
    """A generation a flow saved: ``tokens``, ``logits`` (each step's), ``files`` read."""
    with np.load(path) as found:
        return {key: found[key] for key in found.files}
