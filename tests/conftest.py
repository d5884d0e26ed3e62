"""Fixtures every tier shares. Helpers are plain modules in ``tests/support``."""

from __future__ import annotations

import signal

import onnx
import pytest

# A suite started with SIGINT ignored (in the background from a script, under nohup) would pass
# that on to every command line it runs, and onnxfold rightly keeps an ignored signal ignored
# (tests/adversarial/test_signals.py): its Ctrl-C tests would wait for runs that never end. The
# suite's own processes take SIGINT as Python does by default, so their children start with it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def save(tmp_path):
    """Save an onnx ModelProto in tmp_path and return its path."""

    def _save(model, name="model.onnx"):
        path = str(tmp_path / name)
        onnx.save(model, path)
        return path

    return _save


def pytest_addoption(parser):
    parser.addoption("--breadth", action="store_true",
                     help="also run the breadth tier: the checks CI runs on a core of exports, "
                          "models and sizes, over all of them (tests/support/breadth.py)")


def pytest_collection_modifyitems(config, items):
    """Without ``--breadth``, the breadth tier's cases are deselected (counted as such)."""
    if config.getoption("--breadth"):
        return
    left = [item for item in items if item.get_closest_marker("breadth")]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if not item.get_closest_marker("breadth")]
