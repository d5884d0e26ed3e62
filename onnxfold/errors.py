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
    """An exception's message on one line (whitespace runs joined), :func:`clipped` to
    ``limit`` chars; its type's name when it has no message."""
    return clipped(" ".join(str(e).split()) or type(e).__name__, limit)


SENTENCE_ENDS = (". ", "! ", "? ")
CLAUSE_ENDS = ("; ", ", ", ": ", " (", " - ")
ELLIPSIS = " ..."


def clipped(text: str, limit: int) -> str:
    """``text``, or where it is longer than ``limit`` its start cut where a sentence ends
    within the last quarter of ``limit``, else where the last sentence or clause within it
    ends, else at a word, marked `` ...``: a reason quoted on one line (onnxruntime's, a
    library's) keeps its first whole sentences or clauses, the ones that name the node and
    the cause, not a word cut in half. A boundary counts only where it keeps at least half
    of ``limit``."""
    if len(text) <= limit:
        return text
    room = max(limit - len(ELLIPSIS), 1)
    head = text[:room + 1]  # a boundary right at the limit counts
    sentence = max(head.rfind(end) for end in SENTENCE_ENDS)
    clause = max(head.rfind(end) for end in CLAUSE_ENDS)
    if sentence >= room * 3 // 4 or (sentence >= room // 2 and sentence >= clause):
        return text[:sentence + 1] + ELLIPSIS
    if clause >= room // 2:
        return text[:clause].rstrip(" ,;:(-") + ELLIPSIS
    cut = head.rfind(" ")
    return (text[:cut] if cut >= room // 2 else text[:room]).rstrip() + ELLIPSIS


class ResourceLimitError(OnnxfoldError):
    """A limit of the machine or the process (open files, address space, memory) stopped the
    run; the input itself may be fine. The message names the limit and its value."""
