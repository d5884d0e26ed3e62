"""Warm the output file's pages on the idle core while the model is read and folded.

Writing a few hundred MB into new page-cache pages is most of what saving costs once the
weights are laid out, and on virtual machines whose free memory is handed back to the host
(free page reporting, ballooning) the first touch of each page costs several times more, and
varies from run to run. Folding is single-threaded Python, so the second core is free: an
I/O thread (``onnxfold.io.threads``) fills the output's temporary file with zeros meanwhile,
and the writer then overwrites pages that are already in the page cache, and truncates the
file to the model's size.

Standard library only, so the CLI can start it before numpy, onnx and onnx-ir are imported.
"""

from __future__ import annotations

import contextlib
import os
import threading

from onnxfold.host.endings import uninterrupted
from onnxfold.io.pinned import PinnedOutput
from onnxfold.io.tempfiles import temporary
from onnxfold.io.threads import submit

AVAILABLE = hasattr(os, "pwrite")  # not on Windows
PREFILL_LIMIT = 1 << 30  # bigger outputs take long to fold; zeros kept that long get written back
_PIECE = 8 << 20


class OutputPrefill:
    """A temporary file beside ``output`` that an I/O thread fills with ``nbytes`` zeros.

    Pass it to ``save_model(..., prefill=...)``, which takes the file over; if it is never
    taken, ``discard`` (or leaving the ``with`` block) stops the filling and deletes the file.
    """

    def __init__(self, output: PinnedOutput, nbytes: int) -> None:
        self.output = output
        self.target = max(0, min(int(nbytes), PREFILL_LIMIT))
        self.filled = 0
        fd, self.tmp = temporary(output.directory, output.name)
        self.fd: int | None = fd  # None once taken or discarded
        self._stop = threading.Event()
        self._job = submit(self._fill)

    def _fill(self) -> None:
        zeros = memoryview(bytes(min(_PIECE, self.target)))
        assert self.fd is not None  # cleared only after this job ended
        try:
            while self.filled < self.target and not self._stop.is_set():
                size = min(len(zeros), self.target - self.filled)
                self.filled += os.pwrite(self.fd, zeros[:size], self.filled)
        except OSError:
            pass  # e.g. a full disk: the writer meets it again and reports it

    def _halt(self) -> None:
        self._stop.set()
        if not self._job.cancel():  # never leave it writing to a closed descriptor
            uninterrupted(self._job.exception)

    def take(self, output: PinnedOutput) -> tuple[int, str] | None:
        """Hand the file over for writing ``output``: ``(fd, temporary file's name)``, or None
        if the prefill was made for another output (or already taken)."""
        if self.fd is None or output is not self.output:
            return None
        self._halt()
        taken = (self.fd, self.tmp)
        self.fd = None
        return taken

    def discard(self) -> None:
        """Stop filling and delete the temporary file, unless it was taken."""
        if self.fd is None:
            return
        self._halt()
        os.close(self.fd)
        self.fd = None
        with contextlib.suppress(FileNotFoundError):
            self.output.directory.unlink(self.tmp)

    def __enter__(self) -> OutputPrefill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()
