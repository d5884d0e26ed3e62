"""``onnxfold rules`` lists every kind of rule, the symbolic shape steps among them."""

from __future__ import annotations

from tests.support.cli import run_cli


def test_rules_lists_the_shape_steps_with_their_ops_and_source():
    proc = run_cli("rules")
    assert proc.returncode == 0, proc.stderr
    section = proc.stdout.split("shape steps (", 1)[1].splitlines()
    gather = [line.split() for line in section if line.split()[1:2] == ["gather"]]
    assert gather == [["values", "gather", "on", "Gather", gather[0][4]]]
    assert gather[0][4].startswith("shape_steps.py:")
    split = next(line for line in section if " split_dims " in line)
    assert split.split()[0] == "dims" and " on Split " in split
