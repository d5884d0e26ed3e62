"""``python -m onnxfold`` and the ``onnxfold`` executable: signals first, then the command line.

SIGINT, SIGTERM and SIGHUP are taken over (``onnxfold.host.endings``) before anything heavy is
imported, so a Ctrl-C while onnxruntime, onnx and numpy load ends the run in one line too: it
is held until the command line is imported, then ends it. A SIGINT that comes while they load
where no thread can start is the machine's limit, not a Ctrl-C: OpenBLAS (numpy's) raises
SIGINT itself when it cannot start its threads (a cgroup's ``pids.max``, ``ulimit -u``), and
the run ends as any run the machine cannot carry does: one ``onnxfold: error:`` line, exit 2.
"""

from __future__ import annotations

import os
import threading

from onnxfold.host import endings
from onnxfold.host.points import reached


def main() -> None:
    """Take the signals over, import the command line, run it (``cli.entry_point`` exits)."""
    endings.install()
    try:
        reached("start")
        with endings.deferred():
            reached("importing")
            from onnxfold.app.cli import entry_point
    except KeyboardInterrupt as e:
        if not _thread_starts():
            os.write(2, NO_THREAD)
            os._exit(2)
        endings.announce()
        os._exit(endings.exit_code(e))
    entry_point()


NO_THREAD = (b"onnxfold: error: cannot start a thread while numpy and onnxruntime load (a limit "
             b"on this process's tasks: a cgroup's pids.max, ulimit -u); nothing was written\n")


def _thread_starts() -> bool:
    """Whether a thread can start now."""
    try:
        thread = threading.Thread(target=lambda: None, name="onnxfold-probe")
        thread.start()
    except RuntimeError:  # "can't start new thread"
        return False
    thread.join()
    return True


if __name__ == "__main__":
    main()
