"""The public API takes its options by keyword (issue 66, item 5): a function of
``onnxfold.__all__`` takes by position only what it is about (parameters without a default:
the models, the paths), an option (a parameter with a default) only by keyword, and the
result and option classes take nothing by position, so that no caller's positional call can
silently give ``rtol`` an ``atol``, or an onnxsim-style ``simplify(model, 3, True)`` give
``input_shapes`` a bool. Three options stay positional: ``simplify``'s ``check_n`` (onnxsim's
second argument), ``Session``'s ``runtime_constants`` (what sets it apart from an
``InferenceSession``), and ``optimize``'s ``options`` (a ``FoldOptions``: no other value can
take its place unnoticed)."""

from __future__ import annotations

import inspect

import pytest

import onnxfold

POSITIONAL_OPTIONS = {"simplify": {"check_n"}, "Session": {"runtime_constants"},
                      "optimize": {"options"}}
RESULTS = {"CompareResult", "FoldOptions", "FoldStats", "LatencyResult", "OptimizeResult",
           "Report"}


def _callables():
    for name in onnxfold.__all__:
        found = getattr(onnxfold, name)
        if inspect.isclass(found) and issubclass(found, BaseException):
            continue
        yield name, found.__init__ if inspect.isclass(found) else found


def _positional(function) -> tuple[list[str], list[str]]:
    """``function``'s parameters taken by position: (all of them, those with a default)."""
    params = [p for p in inspect.signature(function).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
              and p.name not in ("self", "cls")]
    return [p.name for p in params], [p.name for p in params if p.default is not p.empty]


@pytest.mark.parametrize(("name", "function"), list(_callables()),
                         ids=[name for name, _ in _callables()])
def test_a_public_callable_takes_its_options_by_keyword(name, function):
    try:
        every, options = _positional(function)
    except (TypeError, ValueError):  # a builtin's signature: nothing of ours
        return
    if name in RESULTS:
        assert every == [], f"{name}: {every} by position"
    else:
        assert set(options) <= POSITIONAL_OPTIONS.get(name, set()), \
            f"{name}: options {options} by position"


def test_the_scan_sees_a_positional_option():
    """The scan can fail: an option a caller may give by position is listed."""
    def loose(model, path, verbose=False):
        return model, path, verbose

    assert _positional(loose) == (["model", "path", "verbose"], ["verbose"])
