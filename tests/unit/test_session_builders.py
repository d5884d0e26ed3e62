"""One onnxruntime session constructor per side (issue 66): the product's
(``host/ort_sessions.py``) and the check's (``check/running/runner.py:new_session``). A second
constructor on a side would be a second place whose options (levels, prepacking, arenas,
custom-op libraries) can drift from the first; one shared by both sides would be code the
check shares with what it checks."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "onnxfold"


def _constructors() -> dict[str, list[str]]:
    """Each module's calls of ``InferenceSession(...)``, by side."""
    found: dict[str, list[str]] = {"check": [], "product": []}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and (
                    (isinstance(node.func, ast.Attribute)
                     and node.func.attr == "InferenceSession")
                    or (isinstance(node.func, ast.Name) and node.func.id == "InferenceSession")):
                side = "check" if path.relative_to(PACKAGE).parts[0] == "check" else "product"
                found[side].append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_each_side_constructs_sessions_in_one_place():
    found = _constructors()
    assert [where.split(":")[0] for where in found["check"]] == ["check/running/runner.py"], found
    assert [where.split(":")[0] for where in found["product"]] == ["host/ort_sessions.py"], found
