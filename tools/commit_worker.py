"""One long-lived fold process for one checkout of onnxfold (``tools.compare_commits``'s worker).

    python tools/commit_worker.py CHECKOUT

imports ``onnxfold`` from CHECKOUT (never the installed or editable copy: the packages that
CHECKOUT's pyproject.toml maps elsewhere, such as ``onnxfold.rules`` = ``rules/``, are found by a
finder placed first, and the editable install's finder is removed), says where it came from in
its first line, then reads one JSON request per line on stdin::

    {"src": "in.onnx", "out": "DIR/model.onnx", "options": {"growth_factor": null}}

folds ``src`` through the public API only (``onnxfold.optimize(src, FoldOptions(**options))``
then ``onnxfold.io.save_model``), so that commits with different module layouts run the same
way, and answers one JSON line per request: ``{"ok": true, "seconds": ...}`` (the fold and the
save, timed here) or ``{"ok": false, "error": "Type: first line"}`` (the output directory
written as ``OUT``). Answers go to the original standard output; anything printed by onnxfold
or by native code goes to standard error.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
import tomllib
from pathlib import Path
from types import ModuleType


class _CheckoutPackages(importlib.abc.MetaPathFinder):
    """Finds the packages a checkout's pyproject.toml maps to other directories."""

    def __init__(self, mapping: dict[str, Path]) -> None:
        self.mapping = mapping

    def find_spec(self, fullname: str, path: object = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        directory = self.mapping.get(fullname)
        if directory is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, directory / "__init__.py", submodule_search_locations=[str(directory)])


def _package_dirs(checkout: Path) -> dict[str, Path]:
    """``[tool.setuptools.package-dir]`` of the checkout: package name -> its directory."""
    try:
        config = tomllib.loads((checkout / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    dirs = config.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    return {name: checkout / where for name, where in dirs.items() if name}


def import_from(checkout: Path) -> ModuleType:
    """``onnxfold`` imported from ``checkout``; exits 3 if it came from anywhere else."""
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
    sys.path.insert(0, str(checkout))
    sys.meta_path[:] = [f for f in sys.meta_path
                        if not getattr(f, "__module__", "").startswith("__editable__")]
    sys.meta_path.insert(0, _CheckoutPackages(_package_dirs(checkout)))
    onnxfold = importlib.import_module("onnxfold")
    rules = importlib.import_module("onnxfold.rules")
    for module in (onnxfold, rules):
        where = Path(module.__file__ or "").resolve()
        if checkout.resolve() not in where.parents:
            print(f"commit_worker: {module.__name__} imported from {where}, not {checkout}",
                  file=sys.stderr)
            sys.exit(3)
    return onnxfold


def serve(onnxfold: ModuleType, answers) -> None:
    """Answer fold requests from stdin until it closes."""
    writer = importlib.import_module(f"{onnxfold.__name__}.io")
    for line in sys.stdin:
        request = json.loads(line)
        started = time.perf_counter()
        try:
            options = onnxfold.FoldOptions(**request.get("options", {}))
            result = onnxfold.optimize(request["src"], options)
            writer.save_model(result.model, request["out"])
            answer: dict[str, object] = {"ok": True, "seconds": time.perf_counter() - started}
        except Exception as error:  # every failure is data for the comparison
            # the output directory differs per commit: named alike, equal failures compare equal
            text = str(error).replace(str(Path(request["out"]).parent), "OUT").strip()
            first = text.splitlines()[0] if text else ""
            answer = {"ok": False, "error": f"{type(error).__name__}: {first}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def main() -> None:
    checkout = Path(sys.argv[1])
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # prints (Python or native) must not interleave with the answers
    sys.stdout = sys.stderr
    onnxfold = import_from(checkout)
    answers.write(json.dumps({"onnxfold": onnxfold.__file__}) + "\n")
    answers.flush()
    serve(onnxfold, answers)


if __name__ == "__main__":
    main()
