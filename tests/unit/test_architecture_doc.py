"""docs/ARCHITECTURE.md and the code agree: a page that drifts from the layout fails CI.

Checked: every path the page quotes in backquotes (``onnxfold/fold/pool.py``, ``rules/``,
``tests/support/``, ``tests/unit/test_rules_*.py``), read from the repository root or from
``onnxfold/`` (``fold/pool.py``); every relative link; every dotted name ``onnxfold.x.y``,
``tools.x`` or ``tests.support.x`` (a module, or an attribute of one); and the package table,
which names every package of ``onnxfold`` in the order of the layers that
``tests/unit/test_import_layers.py`` enforces (its ``LAYERS``, read from its source).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "ARCHITECTURE.md"
LAYERS_TEST = REPO / "tests" / "unit" / "test_import_layers.py"

# Modules another change is creating at the same time as this page: the check skips them
# while they do not exist, and fails once they do, so that the entry is removed.
PENDING: frozenset[str] = frozenset()

_FENCED = re.compile(r"^```.*?^```", re.S | re.M)
_QUOTED = re.compile(r"`([^`]+)`")  # a quote may wrap onto the next line
_PATH = re.compile(r"[\w.*-]+(/[\w.*-]*)+|[\w-]+\.(py|md|json|toml)")
_LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")
_DOTTED = re.compile(r"\b(?:onnxfold|tools|tests\.support)(?:\.[A-Za-z_]\w*)+")
_FILE_SUFFIX = re.compile(r"\.(py|md|json|toml)$")  # tools.md is a file, not a module
_PACKAGE_ROW = re.compile(r"^\| `onnxfold/(\w+)/` \|", re.M)


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def quoted_paths(text: str) -> set[str]:
    """Backquoted words outside code blocks that are paths: with a slash, or a file name with a
    known suffix."""
    prose = _FENCED.sub("", text)
    return {m.group(1) for m in _QUOTED.finditer(prose) if _PATH.fullmatch(m.group(1))}


def path_exists(path: str, root: Path = REPO) -> bool:
    """Whether ``path`` (maybe a glob) names something under ``root`` or ``root/onnxfold``."""
    return any(next(base.glob(path), None) is not None if "*" in path else (base / path).exists()
               for base in (root, root / "onnxfold"))


def dotted_name_exists(name: str) -> bool:
    """Whether ``name`` is a module, or an attribute chain of the longest module it starts
    with (``onnxfold.declare.catalogue.Catalogue.without``)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent that is no package
            found = False
        if not found:
            continue
        obj: object = importlib.import_module(module)
        for attribute in parts[cut:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def layer_packages(source: str) -> list[str]:
    """The packages of ``onnxfold`` in ``LAYERS`` order (bottom first), from the test's source."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == "LAYERS" for t in targets):
                assert node.value is not None
                layers = ast.literal_eval(node.value)
                return [prefix.removeprefix("onnxfold.") for _, prefixes in layers
                        for prefix in prefixes
                        if prefix.startswith("onnxfold.") and prefix != "onnxfold.__main__"
                        and (REPO / prefix.replace(".", "/")).is_dir()]
    raise AssertionError(f"no LAYERS in {LAYERS_TEST}")


def test_every_quoted_path_exists() -> None:
    paths = quoted_paths(_text())
    assert len(paths) > 40, f"found only {len(paths)} paths: is the pattern still right?"
    missing = sorted(p for p in paths - PENDING if not path_exists(p))
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def test_pending_paths_are_still_pending_and_named() -> None:
    text = _text()
    arrived = sorted(p for p in PENDING if path_exists(p))
    assert not arrived, f"{arrived} exist now: remove them from PENDING so that they are checked"
    unnamed = sorted(p for p in PENDING if f"`{p}`" not in text)
    assert not unnamed, f"docs/ARCHITECTURE.md no longer names {unnamed}: remove from PENDING"


def test_every_relative_link_leads_somewhere() -> None:
    links = {m.group(1) for m in _LINK.finditer(_text()) if "://" not in m.group(1)}
    assert links
    missing = sorted(link for link in links if not (DOC.parent / link).exists())
    assert not missing, f"docs/ARCHITECTURE.md links to nothing: {missing}"


def test_every_dotted_name_exists() -> None:
    names = {n for n in _DOTTED.findall(_text()) if not _FILE_SUFFIX.search(n)}
    assert len(names) > 10, f"found only {len(names)} dotted names"
    missing = sorted(n for n in names if not dotted_name_exists(n))
    assert not missing, f"docs/ARCHITECTURE.md names what does not exist: {missing}"


def test_the_package_table_follows_the_layers() -> None:
    rows = _PACKAGE_ROW.findall(_text())
    assert rows == layer_packages(LAYERS_TEST.read_text(encoding="utf-8")), (
        "the package table of docs/ARCHITECTURE.md must list every package of onnxfold once, "
        "in the order of LAYERS in tests/unit/test_import_layers.py")
    on_disk = {p.parent.name for p in (REPO / "onnxfold").glob("*/__init__.py")}
    assert set(rows) == on_disk


def test_the_checks_catch_what_does_not_exist(tmp_path: Path) -> None:
    (tmp_path / "onnxfold" / "fold").mkdir(parents=True)
    (tmp_path / "onnxfold" / "fold" / "pool.py").write_text("")
    assert path_exists("fold/pool.py", tmp_path)
    assert path_exists("onnxfold/fold/*.py", tmp_path)
    assert not path_exists("fold/plan_graph.py", tmp_path)
    assert quoted_paths("`fold/pool.py`, `ctx.add_node`, `x.py`, `python -m\ntools.x`,\n"
                        "```python\nsize = `unpaired\n```\n`rules/`, `np.ndarray`") == {
        "fold/pool.py", "x.py", "rules/"}
    assert dotted_name_exists("onnxfold.declare.catalogue.Catalogue.without")
    assert not dotted_name_exists("onnxfold.declare.catalogue.Catalog")
    assert not dotted_name_exists("onnxfold.fold.no_such_module")
    with pytest.raises(AssertionError):
        layer_packages("OTHER = ()")
