"""docs/ARCHITECTURE.md's contract for a rule, read off ``rules/``: the driver answers whether
a rewrite may remove what it matched (--keep, other graphs, graph outputs, readers outside the
match) and skips nodes the fold computes, so a rule asks the GraphView how many nodes read a
value, whether a node is of this graph or a value a graph output only where the answer
decides what it builds, and a ``# what to build:`` comment says why (on the statement's line
or one of the two before it); no check declines a match because its constants "fold anyway"
(the driver never asks it there)."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

RULES = Path(__file__).resolve().parents[2] / "rules"
DRIVERS_QUESTIONS = {"single_use", "reader", "readers", "here", "is_graph_output"}
MARK = "# what to build:"


def _comments(source: str) -> dict[int, str]:
    """Each line's comment."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {t.start[0]: t.string for t in tokens if t.type == tokenize.COMMENT}


def _statement_lines(tree: ast.AST) -> dict[int, int]:
    """For each line inside a statement, the line the innermost statement starts on."""
    starts: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            end = node.end_lineno or node.lineno
            for line in range(node.lineno, end + 1):
                if line not in starts or starts[line] < node.lineno:
                    starts[line] = node.lineno
    return starts


def _unexplained(path: Path) -> list[str]:
    source = path.read_text()
    tree = ast.parse(source)
    comments, starts = _comments(source), _statement_lines(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in DRIVERS_QUESTIONS:
            first = starts.get(node.lineno, node.lineno)
            near = [comments.get(line, "") for line in range(first - 2, node.lineno + 1)]
            if not any(MARK in comment for comment in near):
                found.append(f"{path.name}:{node.lineno}: {node.func.attr}")
    return found


def test_a_rule_asks_the_drivers_questions_only_to_decide_what_to_build():
    unexplained = [hit for path in sorted(RULES.glob("*.py")) for hit in _unexplained(path)]
    assert not unexplained, (
        f"rules/ asks what the driver judges, without a '{MARK}' comment saying why the answer "
        f"decides what the rule builds: {unexplained}")


def test_a_rule_reads_the_readers_of_a_value_through_the_view():
    """``value.uses()`` counted by hand (``len(uses) != 1``) is the driver's question asked
    where no test sees it: a rule asks ``ctx.reader``, ``ctx.readers`` or ``ctx.single_use``,
    which the scan above holds to a reason."""
    found = [f"{path.name}:{node.lineno}" for path in sorted(RULES.glob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr == "uses"]
    assert not found, f"rules/ reads uses() itself: {found}"


def test_no_check_declines_a_match_the_fold_computes():
    """The driver skips a node whose results are all constant (but for rules tagged
    ``rewrites_constants``): a check that declines constants itself repeats it."""
    phrases = ("fold anyway", "folds anyway", "it all folds", "the products fold")
    found = [f"{path.name}:{line}" for path in sorted(RULES.glob("*.py"))
             for line, comment in _comments(path.read_text()).items()
             if any(phrase in comment for phrase in phrases)]
    assert not found, f"constant-input guards the driver owns: {found}"


def test_the_scan_finds_an_unexplained_question(tmp_path):
    """The scan can fail: a check asking single_use without the comment is listed, one
    with it is not."""
    bare = tmp_path / "bare.py"
    bare.write_text("def check(ctx, v):\n    return ctx.single_use(v)\n")
    explained = tmp_path / "explained.py"
    explained.write_text("def check(ctx, v):\n    # what to build: one reader\n"
                         "    return ctx.single_use(v)\n")
    assert _unexplained(bare) == ["bare.py:2: single_use"]
    assert _unexplained(explained) == []


def test_the_rule_api_exports_what_rules_use():
    """``onnxfold.declare`` is the rules' API: each name it exports is imported by a module of
    ``rules/`` (the engine and tests import the modules that define the rest)."""
    import onnxfold.declare

    used = {alias.name for path in RULES.glob("*.py")
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module == "onnxfold.declare"
            for alias in node.names}
    assert set(onnxfold.declare.__all__) == used
