"""One catalogue value carries the enabled rules and the op facts (issue 36 item 3).

The engine reads no global catalogue: only the entry points below choose one
(``load_catalogue()``, the installed rules, when the caller passes none) and hand it down.
A test injects a rule by passing a catalogue, never by patching ``load_catalogue``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from onnx import helper

import onnxfold
from onnxfold.analysis.constness import plan_graph
from onnxfold.declare import P
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.declare.pattern_rules import PatternRule
from onnxfold.io.reader import model_from_proto
from onnxfold.pipeline.options import FoldOptions
from tests.support.models import make_model, tensor, vinfo

ROOT = Path(__file__).resolve().parents[2]

# (module path, function) that may call load_catalogue(): the public entry points, where a
# caller that passes no catalogue gets the installed rules, and the CLI's commands
ENTRY_POINTS = {
    ("onnxfold/pipeline/optimizer.py", "optimize"),
    ("onnxfold/runtime/session.py", "__init__"),  # Session
    ("onnxfold/runtime/split.py", "split_model"),
    ("onnxfold/runtime/backends/__init__.py", "get_backend"),
    ("onnxfold/app/inspection.py", "inspect_model"),
    ("onnxfold/app/info_commands.py", "rules"),  # onnxfold rules
    ("onnxfold/app/runtime_commands.py", "split"),  # onnxfold split
    ("onnxfold/runtime/adapter_split.py", "split_adapter"),  # onnxfold.split_adapter, the CLI
    ("onnxfold/app/optimize_command.py", "_plan_inputs"),  # and for its plan as the input loads
}


def _callers(path: Path) -> set[str]:
    """The functions of ``path`` that call ``load_catalogue`` (``<module>`` at top level)."""
    found: set[str] = set()

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) \
                else where
            if isinstance(child, ast.Call):
                fn = child.func
                name = fn.id if isinstance(fn, ast.Name) else \
                    fn.attr if isinstance(fn, ast.Attribute) else None
                if name == "load_catalogue":
                    found.add(where)
            visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), "<module>")
    return found


def test_only_the_entry_points_call_load_catalogue():
    calls = {(str(path.relative_to(ROOT)), fn)
             for folder in ("onnxfold", "rules") for path in sorted((ROOT / folder).rglob("*.py"))
             if path.name != "catalogue.py" or "declare" not in path.parts
             for fn in _callers(path)}
    assert calls <= ENTRY_POINTS, sorted(calls - ENTRY_POINTS)
    assert ("onnxfold/pipeline/optimizer.py", "optimize") in calls  # the check finds calls


def _neg_then_add():
    nodes = [helper.make_node("Neg", ["c"], ["n"]), helper.make_node("Add", ["x", "n"], ["y"])]
    return make_model(nodes, [vinfo("x", shape=[3])], [vinfo("y", shape=[3])],
                      [tensor("c", np.float32([1, 2, 3]))])


def test_a_rule_is_injected_by_passing_a_catalogue():
    seen: list[str] = []

    def look(ctx, node):  # a check that only looks
        seen.append(node.op_type)
        return False

    injected = load_catalogue() + Catalogue((PatternRule("look", P("Add", name="node"),
                                                         lambda op: None, look, "test:1"),))
    onnxfold.optimize(_neg_then_add(), catalogue=injected)
    tried = len(seen)
    assert tried and set(seen) == {"Add"}  # the Neg folds: the driver leaves it
    onnxfold.optimize(_neg_then_add())
    assert len(seen) == tried  # the installed rules do not hold it


def _shape_of_input():
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Cast", ["s"], ["y"],
                                                                      to=1)]
    return make_model(nodes, [vinfo("x", shape=[2, 3])], [vinfo("y", shape=[2])])


def test_a_catalogue_without_the_shape_folder_keeps_shape_only():
    """``shape_only`` is an op fact: with Shape's folder gone (from the catalogue passed, or
    by the options), a Shape of a static shape is still planned as a constant, and the run
    does the same either way."""
    every = load_catalogue()
    without = every.without({"Shape"})
    assert without.shape_only == every.shape_only
    model = model_from_proto(_shape_of_input())
    planned = plan_graph(model.graph, model.ir_version, facts=without).foldable
    assert [n.op_type for n in planned] == ["Shape", "Cast"]
    given = onnxfold.optimize(_shape_of_input(), catalogue=without)
    disabled = onnxfold.optimize(_shape_of_input(), FoldOptions(disabled_rules={"Shape"}))
    assert [n.op_type for n in given.model.graph] == [n.op_type for n in disabled.model.graph]
    assert given.report.to_dict()["declined_nodes"] == disabled.report.to_dict()["declined_nodes"]
