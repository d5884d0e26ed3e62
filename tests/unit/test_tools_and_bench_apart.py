"""``bench/`` (benchmarks) and ``tools/`` (developer tools) are two packages at the repository
root that neither imports the other, even inside a function: a benchmark run never needs a
tool's dependencies, nor a tool a benchmark's. What both need lives in onnxfold."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_packages(path: Path) -> set[str]:
    """The top-level packages ``path`` imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize(("package", "other"), [("bench", "tools"), ("tools", "bench")])
def test_neither_imports_the_other(package, other):
    offenders = [str(path.relative_to(ROOT)) for path in sorted((ROOT / package).rglob("*.py"))
                 if other in imported_packages(path)]
    assert offenders == [], f"{package}/ imports {other}/: {offenders}"


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from tools import wild_corpus\n")
    assert "tools" in imported_packages(source)
