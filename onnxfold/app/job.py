"""One model of a batch, in its own process: ``python -m onnxfold.app.job ORDER_FILE``.

The batch (:mod:`onnxfold.app.batch`) writes the job's order (``onnxfold.app.commands.JobOrder``:
the model's job and the settings it runs with, typed values, pickled) and starts this module;
the job runs it through the command line's one-model path (:func:`onnxfold.app.cli.run_job`,
its exit codes included). Signals are taken over first (``onnxfold.host.endings``): the batch
passes SIGINT or SIGTERM on to its jobs, and each ends as a one-model run does. The batch
names this module and never imports the command line, which imports the batch.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys

from onnxfold.host import endings


def run_job(path: str) -> None:
    """A job's process: the one-model ``optimize`` of the pickled order in ``path`` (written
    by the batch's process, in the job's private directory), then exit with its code."""
    try:
        with endings.deferred():  # a signal while the command line is imported ends it after
            from onnxfold.app import cli
    except KeyboardInterrupt as e:
        os._exit(endings.exit_code(e))
    with open(path, "rb") as f:
        order = pickle.load(f)  # safe: the batch process wrote it, in a 0700 directory
    code = cli.run_job(order)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    endings.install()
    run_job(sys.argv[1])
