"""What the docs say of the code, read from the code: the ``meta`` keys docs/state.md lists, the
modules the docstring rule (D1) holds in docs/testing.md, and the rewrite driver's and rule
API's modules docs/ARCHITECTURE.md names. A doc that drifts from the code fails here."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from onnxfold.ir import provenance

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "onnxfold"
DOCS = ROOT / "docs"


def _key_name(node: ast.expr) -> str:
    """The constant a ``meta`` key is written as (``KEY`` or ``module.KEY``)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    raise AssertionError(f"a meta key that is not a named constant: {ast.unparse(node)}")


def _meta_key(node: ast.AST) -> ast.expr | None:
    """The key of ``x.meta[K]``, ``x.meta.get(K)`` / ``.pop(K)`` / ``.setdefault(K)`` or
    ``K in x.meta``; None for anything else."""
    def is_meta(value: ast.expr) -> bool:
        return isinstance(value, ast.Attribute) and value.attr == "meta"

    if isinstance(node, ast.Subscript) and is_meta(node.value):
        return node.slice
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr in ("get", "pop", "setdefault") and is_meta(node.func.value):
        return node.args[0]
    if isinstance(node, ast.Compare) and len(node.comparators) == 1 and \
            isinstance(node.ops[0], ast.In | ast.NotIn) and is_meta(node.comparators[0]):
        return node.left
    return None


def _meta_keys_in_code() -> set[str]:
    keys = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            key = _meta_key(node)
            if key is not None:
                keys.add(_key_name(key))
    return keys


def _section(doc: str, heading: str) -> str:
    text = (DOCS / doc).read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def test_state_md_lists_every_meta_key_the_code_uses():
    """Every key onnxfold reads or writes in an onnx-ir object's ``meta`` is a row of
    state.md's table (with its string), and every row is a key the code uses."""
    table = _section("state.md", "## The `meta` keys that remain")
    rows = dict(re.findall(r"^\| `(\w+)` `(onnxfold\.[\w.]+)` \|", table, re.M))
    assert set(rows) == _meta_keys_in_code()
    for name, value in rows.items():  # the string the row gives is the constant's
        defined = [p for p in PACKAGE.rglob("*.py")
                   if re.search(rf"^{name} = \"{re.escape(value)}\"", p.read_text(), re.M)]
        assert defined, (name, value)


def test_state_md_names_every_key_onnxfold_saves_on_a_tensor():
    table = " ".join(_section("state.md", "## The `meta` keys that remain").split())
    for key in provenance.TENSOR_KEYS:
        name = next(n for n, v in vars(provenance).items() if v == key and n.isupper()
                    and n != "TENSOR_KEYS")
        assert f"`{name}` `{key}`" in table, name


def test_testing_md_names_where_the_docstring_rule_holds():
    """testing.md's list of the code held to D1 is pyproject's: the glob its per-file ignore
    exempts everything but."""
    ignores = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"][
        "per-file-ignores"]
    (glob,) = [g for g, rules in ignores.items() if rules == ["D1"]]
    held = {p.removesuffix("/**") for p in glob.removeprefix("!{").removesuffix("}").split(",")}
    text = (DOCS / "testing.md").read_text()
    sentence = text[text.index("a docstring on every public module"):]
    sentence = sentence[:sentence.index("A `noqa`")]
    assert set(re.findall(r"`(onnxfold/[\w/.]+)`", sentence)) == held


def test_the_architecture_page_names_every_module_of_the_rewrite_driver_and_rule_api():
    page = (DOCS / "ARCHITECTURE.md").read_text()
    for package in ("rewrite", "declare"):
        for module in sorted((PACKAGE / package).glob("*.py")):
            if module.name != "__init__.py":
                assert f"{package}/{module.name}" in page, f"{package}/{module.name}"
