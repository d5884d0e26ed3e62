"""What the Python API costs on a proto against a path (issue 84): ``onnxfold.simplify(onnx.load(
p))`` against ``onnxfold.simplify(p)``, without and with ``check_n=3``.

Every exporter hands its user a ``ModelProto``; the call on it must cost what the call on the
file costs. Targets: the call's wall at most ``WALL_TARGET`` x the path's, and the process's
peak RSS at most the path's peak plus the proto's own size (what the caller already holds: the
resident memory ``onnx.load`` took, measured in the child; more than the model's files, which
the table shows beside it). For each model, ``--repeat`` interleaved rounds of four child
processes, one at a time (``path``, ``proto``, each with ``check_n`` 0 and 3); each child
times the call itself (``onnx.load`` is the caller's, not the call's) and the bench reads its
peak RSS (``ru_maxrss`` of the reaped child). Walls are medians, peaks the largest. The table
goes into ``bench/README.md`` between its ``api_cost`` markers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.machine import dated
from bench.model_bench import arguments, built
from bench.model_bench import command as bench_command
from bench.process import ChildRun, median, run_child
from bench.readme import replace_section

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("bert_base_dynamo",)
WALL_TARGET = 1.2
CHECKS = (0, 3)

_CALL = """
import json, os, sys, time
import onnx, onnxfold
path, given, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
before = resident()
model = onnx.load(path) if given == "proto" else path
held = resident() - before
start = time.perf_counter()
folded, ok = onnxfold.simplify(model, check_n=n)
print(json.dumps({"call_s": time.perf_counter() - start, "ok": ok, "held_mib": held}))
"""


def _child(model: Path, given: str, n: int, work: Path, timeout: float) -> tuple[ChildRun, dict]:
    stem = work / f"{model.stem}.api.{given}.{n}"
    run = run_child([sys.executable, "-c", _CALL, str(model), given, str(n)], stem, timeout,
                    cwd=ROOT)
    if run.rc != 0:
        raise RuntimeError(f"{model.stem} {given} check_n={n}: {run.error_line}")
    return run, json.loads(stem.with_suffix(".out").read_text().splitlines()[-1])


def measure(name: str, work: Path, repeat: int, timeout: float) -> dict[str, float]:
    """Medians of the call's wall and the largest peak of each (given, check_n) pair."""
    model = built(name, work, timeout)
    size = sum(p.stat().st_size for p in work.glob(f"{name}.onnx*") if p.suffix in (".onnx",
                                                                                   ".data"))
    walls: dict[tuple[str, int], list[float]] = {}
    peaks: dict[tuple[str, int], float] = {}
    held: list[float] = []
    for _ in range(repeat):
        for n in CHECKS:
            for given in ("path", "proto"):
                run, said = _child(model, given, n, work, timeout)
                if not said["ok"]:
                    raise RuntimeError(f"{name} {given} check_n={n}: the check failed")
                walls.setdefault((given, n), []).append(said["call_s"])
                if given == "proto":
                    held.append(said["held_mib"])
                peaks[(given, n)] = max(peaks.get((given, n), 0.0), run.maxrss_mib)
    found: dict[str, float] = {"file_mib": size / 2**20, "proto_mib": median(held)}
    for (given, n), values in walls.items():
        found[f"{given}{n}_wall"] = median(values)
        found[f"{given}{n}_peak"] = peaks[(given, n)]
    return found


def table(results: dict[str, dict[str, float]]) -> str:
    """One row per model and check_n: the call's wall and peak, path and proto."""
    rows = ["| model (files, proto as held) | check_n | path: call, peak | proto: call, peak | "
            "proto / path wall | proto's peak / path's + proto |",
            "|---|---|---|---|---|---|"]
    for name, r in results.items():
        for n in CHECKS:
            wall = r[f"proto{n}_wall"] / r[f"path{n}_wall"]
            peak, budget = r[f"proto{n}_peak"], r[f"path{n}_peak"] + r["proto_mib"]
            rows.append(
                f"| {name} ({r['file_mib']:.0f} MiB, {r['proto_mib']:.0f} MiB) | {n} | "
                f"{r[f'path{n}_wall']:.2f} s, "
                f"{r[f'path{n}_peak']:.0f} MiB | {r[f'proto{n}_wall']:.2f} s, {peak:.0f} MiB | "
                f"{wall:.2f}x{' **over**' if wall > WALL_TARGET else ''} | "
                f"{peak:.0f} / {budget:.0f} MiB{' **over**' if peak > budget else ''} |")
    return "\n".join(rows)


def over(results: dict[str, dict[str, float]]) -> bool:
    """Whether a row misses a target."""
    return any(r[f"proto{n}_wall"] > WALL_TARGET * r[f"path{n}_wall"] or
               r[f"proto{n}_peak"] > r[f"path{n}_peak"] + r["proto_mib"]
               for r in results.values() for n in CHECKS)


def main(argv: list[str] | None = None) -> int:
    a = arguments("api_cost", __doc__, MODELS, argv)
    results = {name: measure(name, a.work, a.repeat, a.timeout) for name in a.models}
    command = bench_command("api_cost", a.repeat)
    text = (dated(command, ("onnxfold", "onnx", "onnxruntime")) + "\n\n" + table(results)
            + f"\n\nThe call's wall (`onnxfold.simplify(model, check_n=N)` timed inside the "
            f"child; `onnx.load` is the caller's): medians of {a.repeat} interleaved rounds, "
            f"target proto / path at most {WALL_TARGET:g}x. Peak RSS: the largest of the "
            "rounds, whole child process; target: the path's peak plus the proto's own size "
            "(as held: the resident memory `onnx.load` took in the child, median of the "
            "rounds).")
    print(text)
    if not a.no_readme:
        replace_section(ROOT / "bench" / "README.md", "api_cost", text)
    return 1 if over(results) else 0
