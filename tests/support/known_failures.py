"""Parameters of a test some of whose values fail today, each for a reason written down."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest


def with_known(values: Iterable, known: Mapping, raises: type[BaseException] | None = None
               ) -> list:
    """``values`` as pytest parameters, each one ``known`` holds a strict xfail with its
    reason (``raises``: the exception its failure must raise): a fix makes it XPASS, which
    fails the run until the value leaves ``known``."""
    return [pytest.param(value, marks=pytest.mark.xfail(strict=True, raises=raises,
                                                        reason=known[value]))
            if value in known else value for value in values]
