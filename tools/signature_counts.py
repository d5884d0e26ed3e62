"""The signature's counts over many models, and how two runs of them compare (issue 83).

``run`` folds each model with ``python -m onnxfold optimize M -o OUT -q --json REPORT`` (the
interpreter given: another checkout's through ``--python``) and keeps each report's
``signature.compute`` in one JSON file; ``diff`` compares two such files: each model whose
counts or what was left uncounted differ, the models counted less, and per file the models
and nodes of a declared cost left uncounted (an op with no declared cost, a custom op or a
``Loop``, is never counted and not in that total)::

    python -m tools.signature_counts run OUT.json MODEL... [--python PY]
    python -m tools.signature_counts diff BASE.json HEAD.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def run(out: Path, models: list[str], python: str) -> None:
    """Fold each of ``models`` with ``python`` and write their counts into ``out``."""
    found: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as scratch:
        report, folded = Path(scratch) / "r.json", Path(scratch) / "o.onnx"
        for model in models:
            done = subprocess.run([python, "-m", "onnxfold", "optimize", model, "-o",
                                   str(folded), "-q", "--json", str(report)],
                                  capture_output=True, text=True, cwd=scratch)
            compute = json.loads(report.read_text())["signature"]["compute"] \
                if report.exists() else {"error": done.stderr[-300:]}
            report.unlink(missing_ok=True)
            found[model] = {"exit": done.returncode, "compute": compute}
            print(f"{os.path.basename(model)}: exit {done.returncode}, "
                  f"{_summary(compute)}", flush=True)
    out.write_text(json.dumps(found, indent=1))


def _summary(compute: dict) -> tuple:
    """(FLOPs before, after, not counted by op) or ("reason", why)."""
    if "before" not in compute:
        return "reason", compute.get("reason") or compute.get("error")
    return (compute["before"]["flops"], compute["after"]["flops"],
            {**compute["before"]["not_counted"], **compute["after"]["not_counted"]})


def _uncounted(compute: dict, costed: set[str]) -> int:
    """The nodes of a declared cost left uncounted, before and after."""
    if "before" not in compute:
        return 0
    return sum(n for side in ("before", "after")
               for op, n in compute[side]["not_counted"].items() if op in costed)


def diff(base: Path, head: Path) -> None:
    """Print how ``head``'s counts differ from ``base``'s, and each file's uncounted total."""
    from onnxfold.declare.catalogue import load_catalogue

    costed = {op if not domain else f"{domain}.{op}" for domain, op in load_catalogue().costs}
    a, b = json.loads(base.read_text()), json.loads(head.read_text())
    for model in a.keys() & b.keys():
        was, now = a[model]["compute"], b[model]["compute"]
        if _summary(was) != _summary(now) or a[model]["exit"] != b[model]["exit"]:
            less = _uncounted(now, costed) > _uncounted(was, costed)
            print(f"{'LESS ' if less else '     '}{os.path.basename(model)}\n"
                  f"    base {_summary(was)}\n    head {_summary(now)}")
    for name, found in (("base", a), ("head", b)):
        counts = [_uncounted(r["compute"], costed) for r in found.values()]
        print(f"{name}: {len(found)} models, {sum(1 for n in counts if n)} with "
              f"{sum(counts)} nodes of a declared cost not counted")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.signature_counts")
    sub = parser.add_subparsers(dest="command", required=True)
    ran = sub.add_parser("run")
    ran.add_argument("out", type=Path)
    ran.add_argument("models", nargs="+")
    ran.add_argument("--python", default=sys.executable)
    compared = sub.add_parser("diff")
    compared.add_argument("base", type=Path)
    compared.add_argument("head", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args.out, args.models, args.python)
    else:
        diff(args.base, args.head)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
