"""``python -m onnxfold`` and the ``onnxfold`` executable: signals first, then the command line.

SIGINT, SIGTERM and SIGHUP are taken over (``onnxfold.host.endings``) before anything heavy is
imported, so a Ctrl-C while onnxruntime, onnx and numpy load ends the run in one line too: it
is held until the command line is imported, then ends it.
"""

from __future__ import annotations

import os

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
        endings.announce()
        os._exit(endings.exit_code(e))
    entry_point()


if __name__ == "__main__":
    main()
