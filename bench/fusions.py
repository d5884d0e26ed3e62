"""onnxruntime's transformer optimizer before and after each tool (issue 81): for every family
and exporter of ``bench.fusion_models``, every exported file goes through

- the optimizer alone (``python -m onnxruntime.transformers.optimizer``, as its command line);
- each tool, then the optimizer (onnxfold, onnxsim, onnxslim);
- the optimizer, then each tool;

and each result's nodes (Constant nodes not counted) and fused ops (``Attention``,
``EmbedLayerNormalization``, ``SkipLayerNormalization``, ``BiasGelu`` ...) are counted, with
the nodes of onnxruntime's own final graph (``ORT_ENABLE_ALL``, no optimizer) of the export and
of each tool's output beside. onnxfold's chains are compared with the export in onnxruntime
(``onnxfold compare``, 3 input sets). Peers run under ``--peers-python`` (a venv with onnxsim
and onnxslim). The table goes into ``bench/README.md`` between its ``fusions`` markers.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from bench import fusion_models as fm
from bench.machine import dated
from bench.readme import replace_section
from onnxfold.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("onnxfold", "onnxsim", "onnxslim")
_PEER = "import runpy, sys\nsys.argv = [sys.argv[1], *sys.argv[2:]]\n" \
        "runpy.run_module(sys.argv[0], run_name='__main__')\n"


def _tool(tool: str, source: Path, target: Path, peers_python: str | None) -> str | None:
    """``tool`` from ``source`` to ``target``; None, or why it gave nothing."""
    if tool == "onnxfold":
        cmd = [sys.executable, "-m", "onnxfold", "optimize", str(source), "-o", str(target),
               "-q"]
    elif peers_python is None:
        return "not run (no --peers-python)"
    else:
        cmd = [peers_python, "-c", _PEER, tool, str(source), str(target)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0 or not target.exists():
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        return f"{tool} fails: {lines[-1][:100] if lines else done.returncode}"
    return None


def _optimized(source: Path, target: Path, name: str) -> str | None:
    done = fm.optimize(source, target, name)
    if done.returncode != 0 or not target.exists():
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return f"the optimizer fails: {lines[-1][:100] if lines else done.returncode}"
    return None


def ort_nodes(path: Path, work: Path) -> int:
    """Nodes of onnxruntime's own final graph of ``path`` (ORT_ENABLE_ALL, CPU; written into
    ``work``)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(work / f"{path.stem}.ort.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return fm.nodes(Path(options.optimized_model_filepath))


def _same(name: str, source: Path, other: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "onnxfold", "compare", str(source), str(other),
                           "-n", "3", *fm.dim_args(name, source)], capture_output=True,
                          text=True, timeout=1200)
    return "same" if done.returncode == 0 else f"**differs (exit {done.returncode})**"


def _loads(path: Path) -> str | None:
    """None where onnxruntime's CPU provider loads ``path``; else why not (one line)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own unexported classes
        return str(e).splitlines()[0].rsplit(" : ", 1)[-1].split(" node with name")[0][:100]
    return None


def _compared(name: str, source: Path, chains: tuple[Path, ...], alone: Path,
              folded: Path) -> str:
    """onnxfold's chains against the export; where the optimizer's own output holds an op
    onnxruntime's CPU provider has no kernel for (T5's RelativePositionBias), no chain through
    it runs here: onnxfold alone against the export instead, and the reason said."""
    cannot = _loads(alone) if alone.exists() else "no optimizer output"
    if cannot is None:
        return ", ".join(_same(name, source, p) for p in chains if p.exists())
    alone_same = _same(name, source, folded) if folded.exists() else "no onnxfold output"
    return f"not run here (the optimizer's output: {cannot}); onnxfold alone: {alone_same}"


def _cell(path: Path | None, broke: str | None) -> str:
    if broke is not None or path is None:
        return f"**{broke}**" if broke and "not run" not in broke else str(broke)
    fused = fm.fused(path)
    ops = ", ".join(f"{op} {n}" for op, n in sorted(fused.items()))
    return f"{fm.nodes(path)} · {sum(fused.values())} fused ({ops})" if fused else \
        f"{fm.nodes(path)} · 0 fused"


def _latency(name: str, optimized: Path, folded_first: Path, runs: int) -> str:
    """The deployed latency of onnxfold -> optimizer against the optimizer alone: onnxruntime
    with its default options (ORT_ENABLE_ALL), 1 thread, ``runs`` interleaved runs; token ids
    within the vocabulary (the fused embedding's tables are not the graph's Gathers)."""
    import onnx

    from onnxfold.latency.measure import measure_latency

    graph = onnx.load(str(optimized), load_external_data=False).graph
    inputs = {i.name for i in graph.input}
    named = {d.dim_param for i in graph.input for d in i.type.tensor_type.shape.dim}
    ranges = {n: r for n, r in (("input_ids", (0, fm.VOCAB)),
                                ("decoder_input_ids", (0, fm.VOCAB)),
                                ("token_type_ids", (0, 1))) if n in inputs}
    dims = {d: v for d, v in fm.ALL[name].dims if d in named}
    result = measure_latency(str(optimized), str(folded_first), runs=runs, threads=1,
                             levels=("all",), int_ranges=ranges, dims=dims)
    (timing,) = result.timings
    return f"{timing.run_ms[0]:.3f} -> {timing.run_ms[1]:.3f} ms (x{timing.run_ratio:.2f})"


def measure(name: str, source: Path, work: Path, peers_python: str | None,
            latency_runs: int = 0) -> dict:
    """Every chain's cell for one exported file (the chains' files in ``work``)."""
    work.mkdir(parents=True, exist_ok=True)
    row: dict = {"export": f"{fm.nodes(source)} (onnxruntime {ort_nodes(source, work)})"}
    alone = work / f"{source.stem}.opt.onnx"
    row["optimizer"] = _cell(alone, _optimized(source, alone, name))
    for tool in TOOLS:
        first, then = work / f"{source.stem}.{tool}.onnx", work / f"{source.stem}.{tool}.opt.onnx"
        broke = _tool(tool, source, first, peers_python)
        if broke is None:
            broke = _optimized(first, then, name)
        row[f"{tool} -> optimizer"] = _cell(then, broke)
        if broke is None:
            row[f"{tool} alone, onnxruntime"] = str(ort_nodes(first, work))
        after = work / f"{source.stem}.opt.{tool}.onnx"
        later = _tool(tool, alone, after, peers_python) if alone.exists() else "no optimizer output"
        row[f"optimizer -> {tool}"] = _cell(after, later)
        if tool == "onnxfold" and latency_runs and broke is None and alone.exists():
            try:
                row["latency"] = _latency(name, alone, then, latency_runs)
            except InputError as e:  # the optimizer's output does not run here (a GPU op)
                row["latency"] = f"not timed: {str(e).split(': ', 1)[-1][:100]}"
        if tool == "onnxfold":
            row["same"] = _compared(name, source, (then, after), alone, first)
    return row


COLUMNS = ("export", "optimizer", "onnxfold -> optimizer", "onnxsim -> optimizer",
           "onnxslim -> optimizer", "optimizer -> onnxfold", "optimizer -> onnxsim",
           "optimizer -> onnxslim", "onnxfold alone, onnxruntime", "same", "latency")


def table(rows: dict[str, dict]) -> str:
    lines = ["| model | " + " | ".join(COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
    for label, row in rows.items():
        lines.append(f"| {label} | " + " | ".join(row.get(c, "") for c in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench run fusions", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", nargs="+", default=None, choices=list(fm.ALL),
                    help="default: every family of the tests (bench/fusion_models.py)")
    ap.add_argument("--held-out", action="store_true",
                    help="the held-out families (in no test), into their own section")
    ap.add_argument("--exporters", nargs="+", default=list(fm.EXPORTERS), choices=fm.EXPORTERS)
    ap.add_argument("--peers-python", default=None,
                    help="an interpreter with onnxsim and onnxslim (default: none, not run)")
    ap.add_argument("--work", type=Path, default=fm.cache_dir() / "bench",
                    help="where the chains' files go (the exports: fusion_models.cache_dir)")
    ap.add_argument("--latency", type=int, default=0, metavar="RUNS",
                    help="also time the optimizer's output against onnxfold -> optimizer "
                         "(1 thread, default options, RUNS interleaved runs, medians)")
    ap.add_argument("--no-readme", action="store_true", help="print the table only")
    a = ap.parse_args(argv)
    families = a.families or list(fm.HELD_OUT if a.held_out else fm.FAMILIES)
    rows: dict[str, dict] = {}
    for name in families:
        for exporter in a.exporters:
            try:
                sources = fm.cached_export(name, exporter)
            except subprocess.CalledProcessError as e:  # the exporter's failure, not a tool's
                rows[f"{name}, {exporter}"] = {"export": f"**the export fails: "
                                                         f"{fm.export_error(e)}**"}
                print(f"{name}, {exporter}: {rows[f'{name}, {exporter}']}", flush=True)
                continue
            for source in sources:
                label = f"{name}, {exporter}: {source.name}"
                rows[label] = measure(name, source, a.work / f"{name}_{exporter}",
                                      a.peers_python, a.latency)
                print(f"{label}: {rows[label]}", flush=True)
    command = "python -m bench run fusions" + (" --held-out" if a.held_out else "") + \
        (" --peers-python PEERS" if a.peers_python else "")
    text = (dated(command, ("onnxfold", "onnx", "onnxruntime")) + "\n\n" + table(rows) +
            "\n\nEach cell: nodes (Constant nodes not counted) · fused ops, the optimizer's "
            "`--model_type` per family (bench/fusion_models.py); `export`: the export's nodes "
            "and onnxruntime's final graph's (ORT_ENABLE_ALL); `same`: onnxfold -> optimizer "
            "and optimizer -> onnxfold against the export (`onnxfold compare -n 3`); `latency`: "
            "the optimizer alone -> onnxfold then the optimizer, onnxruntime with its default "
            "options, 1 thread, medians of the interleaved runs (`--latency RUNS`).")
    print(text)
    if not a.no_readme:
        replace_section(ROOT / "bench" / "README.md",
                        "fusions-held-out" if a.held_out else "fusions", text,
                        command.replace(" --peers-python PEERS", ""))
    return 0
