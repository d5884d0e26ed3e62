"""Defer importing sympy until something uses it.

onnx-ir imports sympy at start-up (0.4 s, a third of a BERT fold) but only needs it for
arithmetic on symbolic dimensions, which folding never does. Placeholder modules stand in for
sympy and for onnx-ir's parser of symbolic expressions (which reads sympy at import) in
``sys.modules``; the first attribute read imports the real module and the placeholder forwards
to it from then on. Nothing changes when sympy is already imported or absent.

Not ``importlib.util.LazyLoader`` (the importlib documentation's lazy-import recipe): a lazy
module runs its code on *any* attribute read, and the ``import sympy`` statement in onnx-ir's
``_core`` reads ``sympy.__spec__`` (the import system checks whether the module is still
initializing), so sympy would load at once, as without deferral (CPython 3.11 to 3.13). A
placeholder is a plain module whose ``__spec__`` is an ordinary attribute: only a real name
(``sympy.Max``) triggers the import.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types

_lock = threading.RLock()  # loading one placeholder may load another


class _DeferredModule(types.ModuleType):
    """Stands in for a module until one of its attributes is read."""

    def __getattr__(self, name: str):
        with _lock:
            real = sys.modules.get(self.__name__)
            if real is self or real is None:
                del sys.modules[self.__name__]
                real = importlib.import_module(self.__name__)
            self.__dict__.update(real.__dict__)
        return getattr(real, name)


def defer(module_name: str, *users: str) -> None:
    """Install placeholders for ``module_name`` and the modules ``users`` that read it at import.

    Does nothing when ``module_name`` is already imported or not installed.
    """
    if module_name in sys.modules or importlib.util.find_spec(module_name) is None:
        return
    for name in (module_name, *users):
        sys.modules.setdefault(name, _DeferredModule(name))
