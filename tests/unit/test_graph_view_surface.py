"""``GraphView`` holds only what rules ask: every public method or property of it is called as
``ctx.<name>`` by a rule of ``rules/`` (what only the driver needs, it reads elsewhere: a
query no rule calls is surface a rule author must read for nothing)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from onnxfold.declare import GraphView

RULES = Path(__file__).resolve().parents[2] / "rules"


def test_every_public_query_of_the_view_is_asked_by_a_rule():
    public = {name for name, _ in inspect.getmembers(GraphView) if not name.startswith("_")}
    source = "\n".join(path.read_text() for path in RULES.glob("*.py"))
    asked = set(re.findall(r"\bctx\.([a-z_]+)", source))
    assert public, "GraphView has no public query"
    assert public - asked == set(), f"no rule asks GraphView for {sorted(public - asked)}"
