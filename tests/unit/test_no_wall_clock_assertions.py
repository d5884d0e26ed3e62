"""No test asserts an upper bound on wall-clock time: a loaded machine fails it.

``test_a_long_kernel_stops_at_the_fold_timeout`` took 10.6 s against its 10 s bound on a
2-core machine running other work. A test bounds work by CPU time (``Finished.cpu``: the
child's and its waited-for children's user + system seconds), by what happened (a timeout's
message, a process gone), or by a ratio to a baseline measured in the same test; speed targets
live in ``bench/``. This reads every test file with ``ast`` and lists each ``assert`` that
compares, with ``<`` or ``<=``, a clock reading (``time.monotonic()``, ``time.perf_counter()``,
``time.time()``) or a value named as wall time (``seconds``, ``elapsed``, ``wall``, ``wall_s``,
``took``: a name, an attribute or a key). Waiting for an event up to a ``deadline``
(``TIMEOUT``-scale, a guard against a hang) is not such a bound.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
CLOCKS = {"monotonic", "perf_counter", "time"}
WALL_NAMES = {"seconds", "elapsed", "wall", "wall_s", "took", "wall_after"}


def _is_clock(node: ast.AST) -> bool:
    """A call of ``time.monotonic()``, ``time.perf_counter()``, ``time.time()``."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
        node.func.attr in CLOCKS and isinstance(node.func.value, ast.Name) and \
        node.func.value.id == "time"


def _is_wall(node: ast.AST) -> bool:
    """A clock reading, or a name or attribute that says it holds wall time (a deadline
    aside), anywhere in ``node``."""
    for part in ast.walk(node):
        if _is_clock(part):
            return True
        name = part.id if isinstance(part, ast.Name) else \
            part.attr if isinstance(part, ast.Attribute) else \
            part.slice.value if isinstance(part, ast.Subscript) and \
            isinstance(part.slice, ast.Constant) else None
        if name in WALL_NAMES:
            return True
    return False


def _mentions_deadline(node: ast.AST) -> bool:
    return any(isinstance(part, ast.Name) and "deadline" in part.id for part in ast.walk(node))


def wall_clock_bounds(source: str) -> list[int]:
    """The lines of ``source`` whose ``assert`` bounds wall time from above."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assert):
            continue
        for compare in ast.walk(node.test):
            if not isinstance(compare, ast.Compare) or _mentions_deadline(compare):
                continue
            operands = [compare.left, *compare.comparators]
            for op, (low, high) in zip(compare.ops, itertools.pairwise(operands)):
                if (isinstance(op, ast.Lt | ast.LtE) and _is_wall(low)) or \
                        (isinstance(op, ast.Gt | ast.GtE) and _is_wall(high)):
                    found.append(node.lineno)
    return sorted(set(found))


def test_no_test_bounds_wall_clock_time():
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        lines = wall_clock_bounds(path.read_text(encoding="utf-8"))
        offenders += [f"{path.relative_to(TESTS.parent)}:{line}" for line in lines]
    assert offenders == [], f"wall-clock upper bounds: {offenders}"


def test_the_check_sees_each_form():
    flagged = ("assert time.monotonic() - started < 20\n"
               "assert seconds < 10\n"
               "assert 4 <= outcome['seconds'] < 10\n"
               "assert run.wall_s < 30\n"
               "assert 30 > elapsed\n")
    assert wall_clock_bounds(flagged) == [1, 2, 3, 4, 5]
    allowed = ("assert time.monotonic() < deadline, 'never started'\n"
               "assert outcome['seconds'] >= 4\n"
               "assert done.cpu < 30\n")
    assert wall_clock_bounds(allowed) == []
