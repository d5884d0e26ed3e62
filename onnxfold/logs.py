"""Keep a library's logger quiet where onnxfold speaks for itself."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator


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
