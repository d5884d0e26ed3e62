"""``onnxfold.host.terminal``: control, invisible-formatting and bidi characters shown escaped."""

from __future__ import annotations

import io
import sys

import pytest

from onnxfold.host.terminal import (
    PrintableStream,
    printable,
    printable_lines,
    printable_streams,
    unwrapped,
)


@pytest.mark.parametrize("char, shown", [
    ("\x1b", "\\x1b"), ("\r", "\\x0d"), ("\x07", "\\x07"), ("\x00", "\\x00"), ("\x7f", "\\x7f"),
    ("\x9b", "\\x9b"), ("\x85", "\\x85"), ("\u202e", "\\u202e"), ("\u2066", "\\u2066"),
    ("\u200b", "\\u200b"), ("\u2028", "\\u2028"), ("\ufeff", "\\ufeff"),
    ("\udcff", "\\udcff"), ("\U000e0041", "\\U000e0041"), ("\n", "\\x0a"), ("\t", "\\x09")])
def test_unsafe_characters_are_escaped(char: str, shown: str) -> None:
    assert printable(f"a{char}b") == f"a{shown}b"


def test_ordinary_text_is_unchanged() -> None:
    text = "model.onnx /a/b-c_d résumé 中文 😀 [31m ~!@#$%^&*()"
    assert printable(text) == text


def test_lines_keep_their_newlines() -> None:
    assert printable_lines("a\x1b[2J\nb\r\n") == "a\\x1b[2J\nb\\x0d\n"


def test_streams_escape_what_is_printed_and_are_restored() -> None:
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        with printable_streams():
            print("name\x1b]0;t\x07")
            print("bad\u202e", file=sys.stderr)
            assert unwrapped(sys.stderr) is err
        assert (sys.stdout, sys.stderr) == (out, err)
    finally:
        sys.stdout, sys.stderr = saved
    assert out.getvalue() == "name\\x1b]0;t\\x07\n"
    assert err.getvalue() == "bad\\u202e\n"


def test_a_wrapped_stream_is_not_wrapped_twice() -> None:
    inner = io.StringIO()
    saved = sys.stdout
    sys.stdout = PrintableStream(inner)  # type: ignore[assignment]
    try:
        with printable_streams():
            assert unwrapped(sys.stdout) is inner
    finally:
        sys.stdout = saved


def test_a_closed_stream_stays_none() -> None:
    """Python sets sys.stderr to None when descriptor 2 was closed at start-up."""
    saved = sys.stderr
    sys.stderr = None  # type: ignore[assignment]
    try:
        with printable_streams():
            assert sys.stderr is None
    finally:
        sys.stderr = saved
