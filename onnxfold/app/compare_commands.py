"""``onnxfold compare`` (two models' outputs in onnxruntime on the same inputs) and
``onnxfold verify-folds`` (every folded tensor re-derived from the original)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from typing import Any

from onnxfold.app.commands import CompareCommand, VerifyFoldsCommand
from onnxfold.app.failure_line import failing_named
from onnxfold.io.tempfiles import write_text


def compare(command: CompareCommand) -> int:
    """Compare the models; 1 when an output is outside tolerance."""
    from onnxfold.check.compare import compare_models

    inputs = command.comparison.inputs
    return _run_and_report(
        lambda: compare_models(command.a, command.b, command.n, command.comparison.resolved()),
        command.a, command.b, command.json, [inputs] if inputs else [],
        "outside tolerance")


def verify_folds(command: VerifyFoldsCommand) -> int:
    """Re-derive the folded tensors; 1 when one differs from the original's."""
    from onnxfold.check.compare import verify_models

    inputs = command.comparison.inputs
    return _run_and_report(
        lambda: verify_models(command.a, command.b, command.comparison.resolved()),
        command.a, command.b, command.json, [inputs] if inputs else [],
        "folds differ from the original")


def _run_and_report(run: Callable[[], Any], a: str, b: str, json_path: str | None,
                    more_inputs: list[str], failure: str) -> int:
    """Run a comparison of ``a`` and ``b``, print its summary, write its JSON report (the
    models and ``more_inputs`` protected, the report pinned first); 1 with a line naming
    what failed, else 0."""
    from onnxfold.check.compare import CheckCouldNotRun
    from onnxfold.io.door import claimed

    # the models' files are read for their data files only when a report could replace one
    with contextlib.closing(claimed([(json_path, "JSON report")], more_inputs,
                                    [a, b] if json_path else [])) as guard:
        try:
            result = run()
        except CheckCouldNotRun as e:  # what was shown before it stopped, then exit 2
            if e.result is not None:
                _shown(e.result, json_path, guard)
            raise
        _shown(result, json_path, guard)
    if not result.ok:
        print(f"onnxfold: {failure}: {failing_named(result.failing)}", file=sys.stderr)
        return 1
    return 0


def _shown(result: Any, json_path: str | None, guard: Any) -> None:
    """Print ``result``'s summary and write its JSON report where one is asked for."""
    print(result.summary())
    if json_path:
        write_text(guard.pinned(json_path), json.dumps(result.to_dict(), indent=2) + "\n")
