"""What an output's external-data file is called: by the input's convention.

torch and onnx name a model's data ``model.onnx.data``; optimum and transformers
``model.onnx_data``, and optimum's hub loader fetches ``<file>_data`` beside a model, so a
folded model whose data was renamed ``.data`` loads locally but loses its weights once pushed
to a hub. The output's data keeps the suffix the input's had after the input's own file name
(``m.onnx_data`` -> ``out.onnx_data``; in place, the same name); any other name, or none,
gives ``.data``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from onnxfold.io.publication import requested_of

SUFFIXES = ("_data", ".data")  # the conventions an output's data file follows
DEFAULT_SUFFIX = ".data"


def data_suffix(source: str | None, data_files: Iterable[str]) -> str:
    """The suffix of ``data_files`` (paths a model read from ``source``) after ``source``'s
    own file name, where it is one of :data:`SUFFIXES`; else :data:`DEFAULT_SUFFIX`. A data
    file published under a fresh name (``m.onnxfold-3f9a0c12.onnx_data``, a write killed before its
    data took back its name) stands for the name it was asked for."""
    if source is None:
        return DEFAULT_SUFFIX
    names = {requested_of(name) or name for name in map(os.path.basename, data_files)}
    stem = os.path.basename(source)
    return next((suffix for suffix in SUFFIXES if stem + suffix in names
                 or _links_to(source + suffix, data_files)), DEFAULT_SUFFIX)


def _links_to(path: str, data_files: Iterable[str]) -> bool:
    """Whether ``path`` (beside the model as it was named) leads to one of ``data_files``: a
    data file reached through a symlink keeps the name the model gave it."""
    if not os.path.islink(path):
        return False
    try:
        return any(os.path.samefile(path, data) for data in data_files)
    except OSError:
        return False


def with_own_data(paths: Iterable[str | os.PathLike]) -> list[str]:
    """``paths`` (models a save may replace: written over themselves) and the data files each
    may own by these conventions (``m.onnx.data``, ``m.onnx_data``), which a model written in
    place replaces with its own."""
    return [name for path in paths for name in
            (os.fspath(path), *(os.fspath(path) + suffix for suffix in SUFFIXES))]


def expected_data_suffix(source: str) -> str:
    """:func:`data_suffix` before ``source`` is read: the suffix whose file lies beside it
    (``.data`` where both or neither do), for claiming the output's names early."""
    found = [suffix for suffix in SUFFIXES if os.path.isfile(source + suffix)]
    return found[0] if len(found) == 1 else DEFAULT_SUFFIX


__all__ = ["DEFAULT_SUFFIX", "SUFFIXES", "data_suffix", "expected_data_suffix", "with_own_data"]
