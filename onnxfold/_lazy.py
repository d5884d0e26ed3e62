"""Package attributes imported on first use (a module ``__getattr__``, PEP 562)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_attributes(package: str, homes: dict[str, str]) -> Callable[[str], object]:
    """A ``__getattr__`` for ``package`` that imports ``name`` from ``package.<homes[name]>``
    on first access and keeps it in the package, so later accesses cost nothing."""

    def import_on_first_use(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return import_on_first_use
