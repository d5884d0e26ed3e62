"""``onnxfold optimize IN OUT``: onnxsim's form, with the output as the second path.

onnxsim is run as ``onnxsim input_model output_model [check_n]``; onnxfold names its output
with ``-o``, and takes every path without it as an input (several inputs: a batch). A user
coming from onnxsim who writes ``onnxfold optimize IN OUT`` means ``-o OUT``. The line is read
that way where it can mean nothing else, and said so; ``check_n`` is ``--check N``.

Where ``OUT`` is the input itself (``onnxfold model.onnx model.onnx``: the form genai and
optimum directories need, whose file names are fixed), it can mean one thing only, in both
forms: the input replaced in place, as ``-o IN`` replaces it (written beside, published by a
rename, the input intact until then). Where ``OUT`` is another existing file, the line could
mean both: replacing it, or a dry run of both models. Written as onnxsim's command line
(``onnxfold IN OUT``, no command named) with ``OUT`` a ``.onnx`` file, it means what it means
to onnxsim: ``OUT`` is replaced (a second run over an earlier output; a file of another kind is
refused). Written with ``optimize`` named, onnxfold's own form, it is refused with one line
naming ``-o``, before anything is read or written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from onnxfold.errors import InputError
from onnxfold.numbers import NumberError, parse_int


@dataclass(frozen=True)
class Positional:
    """The inputs and the output a command line's paths name, and the note saying how they
    were read (None: as given)."""

    sources: tuple[str, ...]
    output: str | None
    note: str | None = None
    check_n: int | None = None  # onnxsim's third argument: --check N
    replaces: bool = False  # the output exists: onnxsim's command line replaces it
    in_place: bool = False  # the output is the input itself


def read_positional(sources: tuple[str, ...], output: str | None, implied: bool = False
                    ) -> Positional:
    """``sources`` and ``output`` as the user means them: two paths and no ``-o``, the first
    an existing file and the second nothing yet (or an existing ``.onnx`` file, in onnxsim's
    command line: ``implied``), are ``IN -o OUT``; a third, a number, is onnxsim's check_n.
    InputError for the forms that could mean either (in onnxfold's own form: the second path
    exists as a file, or is a new directory name), each naming the flags that say it."""
    if output is not None or len(sources) not in (2, 3):
        return Positional(sources, output)
    model, second = sources[0], sources[1]
    check_n = _check_n(model, second, sources[2]) if len(sources) == 3 else None
    if len(sources) == 3 and check_n is None:
        return Positional(sources, output)
    if not os.path.isfile(model):
        if not os.path.isdir(model) and (os.path.normpath(model) == os.path.normpath(second)
                                         or not os.path.lexists(second)):
            return Positional((model,), second)  # IN OUT: the input's error, said once
        return Positional(sources, output)  # the usual error names it, or a directory's batch
    if os.path.isdir(second):
        if check_n is not None:
            raise InputError(f"optimize {model} {second} {sources[2]}: {second} is a "
                             f"directory; give -o {second}/ --check {check_n}")
        return Positional(sources, output)  # a directory of models: a batch, as documented
    replacing = os.path.lexists(second)
    if replacing and os.path.exists(second) and os.path.samefile(model, second):
        checked = f" --check {check_n}" if check_n is not None else ""
        return Positional((model,), second, f"onnxfold: writing {second} in place: the second "
                          f"path is the input itself, replaced as onnxsim replaces it (-o "
                          f"{second}{checked} says so)", check_n, True, True)
    if replacing and not os.path.exists(second):
        raise InputError(f"{model} {second}: {second} is a symbolic link to nothing; to write "
                         f"{model}'s optimized model there give -o {second}")
    if replacing and not (implied and second.endswith(".onnx") and os.path.isfile(second)):
        raise InputError(
            f"optimize {model} {second}: both paths exist, so both would be read as inputs "
            f"(a dry run of each, nothing written); to write {model}'s optimized model to "
            f"{second} (replacing it) give -o {second}, to optimize both into a directory give "
            "-o DIR/")
    if second.endswith(("/", os.sep)):
        raise InputError(f"optimize {model} {second}: {second} does not exist; to write "
                         f"into that directory give -o {second}")
    checked = f" --check {check_n}" if check_n is not None else ""
    said = " (replacing it, as onnxsim does)" if replacing else ""
    return Positional((model,), second,
                      f"onnxfold: writing to {second}{said}: the second path is taken as the "
                      f"output, as onnxsim reads IN OUT{' N' if checked else ''} (-o {second}"
                      f"{checked} says so)", check_n, replacing)


def _check_n(model: str, second: str, third: str) -> int | None:
    """onnxsim's third argument, its number of checks, where ``third`` is meant as one (it
    names no file, holds a digit and no path, after an existing model): validated as
    ``--check`` validates its count (InputError for ``-1``, ``1e3``, a digit outside ASCII,
    a count past int64); None where it is no number (a path: an input, as before)."""
    if os.path.lexists(third) or not os.path.isfile(model) or os.sep in third or \
            third.endswith(".onnx") or not any(c.isnumeric() for c in third):
        return None
    try:
        return parse_int(third, minimum=0)
    except NumberError as e:
        raise InputError(f"{model} {second} {third}: onnxsim's check_n (--check N): {e}") from None
