"""Keep a library's logger quiet where onnxfold speaks for itself."""

from __future__ import annotations

import contextlib
import logging
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
