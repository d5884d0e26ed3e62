"""``onnxfold compare`` (two models' outputs in onnxruntime on the same inputs) and
``onnxfold verify-folds`` (every folded tensor re-derived from the original), each with its
``--json`` and ``--report`` HTML page (``optimize --report``'s check section)."""

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

    inputs, options = command.comparison.inputs, command.comparison.resolved()  # before a claim
    return _run_and_report(
        lambda: compare_models(command.a, command.b, command.n, options),
        command, [inputs] if inputs else [], "outside tolerance", lambda r: r.to_dict())


def verify_folds(command: VerifyFoldsCommand) -> int:
    """Re-derive the folded tensors; 1 when one differs from the original's."""
    from onnxfold.check.compare import verify_models

    inputs, options = command.comparison.inputs, command.comparison.resolved()  # before a claim
    return _run_and_report(
        lambda: verify_models(command.a, command.b, options),
        command, [inputs] if inputs else [], "folds differ from the original", _folds_only)


def _folds_only(verification: Any) -> dict[str, Any]:
    """A fold verification as the report's check: its state, verdict line and folds."""
    return {"ok": verification.ok, "state": "passed" if verification.ok else "failed",
            "verdict": verification.last_line(),
            "folds": verification.to_dict()}


def _run_and_report(run: Callable[[], Any], command: CompareCommand | VerifyFoldsCommand,
                    more_inputs: list[str], failure: str,
                    as_check: Callable[[Any], dict[str, Any]]) -> int:
    """Run a comparison of the command's models, print its summary, write its JSON report
    and its HTML page (``as_check``: the result as the page's check; the models and
    ``more_inputs`` protected, the reports pinned first); 1 with a line naming what failed,
    else 0. A comparison that could not run shows what it had shown, then exits 2."""
    from onnxfold.check.compare import CheckCouldNotRun
    from onnxfold.io.door import claimed

    a, b = command.a, command.b
    reports = [(command.json, "JSON report"), (command.html, "HTML report")]
    # the models' files are read for their data files only when a report could replace one
    with contextlib.closing(claimed(reports, more_inputs, [a, b] if command.json or
                                    command.html else [])) as guard:
        def shown(result: Any) -> None:
            # a failure's verdict is the one line on stderr (see the end), not said twice
            if isinstance(command, VerifyFoldsCommand):
                print(result.summary())
                if result.ok:
                    print(result.last_line())
            else:
                print(result.summary(verdict=result.ok))
            if command.json:
                write_text(guard.pinned(command.json),
                           json.dumps(result.to_dict(), indent=2) + "\n")
            if command.html:
                from onnxfold.app.report_html import compare_page

                write_text(guard.pinned(command.html), compare_page(
                    as_check(result), a, b, not command.comparison.fold_verification,
                    "compare" if isinstance(command, CompareCommand) else "verify-folds"))

        try:
            result = run()
        except CheckCouldNotRun as e:
            if e.result is not None:
                shown(e.result)
            # the check's advice names optimize's flag: these commands are the check
            raise CheckCouldNotRun(str(e).replace(", or without --check", ""),
                                   e.result) from None
        shown(result)
    if not result.ok:
        print(f"onnxfold: {failure}: {failing_named(result.failing)}", file=sys.stderr)
        return 1
    return 0

