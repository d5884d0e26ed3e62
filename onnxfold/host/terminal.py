"""Text for a terminal: names from a model or a file name shown escaped, never interpreted.

A model's graph, node, value and op names, and file names, are data an attacker may choose; a
terminal interprets escape sequences and control characters in them (retitling the window,
clearing the screen, moving the cursor, ``\\r`` overwriting a line, a bidi override reversing
what follows). ``printable`` shows every such character as a Python escape (``\\x1b``,
``\\u202e``); ``PrintableStream`` applies it to everything written to ``sys.stdout`` and
``sys.stderr`` while the command line runs (``printable_streams``), so no printing site can
forget it. Files onnxfold writes (the JSON and HTML reports) keep the real names: JSON and HTML
escape them in their own way.
"""

from __future__ import annotations

import contextlib
import re
import sys
import textwrap
from collections.abc import Hashable, Iterator, Sequence
from typing import TextIO, TypeVar

# C0 and C1 controls and DEL; invisible formatting characters (soft hyphen, Arabic letter mark,
# Mongolian vowel separator, zero-width and directional marks, bidi embeddings, overrides and
# isolates, word joiner and invisible operators, BOM, interlinear annotations, tag characters);
# line and paragraph separators; lone surrogates (undecodable bytes of a file name)
_OTHER_UNSAFE = ("\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
                 "\ufeff\ufff9-\ufffb\ud800-\udfff\U000e0000-\U000e007f")
_UNSAFE_ANYWHERE = re.compile(f"[\x00-\x1f{_OTHER_UNSAFE}]")
_UNSAFE_IN_LINES = re.compile(f"[\x00-\x09\x0b-\x1f{_OTHER_UNSAFE}]")  # all but newline


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` with every control, invisible-formatting and bidi character escaped (newlines
    too: one name stays on one line)."""
    return _UNSAFE_ANYWHERE.sub(_escape, text)


def printable_lines(text: str) -> str:
    """Like ``printable``, but newlines are kept: for whole messages and tables."""
    return _UNSAFE_IN_LINES.sub(_escape, text)


class PrintableStream:
    """A text stream writing ``printable_lines`` of everything to ``terminal``, the stream it
    wraps (which a progress display drawing its own control sequences writes to directly)."""

    def __init__(self, terminal: TextIO) -> None:
        self.terminal = terminal

    def write(self, text: str) -> int:
        self.terminal.write(printable_lines(text))
        return len(text)

    def writelines(self, lines: list[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):  # flush, isatty, fileno, encoding, close, ...
        return getattr(self.terminal, name)


def unwrapped(stream: TextIO) -> TextIO:
    """The stream under a ``PrintableStream`` (``stream`` itself otherwise)."""
    return stream.terminal if isinstance(stream, PrintableStream) else stream


@contextlib.contextmanager
def printable_streams() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` as ``PrintableStream`` while the block runs."""
    saved = sys.stdout, sys.stderr
    if saved[0] is not None:  # None: the descriptor was closed when Python started
        sys.stdout = PrintableStream(unwrapped(saved[0]))  # type: ignore[assignment]
    if saved[1] is not None:
        sys.stderr = PrintableStream(unwrapped(saved[1]))  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


LINE_WIDTH = 160  # a printed list wraps before this many characters (a line stays readable)
FAMILY = 3  # names of one pattern and one key are shown as one from this many
_NUMBER = re.compile(r"\d+")
_K = TypeVar("_K", bound=Hashable)


def wrapped(head: str, text: str, width: int = LINE_WIDTH, indent: int | None = None
            ) -> list[str]:
    """``head`` + ``text`` as one line where it is no longer than ``width``, else as lines
    broken at spaces, the next ones indented ``indent`` (default: as far as ``head`` is long,
    so that the summary's ``inputs       a, b, c`` stays a column). A word longer than a line
    stays whole."""
    if len(head) + len(text) <= width:
        return [head + text]
    return textwrap.wrap(text, width, initial_indent=head,
                         subsequent_indent=" " * (len(head) if indent is None else indent),
                         break_long_words=False, break_on_hyphens=False) or [head.rstrip()]


def families(rows: Sequence[tuple[str, _K]], minimum: int = FAMILY
             ) -> list[tuple[str, _K, list[int]]]:
    """``rows`` (a name and a key) with those whose names differ only in their numbers and
    whose keys are equal as one where they are ``minimum`` or more: a decoder's 64 KV-cache
    inputs (``past_key_values.0.key`` ... ``past_key_values.31.value``) as two,
    ``past_key_values.{0..31}.key (32)``, not a screen of identical ones. Each with its key
    and the indices of its rows, in the order the first of each appears."""
    found: dict[tuple[str, _K], list[int]] = {}
    for index, (name, key) in enumerate(rows):
        found.setdefault((_NUMBER.sub("#", name), key), []).append(index)
    out: list[tuple[str, _K, list[int]]] = []
    for (pattern, key), members in found.items():
        if len(members) < minimum:
            out += [(rows[i][0], key, [i]) for i in members]
            continue
        numbers = [_NUMBER.findall(rows[i][0]) for i in members]
        pieces = pattern.split("#")
        shown = [pieces[0]]
        for i, piece in enumerate(pieces[1:]):
            values = sorted({int(found_[i]) for found_ in numbers})
            shown.append(numbers[0][i] if len(values) == 1 else
                         f"{{{values[0]}..{values[-1]}}}"
                         if values == list(range(values[0], values[-1] + 1)) else
                         f"{{{','.join(map(str, values))}}}" if len(values) <= minimum + 1
                         else "*")
            shown.append(piece)
        out.append(("".join(shown) + f" ({len(members)})", key, members))
    order = {id(entry): min(entry[2]) for entry in out}
    return sorted(out, key=lambda entry: order[id(entry)])
