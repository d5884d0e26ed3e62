"""Errors that reach the user as one line (the CLI prints them and exits with code 2)."""


class OnnxfoldError(Exception):
    """Base of onnxfold's user-facing errors."""


class InputError(OnnxfoldError):
    """The input model (or its external data) cannot be read or is invalid."""


class OutputError(OnnxfoldError):
    """The output cannot be written; nothing was written."""


class NoTempDirectoryError(OnnxfoldError):
    """No usable temporary directory (``TMPDIR`` and the system's defaults are missing,
    unwritable or full): a matter of the environment, reported as bad input (exit 2)."""


def one_line(e: BaseException, limit: int = 500) -> str:
    """An exception's message on one line (whitespace runs joined), at most ``limit`` chars;
    its type's name when it has no message."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text[:limit] + ("..." if len(text) > limit else "")


class ResourceLimitError(OnnxfoldError):
    """A limit of the machine or the process (open files, address space, memory) stopped the
    run; the input itself may be fine. The message names the limit and its value."""
