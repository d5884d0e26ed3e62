"""Errors that reach the user as one line (the CLI prints them and exits with code 2)."""


class OnnxfoldError(Exception):
    """Base of onnxfold's user-facing errors."""


class InputError(OnnxfoldError):
    """The input model (or its external data) cannot be read or is invalid."""


class OutputError(OnnxfoldError):
    """The output cannot be written; nothing was written."""
