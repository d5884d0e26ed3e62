"""The Python API as ``onnxfold`` exports it: the same functions and ``Session`` as the command
line runs, with their errors in a Python caller's words.

onnxfold's checks raise :class:`~onnxfold.errors.InputError` in the command line's words
(``--dim batch: ...``, ``--target-opset 99: ...``, ``model A``): one message for both surfaces,
written where the check is. A Python caller passed ``dims=``, ``target_opset=``, ``a``; a flag
in the message names nothing they wrote. The public callables (``onnxfold.optimize``,
``compare``, ``simplify``, ``measure_latency``, ``split_model``, ``write_split``, ``Session``)
are the command line's own, wrapped here (on first access, ``onnxfold/__init__.py``) so that
an ``InputError`` leaving them names the parameters instead: ``dims[batch]: ...``,
``target_opset=99: ...``, ``the model passed as a``.

The words are data: each ``FoldOptions`` field's flag (``onnxfold.pipeline.options``) maps to
the field's name, so a new option is named right with nothing added here; the flags of the
check and the runtime map to the keywords of the functions that take them (:data:`WORDS`).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from onnxfold.errors import InputError
from onnxfold.pipeline.options import FoldOptions, flag_of

F = TypeVar("F", bound=Callable[..., Any])

KEY, ENTRY, VALUE, NAME = "key", "entry", "value", "name"


@dataclass(frozen=True)
class Word:
    """A flag's Python spelling: the parameter, and how ``--flag X:`` reads there: ``key``
    (a mapping's key: ``dims[X]``), ``entry`` (an item of a sequence: ``runtime_constants
    entry X``), ``value`` (``target_opset=X``) or ``name`` (the parameter alone)."""

    parameter: str
    kind: str = VALUE


def _fold_words() -> dict[str, Word]:
    """Every ``FoldOptions`` field's flag, as the field's name."""
    words = {}
    for option in dataclasses.fields(FoldOptions):
        flag = flag_of(option)
        kind = KEY if option.name == "input_shapes" else ENTRY if flag.repeat else \
            NAME if flag.switch else VALUE
        words[flag.name] = Word(option.name, kind)
        if flag.none_flag is not None:
            words[flag.none_flag[0]] = Word(f"{option.name}=None", NAME)
    return words


# the check's and the runtime's flags, as the keywords of compare, simplify, measure_latency
# and Session
WORDS: dict[str, Word] = {
    **_fold_words(),
    "--dim NAME=VALUE": Word("dims={NAME: VALUE}", NAME),
    "--dim": Word("dims", KEY), "--int-range": Word("int_ranges", KEY),
    "--inputs": Word("inputs", NAME), "--custom-op-library": Word("custom_op_libraries", ENTRY),
    "--ort-level": Word("level"), "--rtol": Word("rtol"), "--atol": Word("atol"),
    "--seed": Word("seed"), "--runtime-const": Word("runtime_constants", ENTRY),
    "--adapter": Word("adapter"), "--cache-dir": Word("cache_dir"), "--backend": Word("backend"),
    "--latency-threads": Word("threads"), "--latency": Word("runs"),
    "--inference-timeout": Word("inference_time_limit(seconds)", NAME),
}
# the command line's flags no Python call takes (tests/unit/test_python_api_words.py holds
# that every flag is in WORDS or here)
CLI_ONLY = frozenset({
    "--help", "--version", "--debug", "--output", "--jobs", "--job-timeout", "--recursive",
    "--json", "--report", "--external-data", "--quiet", "--verbose", "--explain", "--no-verify",
    "--no-prefill", "--skip-check", "--check", "--no-fold-verification", "--no-compile-time-fold",
    "--repeat", "--compare", "--threads", "--coverage", "--shard",
})
# how the check names the models it was handed as protos (``check.running.models.label_of``)
COMPARED = {"model A": "the model passed as a", "model B": "the model passed as b"}


def python_words(message: str, models: Mapping[str, str] = COMPARED) -> str:
    """``message`` with every command-line flag of :data:`WORDS` in its Python spelling, and
    the check's names of its models (``model A``) as ``models`` says."""
    for flag, word in sorted(WORDS.items(), key=lambda kv: -len(kv[0])):  # --dim NAME=.. first
        escaped = re.escape(flag)
        message = re.sub(rf"(?<![\w-]){escaped} (?!NAME)(\S+?):(?=\s|$)",
                         functools.partial(_spelled_match, word), message)
        message = re.sub(rf"(?<![\w-]){escaped}(?![\w-])", word.parameter, message)
    for label, spelled in models.items():
        message = re.sub(rf"\b{re.escape(label)}\b", spelled, message)
    return message


def _spelled_match(word: Word, match: re.Match[str]) -> str:
    """A match of ``--flag value:`` in Python."""
    return _spelled(word, match.group(1)) + ":"


def _spelled(word: Word, value: str) -> str:
    """``--flag value`` in Python: by the kind of the parameter."""
    if word.kind == KEY:
        key, equals, rest = value.partition("=")
        return f"{word.parameter}[{key}]" + (f" = {rest}" if equals and rest != "..." else "")
    if word.kind == ENTRY:
        return f"{word.parameter} entry {value}"
    if word.kind == VALUE:
        return f"{word.parameter}={value}"
    return f"{word.parameter} {value}"


def in_python_words(function: F, models: Mapping[str, str] = COMPARED) -> F:
    """``function`` whose InputError speaks of Python parameters (:func:`python_words`)."""

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except InputError as e:
            e.args = (python_words(str(e), models),)
            raise

    return call  # type: ignore[return-value]


# the models as simplify's messages name them: the original, and what it made
SIMPLIFIED = {"model A": "the model given", "model B": "the simplified model"}


def python_class(cls: type) -> type:
    """A subclass of ``cls`` (a ``Session``) whose constructor raises InputError in Python
    words. Only the constructor: it takes the arguments that flags name (``runtime_constants``
    is ``--runtime-const``); ``run`` and ``set_adapter`` name none, and a frame of ours
    between them and the caller would move their warnings (``stacklevel``) off the caller's
    line."""
    constructor = in_python_words(vars(cls)["__init__"])
    return type(cls.__name__, (cls,), {"__init__": constructor,
                                       "__doc__": cls.__doc__, "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__})


def public(name: str, value: Any) -> Any:
    """What ``onnxfold.<name>`` is: ``value`` (the function or class in its home module),
    in Python words where it takes a caller's arguments."""
    if name in PUBLIC_FUNCTIONS:
        return in_python_words(value, SIMPLIFIED if name == "simplify" else COMPARED)
    if name in PUBLIC_CLASSES:
        return python_class(value)
    return value


PUBLIC_FUNCTIONS = frozenset({"optimize", "compare", "measure_latency", "simplify",
                              "split_model", "write_split", "split_adapter"})
PUBLIC_CLASSES = frozenset({"Session"})
