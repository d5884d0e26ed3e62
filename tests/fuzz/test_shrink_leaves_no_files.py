"""The shrinker checks its candidates in a temporary directory and removes it when done: a
long fuzz campaign shrinks many failures and must not leave one directory per failure."""

from __future__ import annotations

import tempfile

import pytest

from tools.fuzz import graphgen, shrink


def test_shrink_subject_removes_its_working_directory(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    subject = shrink.from_case(graphgen.generate(0))
    result = shrink.shrink_subject(subject, "a signature no candidate has", budget=3)
    assert result is not None
    assert list(tmp_path.iterdir()) == []
