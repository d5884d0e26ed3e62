"""How fast a signal stops an onnxruntime inference onnxfold runs, and what it leaves.

Usage::

    python -m bench run signals [--repeat 5] [--work DIR] [--no-readme]

Each case starts ``python -m onnxfold`` on a model whose inference never ends
(``bench/stop_models.py``: a Loop of 1e15 steps) or runs one long kernel, waits until it is
inside the inference (the ``inference`` point of ``onnxfold.host.points``), lets it run 0.5 s,
sends the signal and measures, from the signal to the process's exit: the wall time (median
and largest of ``--repeat`` runs), the CPU time (``wait4``), the exit status, and the files
left (onnxfold's temporary and lock files beside the output, anything in ``TMPDIR`` but
onnxruntime's ``.ses``, an output that should not be there):

================  ===========================================================================
``check``         ``optimize endless.onnx -o OUT --check 1``: the original's inference
``compare``       ``compare endless.onnx endless.onnx``
``verify-folds``  ``verify-folds``: a folded tensor re-derived by 1e15 Loop steps
``latency``       ``optimize endless.onnx -o OUT --latency 2`` (OUT is written before it)
``session``       ``run``: a Session's fold of a runtime constant, 1e15 Loop steps
``long-kernel``   ``compare`` on a Conv of 3e11 multiply-adds (one kernel: not stopped halfway,
                  left behind while the process exits)
================  ===========================================================================

for SIGINT, SIGTERM and SIGHUP. Writes ``bench/results/signals.md`` and the table into
``bench/README.md``.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import stop_models
from bench.machine import dated
from bench.readme import replace_section
from onnxfold.host.points import PAUSE_AT_ENV, PAUSE_DIR_ENV

ROOT = Path(__file__).resolve().parent.parent
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP}
RUNNING = 0.5  # seconds inside the inference before the signal
TIMEOUT = 300.0
_OURS = re.compile(r"^\..*\.onnxfold-(\d+-|lock$)")


@dataclass
class Stop:
    """One run: exit code, seconds from the signal to the exit (wall, CPU), files left."""

    code: int
    wall: float
    cpu: float
    left: list[str]


def cases(work: Path) -> dict[str, tuple[list[str], bool]]:
    """Each case's command line (``OUT``: the output) and whether OUT is written before the
    inference."""
    endless = str(stop_models.endless(work / "endless.onnx"))
    pair = stop_models.endless_to_verify(work)
    fold, runtime = stop_models.endless_runtime_fold(work / "endless_fold.onnx",
                                                     work / "feeds.npz")
    kernel = str(stop_models.long_kernel(work / "long_kernel.onnx"))
    return {
        "check": (["optimize", endless, "-o", "OUT", "--check", "1"], False),
        "compare": (["compare", endless, endless], False),
        "verify-folds": (["verify-folds", str(pair.original), str(pair.folded)], False),
        "latency": (["optimize", endless, "-o", "OUT", "--latency", "2"], True),
        "session": (["run", str(fold), "--runtime-const", runtime, "--inputs",
                     str(work / "feeds.npz")], False),
        "long-kernel": (["compare", kernel, kernel], False),
    }


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _left(out: Path, tmp: Path, published: bool) -> list[str]:
    found = [str(p) for p in tmp.iterdir() if p.name != ".ses"]
    found += [str(out / name) for name in os.listdir(out)
              if _OURS.match(name) or not (published and name == "o.onnx")]
    return found


def stop(args: list[str], signum: int, published: bool) -> Stop:
    """Run ``args`` until it is inside its inference, signal it, measure its end."""
    with tempfile.TemporaryDirectory(prefix="bench-signals-") as scratch:
        base = Path(scratch)
        out, tmp, pauses = base / "out", base / "tmp", base / "pauses"
        for d in (out, tmp, pauses):
            d.mkdir()
        argv = [str(out / "o.onnx") if a == "OUT" else a for a in args]
        env = {**os.environ, "TMPDIR": str(tmp), PAUSE_AT_ENV: "inference",
               PAUSE_DIR_ENV: str(pauses)}
        proc = subprocess.Popen([sys.executable, "-m", "onnxfold", *argv], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + TIMEOUT
        while not (found := glob.glob(str(pauses / "inference.*"))):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"{' '.join(argv)}: never reached the inference")
            time.sleep(0.01)
        os.unlink(found[0])
        time.sleep(RUNNING)
        cpu, started = _cpu(proc.pid), time.monotonic()
        proc.send_signal(signum)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        return Stop(proc.returncode, wall, usage.ru_utime + usage.ru_stime - cpu,
                    _left(out, tmp, published))


def render(results: dict[str, dict[str, list[Stop]]], header: str, repeat: int) -> str:
    lines = [header, "", "| inference | signal | exit | signal -> exit (median · largest) | "
             "CPU after the signal (largest) | files left |", "|---|---|--:|--:|--:|--:|"]
    for case, by_signal in results.items():
        for name, stops in by_signal.items():
            codes = sorted({s.code for s in stops})
            walls = [s.wall for s in stops]
            lines.append(f"| {case} | {name} | {', '.join(map(str, codes))} | "
                         f"{statistics.median(walls):.2f} · {max(walls):.2f} s | "
                         f"{max(s.cpu for s in stops):.2f} s | "
                         f"{sum(len(s.left) for s in stops)} |")
    lines += ["", f"{repeat} runs per row, each signalled {RUNNING} s into an inference that "
              "never ends (long-kernel: a single Conv kernel of 3e11 multiply-adds); exit "
              "128 + N is the signal's one-line ending."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench run signals", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="runs per case and signal")
    ap.add_argument("--work", type=Path, default=None, help="where the models are built")
    ap.add_argument("--no-readme", action="store_true", help="print the table; write no file")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-signals-models-") as made:
        work = a.work or Path(made)
        work.mkdir(parents=True, exist_ok=True)
        results: dict[str, dict[str, list[Stop]]] = {}
        for case, (args, published) in cases(work).items():
            names = ["SIGTERM"] if case == "long-kernel" else list(SIGNALS)
            results[case] = {n: [stop(args, SIGNALS[n], published) for _ in range(a.repeat)]
                             for n in names}
            print(f"{case}: done", file=sys.stderr, flush=True)
    header = dated(f"python -m bench run signals{' ' + ' '.join(argv) if argv else ''}",
                   ("onnxfold", "onnxruntime"), memory=False)
    text = render(results, header, a.repeat)
    print(text)
    if not a.no_readme:
        out = ROOT / "bench" / "results" / "signals.md"
        out.write_text("# A signal during an inference (`python -m bench run signals`)\n\n"
                       + text + "\n")
        replace_section(ROOT / "bench" / "README.md", "signals", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
