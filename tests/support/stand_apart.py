"""A probe for the check standing apart from the fold: the calls into the fold's shape code
made from a check module while something runs (issue 82 item 5)."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable

# the fold's symbolic walk and the rules' shape code (issue 82 item 5: the check's input
# planner reads dims with its own code)
FOLD_SHAPE_CODE = ("/onnxfold/analysis/symbolic", "/rules/shape_steps.py",
                   "/rules/shape_values.py", "/onnxfold/declare/view.py")


def calls_from_the_check(run: Callable[[], object]) -> Counter:
    """Calls into :data:`FOLD_SHAPE_CODE` made with a frame of ``onnxfold/check`` below them
    while ``run()`` runs, in every thread (a module's body run by an import is not a call of
    its code)."""
    found: Counter = Counter()

    def seen(frame, event, arg):
        if event != "call" or frame.f_code.co_name == "<module>" or \
                not any(part in frame.f_code.co_filename for part in FOLD_SHAPE_CODE):
            return
        caller = frame.f_back
        while caller is not None:
            if "/onnxfold/check/" in caller.f_code.co_filename:
                found[(frame.f_code.co_filename, caller.f_code.co_filename)] += 1
                return
            caller = caller.f_back

    threading.setprofile(seen)
    sys.setprofile(seen)
    try:
        run()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return found
