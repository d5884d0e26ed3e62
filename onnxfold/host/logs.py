"""Keep libraries quiet where onnxfold speaks for itself: a Python logger's notices, and
onnxruntime's own (native) ones."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import re
import sys
import types
from collections.abc import Iterator, Sequence


@contextlib.contextmanager
def quiet(logger: str) -> Iterator[None]:
    """Only errors of ``logger`` while the block runs (its level is restored after)."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


class _OncePerMessage(logging.Handler):
    """Prints each distinct record once, as one ``onnxfold: warning:`` line on stderr."""

    def __init__(self, source: str) -> None:
        super().__init__(logging.WARNING)
        self.source = source
        self.seen: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        message = " ".join(record.getMessage().split())
        if message not in self.seen:
            self.seen.add(message)
            print(f"onnxfold: warning: {self.source}: {message}", file=sys.stderr)


@contextlib.contextmanager
def as_warnings(logger: str, source: str) -> Iterator[None]:
    """``logger``'s warnings as one ``onnxfold: warning: SOURCE: ...`` line each, a message
    said once however often the library logs it (onnx-ir warns on every save of a model)."""
    log = logging.getLogger(logger)
    handler = _OncePerMessage(source)
    propagate = log.propagate
    log.addHandler(handler)
    log.propagate = False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.propagate = propagate


# onnxruntime's log lines: "<colour>DATE [W:onnxruntime:Default, file.cc:613 fn] message<reset>"
_ORT_NOTICE = re.compile(r"\[[VIW]:onnxruntime:")
ORT_ERROR = 3  # onnxruntime's logging severity: 0 verbose ... 3 error, 4 fatal


def quiet_onnxruntime_startup() -> None:
    """Keep onnxruntime's own notices (verbose, info, warning) off stderr: those it prints as it
    is imported (with a read-only HOME, that it cannot persist a telemetry device ID) and
    those of its default logger later. Its errors still show; onnxfold's sessions set their
    own severity. onnxruntime is imported lazily, so this takes effect at that import (an
    import hook), or at once when it is already imported."""
    module = sys.modules.get("onnxruntime")
    if module is not None:
        module.set_default_logger_severity(ORT_ERROR)
    elif not any(isinstance(f, _QuietImportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietImportFinder())


class _QuietImportFinder(importlib.abc.MetaPathFinder):
    """Finds ``onnxruntime`` as the other finders do, with a loader that imports it quietly."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "onnxruntime":
            return None
        sys.meta_path.remove(self)  # once; and the search below must not come back here
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _QuietLoader(spec.loader)
        return spec


class _QuietLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        with _stderr_without(_ORT_NOTICE):
            self.loader.exec_module(module)
        module.set_default_logger_severity(ORT_ERROR)


@contextlib.contextmanager
def _stderr_without(notice: re.Pattern[str]) -> Iterator[None]:
    """Run the block with file descriptor 2 (where native code writes, past ``sys.stderr``)
    pointing at an anonymous in-memory file; afterwards write what came, less the lines
    matching ``notice``, to ``sys.stderr``. No thread and no temporary directory: this runs
    as onnxruntime is imported, possibly under a tight ``ulimit -v`` or with no usable TMPDIR.
    Where the in-memory file is unavailable (not Linux), nothing is filtered."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, AttributeError):  # no stderr (closed; sys.stderr None): nothing to keep
        yield
        return
    try:
        capture = os.memfd_create("onnxfold-stderr", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        os.close(saved)
        yield
        return
    os.dup2(capture, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        size = os.lseek(capture, 0, os.SEEK_END)
        text = os.pread(capture, size, 0).decode(errors="replace")
        os.close(capture)
        kept = [line for line in text.splitlines(keepends=True) if not notice.search(line)]
        if kept and sys.stderr is not None:
            sys.stderr.write("".join(kept))
            sys.stderr.flush()
