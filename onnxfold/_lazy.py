"""Package attributes imported on first use (a module ``__getattr__``, PEP 562)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_attributes(namespace: dict[str, Any], homes: dict[str, str],
                    public: Callable[[str, Any], Any] | None = None
                    ) -> Callable[[str], object]:
    """A ``__getattr__`` for the package whose ``globals()`` is ``namespace``: it imports
    ``name`` from ``<package>.<homes[name]>`` on first access and stores it in ``namespace``
    (``public(name, value)`` of it when given), so later accesses find it there and cost
    nothing (PEP 562 calls ``__getattr__`` only for names the module's globals lack)."""
    package = namespace["__name__"]

    def import_on_first_use(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        if public is not None:
            value = public(name, value)
        namespace[name] = value
        return value

    return import_on_first_use
