"""What the benchmarks over ``bench/builders.py`` exports share (``check_cost``, ``api_cost``):
their arguments, each export built in a child, the command line quoted above their table."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.process import run_child

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_REPEAT = 3


def arguments(name: str, doc: str | None, models: Sequence[str],
              argv: list[str] | None, windowed: Sequence[str] = ()) -> argparse.Namespace:
    """The benchmark's arguments (``--models``, ``--repeat``, ``--work``, ``--timeout``,
    ``--no-readme``; ``--windowed`` where the benchmark has ``windowed`` models), its work
    directory made."""
    ap = argparse.ArgumentParser(prog=f"python -m bench run {name}", description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=list(models), metavar="NAME",
                    help="exports of bench/builders.py; default: %(default)s")
    if windowed:
        ap.add_argument("--windowed", nargs="*", default=list(windowed), metavar="NAME",
                        help="models checked in stages (bench/llm.py's); default: "
                             "%(default)s")
    ap.add_argument("--repeat", type=int, default=DEFAULT_REPEAT, help="interleaved rounds")
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache" / "onnxfold-bench",
                    help="where the models are built (kept) and the outputs go")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per child")
    ap.add_argument("--no-readme", action="store_true", help="print the table only")
    a = ap.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    return a


def built(name: str, work: Path, timeout: float) -> Path:
    """Export ``name`` into ``work`` (kept: made once) in a child: an export's peak RSS would
    be carried into the children measured."""
    done = run_child([sys.executable, "-m", "bench.builders", name, str(work)],
                     work / f"{name}.build", timeout, cwd=ROOT)
    if done.rc != 0:
        raise RuntimeError(f"{name}: {done.error_line}")
    return work / f"{name}.onnx"


def command(name: str, repeat: int) -> str:
    """The command line that made a table, as its heading quotes it."""
    return f"python -m bench run {name}" + (f" --repeat {repeat}" if repeat != DEFAULT_REPEAT
                                            else "")
