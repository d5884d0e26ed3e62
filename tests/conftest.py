"""Fixtures every tier shares. Helpers are plain modules in ``tests/support``."""

from __future__ import annotations

import onnx
import pytest


@pytest.fixture
def save(tmp_path):
    """Save an onnx ModelProto in tmp_path and return its path."""

    def _save(model, name="model.onnx"):
        path = str(tmp_path / name)
        onnx.save(model, path)
        return path

    return _save
