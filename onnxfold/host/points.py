"""Named points of a run where tests act on it (standard library only; off unless asked).

Tests of what a kill, a signal or a moved directory leaves need the run at a known step, not
somewhere after a guessed delay. :func:`reached` does what these test-only variables ask when
the run reaches the point they name (``STEPS`` of ``onnxfold.io.publication``, or ``start``,
``claimed``, ``loaded``, ``folding``, ``saving``, ... where the code calls :func:`reached`):

- ``ONNXFOLD_TEST_KILL_AT=POINT``: the process kills itself with SIGKILL there;
- ``ONNXFOLD_TEST_HANG_AT=POINT``: it sleeps there until killed from outside;
- ``ONNXFOLD_TEST_PAUSE_AT=POINT[,POINT...]`` with ``ONNXFOLD_TEST_PAUSE_DIR=DIR``: it writes
  ``DIR/POINT.PID`` and waits, in short sleeps (so a signal acts at once), until that file is
  removed; then it goes on.
"""

from __future__ import annotations

import os
import signal
import time

KILL_AT_ENV = "ONNXFOLD_TEST_KILL_AT"
HANG_AT_ENV = "ONNXFOLD_TEST_HANG_AT"
PAUSE_AT_ENV = "ONNXFOLD_TEST_PAUSE_AT"
PAUSE_DIR_ENV = "ONNXFOLD_TEST_PAUSE_DIR"
_PAUSE_POLL = 0.01  # seconds between looks at the pause file


def reached(point: str) -> None:
    """The run is at ``point``: kill, hang or pause here if a test asked to."""
    environ = os.environ
    if KILL_AT_ENV not in environ and HANG_AT_ENV not in environ and PAUSE_AT_ENV not in environ:
        return
    if environ.get(KILL_AT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
    if environ.get(HANG_AT_ENV) == point:
        while True:
            time.sleep(3600)
    directory = environ.get(PAUSE_DIR_ENV)
    if directory and point in environ.get(PAUSE_AT_ENV, "").split(","):
        _pause(os.path.join(directory, f"{point}.{os.getpid()}"))


def _pause(marker: str) -> None:
    with open(marker, "w") as f:
        f.write(str(os.getpid()))
    while os.path.exists(marker):
        time.sleep(_PAUSE_POLL)
