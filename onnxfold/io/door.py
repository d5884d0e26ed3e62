"""The one door every command and every public function claims its output paths through, before
any work (``docs/files-and-safety.md``, "One door").

:func:`claimed` takes everything a run writes (models, external data, adapters, manifests,
JSON and HTML reports) and everything it reads (models, with the files their weights are read
from; arrays; adapters), and returns the :class:`~onnxfold.io.outputs.OutputGuard` that has
claimed the outputs: each checked (never an input, its external data, another output, a FIFO,
socket, device or directory, a link to nothing; its directory one a file can be made in) and
its directory pinned. The command line and the Python API call the same function with the same
paths, so what one refuses the other refuses. A file the run reads is opened through
``onnxfold.io.opener``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence

from onnxfold.errors import OnnxfoldError
from onnxfold.io.outputs import OutputGuard
from onnxfold.io.pinned import PinnedOutput

Path = str | os.PathLike
Claim = tuple[Path | PinnedOutput | None, str]  # an output (None: not asked for), and what it is


def claimed(outputs: Sequence[Claim], inputs: Iterable[Path] = (), models: Iterable[Path] = (),
            replaceable: Iterable[Path] = (), guard: OutputGuard | None = None
            ) -> OutputGuard:
    """The guard that protects ``inputs`` and ``models`` (and the files the models' weights
    are read from) and has claimed and pinned each of ``outputs``, in order (the first of two
    on one path is named in the refusal); ``replaceable``: inputs the caller asked to replace
    (``optimize M -o M``). A model that cannot be read is protected by its path alone (the
    command says why it cannot read it, in its turn). The caller closes the guard."""
    from onnxfold.io.reader import load_model
    from onnxfold.io.writer import input_files

    models = [os.fspath(m) for m in models]
    guard = guard or OutputGuard([*models, *inputs], replaceable)
    try:
        for model in models:
            with contextlib.suppress(OnnxfoldError):
                guard.protect(input_files(load_model(model, check=False)))
        for path, what in outputs:
            if path is not None:
                guard.pin(path, what)
    except BaseException:
        guard.close()
        raise
    return guard
