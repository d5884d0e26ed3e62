"""onnxfold, onnxsim and onnxslim in the flows that ship language models (issue 80): each flow
of ``bench.client_models`` (optimum's exporter and its ``ORTModel*`` default load, genai's
builder and generator; tiny random-weight models) gets every ``.onnx`` of its directory
optimized in place by each tool's command line (``onnxfold M M``, ``onnxsim M M``, ``onnxslim
M M``: the file names are the client's), then the client generates greedily from it.

Per flow and tool: what broke (the tool, or the client on its output), the nodes of the file the
client loads (Constant nodes and subgraphs' counted as onnxfold counts), the tool's wall summed
over the directory's files (the median of ``--repeat`` rounds, tools interleaved) and its
largest peak RSS, and whether the client's tokens and logits are those of the unoptimized
directory (bit for bit). Peers run under ``--peers-python`` (a venv with onnxsim and onnxslim;
without one their rows say so). The table goes into ``bench/README.md`` between its ``clients``
markers.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

from bench import client_models
from bench.machine import dated
from bench.process import ChildRun, median, run_child
from bench.readme import replace_section

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("onnxfold", "onnxsim", "onnxslim")
_PEER = {"onnxsim": "import runpy, sys\nsys.argv = ['onnxsim', *sys.argv[1:]]\n"
                    "runpy.run_module('onnxsim', run_name='__main__')\n",
         "onnxslim": "import runpy, sys\nsys.argv = ['onnxslim', *sys.argv[1:]]\n"
                     "runpy.run_module('onnxslim', run_name='__main__')\n"}


def _command(tool: str, model: str, peers_python: str) -> list[str]:
    if tool == "onnxfold":
        return [sys.executable, "-m", "onnxfold", model, model, "-q"]
    return [peers_python, "-c", _PEER[tool], model, model]


def nodes(path: Path) -> int:
    """Nodes of ``path`` and its subgraphs, Constant nodes not counted."""
    graphs, count = [onnx.load(path, load_external_data=False).graph], 0
    while graphs:
        graph = graphs.pop()
        count += sum(node.op_type != "Constant" for node in graph.node)
        graphs += [a.g for node in graph.node for a in node.attribute
                   if a.type == onnx.AttributeProto.GRAPH]
    return count


def _client(flow: client_models.Flow, overlay: Path | None, directory: Path, out: Path,
            timeout: float) -> str | None:
    """Run the client's generation; None, or the last line it printed where it failed."""
    cmd, env = client_models.child_command(flow, "generate", flow.name, directory, out,
                                           overlay=overlay)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return lines[-1][:160] if lines else f"exit {done.returncode}"


def _optimized(flow: client_models.Flow, source: Path, tool: str, work: Path, repeat: int,
               peers_python: str, timeout: float) -> dict:
    """``tool`` over every model of ``source``, in place in a copy, ``repeat`` times."""
    rounds: list[list[ChildRun]] = []
    target = work / f"{flow.name}.{tool}"
    for _ in range(repeat):
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)
        runs = [run_child(_command(tool, model.name, peers_python), work / f"{target.name}.log",
                          timeout, cwd=target) for model in sorted(target.glob("*.onnx"))]
        rounds.append(runs)
        failed = next((r for r in runs if r.rc != 0), None)
        if failed is not None:
            return {"broke": f"{tool} fails: {failed.error_line[:120]}"}
    return {"target": target, "wall": median([sum(r.wall_s for r in runs) for runs in rounds]),
            "peak": max(r.maxrss_mib for runs in rounds for r in runs)}


def measure(flow: client_models.Flow, work: Path, repeat: int, peers_python: str | None,
            timeout: float) -> dict[str, dict]:
    """Every tool's row for ``flow``."""
    overlay = client_models.optimum_overlay() if flow.client == "optimum" else None
    source = work / flow.name
    reference = work / f"{flow.name}.npz"
    if not reference.exists():
        shutil.rmtree(source, ignore_errors=True)
        cmd, env = client_models.child_command(flow, "make", flow.name, source, reference,
                                               overlay=overlay)
        subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=timeout)
    want = np.load(reference)
    rows: dict[str, dict] = {"export": {"nodes": nodes(source / flow.loads)}}
    for tool in TOOLS:
        if tool != "onnxfold" and peers_python is None:
            rows[tool] = {"broke": "not run (no --peers-python)"}
            continue
        row = _optimized(flow, source, tool, work, repeat, peers_python or sys.executable,
                         timeout)
        if "target" in row:
            target = row.pop("target")
            row["nodes"] = nodes(target / flow.loads)
            out = work / f"{flow.name}.{tool}.npz"
            failed = _client(flow, overlay, target, out, timeout)
            if failed is not None:
                row["broke"] = f"the client fails: {failed}"
            else:
                got = np.load(out)
                row["same"] = want["tokens"].tolist() == got["tokens"].tolist()
                row["bitwise"] = want["logits"].tobytes() == got["logits"].tobytes()
        rows[tool] = row
    return rows


def table(results: dict[str, dict[str, dict]]) -> str:
    lines = ["| flow (file the client loads: export's nodes) | " +
             " | ".join(TOOLS) + " |", "|---|" + "---|" * len(TOOLS)]
    for name, rows in results.items():
        flow = client_models.FLOWS[name]
        cells = []
        for tool in TOOLS:
            row = rows[tool]
            if "broke" in row:
                cells.append(f"**{row['broke']}**" if "not run" not in row["broke"]
                             else row["broke"])
                continue
            said = "same tokens, logits bitwise" if row["bitwise"] else \
                "same tokens" if row["same"] else "**other tokens**"
            cells.append(f"{row['nodes']} · {row['wall']:.1f} s · {row['peak']:.0f} MiB · "
                         f"{said}")
        lines.append(f"| {name} (`{flow.loads}`: {rows['export']['nodes']}) | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench run clients", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", nargs="+", default=list(client_models.FLOWS), metavar="NAME",
                    choices=list(client_models.FLOWS), help="default: every flow")
    ap.add_argument("--repeat", type=int, default=3, help="rounds per tool (medians)")
    ap.add_argument("--peers-python", default=None,
                    help="an interpreter with onnxsim and onnxslim (default: none, not run)")
    ap.add_argument("--work", type=Path,
                    default=client_models.cache_dir() / "bench", help="models and outputs")
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds per child")
    ap.add_argument("--no-readme", action="store_true", help="print the table only")
    a = ap.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    results = {name: measure(client_models.FLOWS[name], a.work, a.repeat, a.peers_python,
                             a.timeout) for name in a.flows}
    command = "python -m bench run clients" + (" --peers-python PEERS" if a.peers_python
                                               else "")
    text = (dated(command, ("onnxfold", "onnx", "onnxruntime", "onnxruntime_genai"))
            + "\n\n" + table(results) + f"\n\nEach cell: nodes of the file the client loads "
            f"(Constant nodes not counted, subgraphs' counted), the tool's wall over the "
            f"directory's models (median of {a.repeat} rounds), its largest peak RSS, and the "
            "client's greedy generation (20 tokens) against the unoptimized directory's.")
    print(text)
    if not a.no_readme:
        replace_section(ROOT / "bench" / "README.md", "clients", text)
    broken = [name for name, rows in results.items()
              if "broke" in rows["onnxfold"] or not rows["onnxfold"].get("bitwise")]
    return 1 if broken else 0
