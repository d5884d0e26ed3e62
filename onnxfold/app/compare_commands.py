"""``onnxfold compare`` (two models' outputs in onnxruntime on the same inputs) and
``onnxfold verify-folds`` (every folded tensor re-derived from the original)."""

from __future__ import annotations

import json
import sys

from onnxfold.app.commands import CompareCommand, VerifyFoldsCommand
from onnxfold.app.report_files import guard_inputs, write_report


def compare(command: CompareCommand) -> int:
    """Compare the models; 1 when an output is outside tolerance."""
    from onnxfold.check.comparison import compare_models

    guard = None
    if command.json:
        guard = guard_inputs([command.a, command.b])
        inputs = command.comparison.inputs
        guard.protect([inputs] if inputs else [])
        guard.pin(command.json, "JSON report")
    try:
        result = compare_models(command.a, command.b, command.n, command.comparison.resolved())
        print(result.summary())
        if command.json:
            write_report(command.json, json.dumps(result.to_dict(), indent=2) + "\n", guard)
    finally:
        if guard is not None:
            guard.close()
    if not result.ok:
        print(f"onnxfold: outside tolerance: {', '.join(result.failing)}", file=sys.stderr)
        return 1
    return 0


def verify_folds(command: VerifyFoldsCommand) -> int:
    """Re-derive the folded tensors; 1 when one differs from the original's."""
    from onnxfold.check.fold_verification import verify_folds as verify

    guard = None
    if command.json:
        guard = guard_inputs([command.a, command.b])
        guard.pin(command.json, "JSON report")
    try:
        result = verify(command.a, command.b)
        print(result.summary())
        if command.json:
            write_report(command.json, json.dumps(result.to_dict(), indent=2) + "\n", guard)
    finally:
        if guard is not None:
            guard.close()
    if not result.ok:
        print(f"onnxfold: folds differ from the original: {', '.join(result.failing)}",
              file=sys.stderr)
        return 1
    return 0
