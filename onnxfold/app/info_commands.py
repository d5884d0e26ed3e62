"""``onnxfold inspect`` (a model's opsets, counts and what is still foldable) and ``onnxfold
rules`` (the catalogue, or its coverage of the ONNX node test suite)."""

from __future__ import annotations

import contextlib
import json
import os

from onnxfold.app.commands import InspectCommand, RulesCommand


def inspect(command: InspectCommand) -> int:
    """Print what ``inspect_model`` finds, as text or JSON."""
    from onnxfold.app.inspection import inspect_model

    info = inspect_model(command.source, check=command.check_input)
    print(json.dumps(info, indent=2) if command.json else info["text"])
    return 0


def rules(command: RulesCommand) -> int:
    """List every rule of the catalogue, or (``--coverage``) fold the ONNX node tests."""
    if command.coverage:
        return _coverage(command)
    from onnxfold.declare.catalogue import load_catalogue
    from onnxfold.declare.pattern_rules import PatternRule
    from onnxfold.declare.registry import FolderRule, ShapeDimsRule, ShapeValueRule, source_of
    from onnxfold.pipeline.cleanups import CLEANUPS

    catalogue = load_catalogue()
    print("folders (evaluate one op on constants):")
    for rule in sorted(catalogue.of(FolderRule), key=lambda r: r.name):
        until = rule.until if rule.until is not None else ""
        print(f"  {rule.name:28} {rule.domain or 'ai.onnx'}::{rule.op_type} "
              f"opset {rule.since}-{until}  {_where(rule.source)}")
    print("patterns (rewrites that enable folding):")
    for pattern in catalogue.of(PatternRule):
        print(f"  {pattern.name:28} on {','.join(pattern.op_types)}  {_where(pattern.source)}")
    print("cleanups (whole-model passes, run in this order after folding):")
    for cleanup in CLEANUPS:
        print(f"  {cleanup.name:28} {_where(source_of(cleanup.clean))}")
    print("shape steps (what an op does to shape values and dims, followed symbolically):")
    steps: dict[tuple[str, str], list[str]] = {}
    for kind, found in (("values", catalogue.of(ShapeValueRule)),
                        ("dims", catalogue.of(ShapeDimsRule))):
        for step in found:
            steps.setdefault((f"{kind} {step.fn.__name__}", step.source), []).append(step.op_type)
    for (name, source), ops in steps.items():
        print(f"  {name:32} on {','.join(ops)}  {_where(source)}")
    return 0


def _where(source: str) -> str:
    path, line = source.rsplit(":", 1)
    return f"{os.path.basename(path)}:{line}"


def _coverage(command: RulesCommand) -> int:
    from onnxfold.app.conformance import run_all, summarize
    from onnxfold.io.door import claimed
    from onnxfold.io.tempfiles import write_text

    with contextlib.closing(claimed([(command.json, "JSON report")])) as guard:  # first
        summary = summarize(run_all(command.jobs))
        totals = summary["totals"]
        print(f"ONNX node test cases: {summary['cases']}")
        for key in ("folded_native", "folded_fallback", "declined", "gap", "wrong"):
            print(f"  {key:16} {totals.get(key, 0)}")
        print(f"  onnxruntime can run {summary['ort_runnable']}, of which onnxfold folds "
              f"{summary['ort_runnable_folded']}")
        for reason, n in sorted(summary["declined_by_reason"].items(), key=lambda kv: -kv[1]):
            print(f"  declined: {reason}: {n}")
        if command.json:
            write_text(guard.pinned(command.json), json.dumps(summary, indent=1))
    return 1 if totals.get("wrong") or totals.get("gap") else 0
