"""``onnxfold optimize IN OUT``: onnxsim's form, with the output as the second path.

onnxsim is run as ``onnxsim input_model output_model [check_n]``; onnxfold names its output
with ``-o``, and takes every path without it as an input (several inputs: a batch). A user
coming from onnxsim who writes ``onnxfold optimize IN OUT`` means ``-o OUT``. The line is read
that way where it can mean nothing else, and said so; where it could mean both (``OUT``
exists: replacing it, or a dry run of both models?) it is refused with one line naming
``-o``, before anything is read or written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from onnxfold.errors import InputError


@dataclass(frozen=True)
class Positional:
    """The inputs and the output a command line's paths name, and the note saying how they
    were read (None: as given)."""

    sources: tuple[str, ...]
    output: str | None
    note: str | None = None


def read_positional(sources: tuple[str, ...], output: str | None) -> Positional:
    """``sources`` and ``output`` as the user means them: two paths and no ``-o``, the first
    an existing file and the second nothing yet, are ``IN -o OUT``. InputError for the forms
    that could mean either (the second path exists as a file, or is a new directory name),
    and for onnxsim's third argument (``check_n``), each naming the flags that say it."""
    if output is not None or len(sources) not in (2, 3):
        return Positional(sources, output)
    model, second = sources[0], sources[1]
    if len(sources) == 3:
        _refuse_check_n(model, second, sources[2])
        return Positional(sources, output)
    if not os.path.isfile(model):
        return Positional(sources, output)  # the usual error names it, or a directory's batch
    if os.path.isdir(second):
        return Positional(sources, output)  # a directory of models: a batch, as documented
    if os.path.lexists(second):
        raise InputError(
            f"optimize {model} {second}: both paths exist, so both would be read as inputs "
            f"(a dry run of each, nothing written); to write {model}'s optimized model to "
            f"{second} (replacing it) give -o {second}, to optimize both into a directory give "
            "-o DIR/")
    if second.endswith(("/", os.sep)):
        raise InputError(f"optimize {model} {second}: {second} does not exist; to write "
                         f"into that directory give -o {second}")
    return Positional((model,), second,
                      f"onnxfold: writing to {second}: the second path is taken as the output, "
                      f"as onnxsim reads IN OUT (-o {second} says so)")


def _refuse_check_n(model: str, second: str, third: str) -> None:
    """``onnxsim IN OUT N``: N was onnxsim's number of checks; say which flags mean it."""
    try:
        n = int(third)
    except ValueError:
        return
    if not os.path.lexists(third) and os.path.isfile(model):
        raise InputError(f"optimize {model} {second} {third}: onnxsim's check_n is a flag here: "
                         f"onnxfold optimize {model} -o {second} --check {n}")
