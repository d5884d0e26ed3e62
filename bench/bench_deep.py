"""Per-node cost and the I/O floor (issue #16): onnxfold vs onnxruntime basic, with ``cp`` and
the bare import beside them, in the same run.

For every model, ``--repeat`` rounds (default 5) of these child processes, interleaved (one
process at a time; before each run the previous outputs are deleted and ``sync`` flushes them):

============  ===================================================================================
``cp``        ``cp IN TMP/out.onnx`` into a fresh file (the input's page cache is warm): the
              cost of reading and writing the bytes once
``import``    ``python -c "import onnx, onnxruntime, numpy"`` (onnxfold's interpreter): the
              start-up no Python tool that reads ONNX gets below
``io``        onnxfold's reader and writer alone: ``save_model(load_model(IN), OUT)``, every
              check, no pass: what onnxfold pays before it folds anything
``ir``        onnx-ir alone: ``ir.save(ir.load(IN), OUT)`` (after ``import onnxfold``, which
              defers onnx-ir's sympy import as the executable does): the IR's own cost
``onnxfold``  ``python -m onnxfold optimize IN -o OUT --json REPORT -q``
``ort``       ``onnxruntime.InferenceSession`` with ``ORT_ENABLE_BASIC`` and
              ``optimized_model_filepath`` (the offline optimizer; as in ``bench_fold.py``)
============  ===================================================================================

Reported per model (wall and CPU are medians over the rounds, peak RSS the max; whole child
processes, interpreter start-up included):

* nodes of the input's main graph (with subgraphs' nodes) and of each tool's output;
* wall s of each; ``onnxfold / ort``; ``floor = cp + import`` and
  ``onnxfold / floor`` (the issue's targets: <= 0.5x ort on the deep graphs and the LLM export,
  <= 1.3x the floor on the weight-heavy models);
* ``µs/node``: wall over input nodes, for onnxfold and ort, and onnxfold's above the bare
  import ((wall - import) / nodes): what a node costs once the interpreter is up;
* ``io`` and ``ir`` against onnxruntime and the floor: where reading and writing alone already
  exceed a target, no folding work can meet it.

Usage::

    python bench/make_deep_models.py                      # deep_12k deep_48k chain_200k
    /tmp/torchvenv/bin/python bench/make_llm_model.py     # llama_L32_dyn (torch venv)
    python bench/bench_deep.py [--repeat 5] [--corpus /tmp/corpus] [--models NAME|PATH ...]

Names are looked up in ``--cache`` (default ``~/.cache/onnxfold-bench``), then ``--corpus``; a
missing one is skipped with a note. Writes ``<out>/deep.md`` and ``<out>/deep.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from foldbench import MiB
from foldbench.machine import machine_info
from foldbench.measure import warm_cache
from foldbench.peers import probe_peers, tool_cmd
from foldbench.runner import ChildRun, run_child

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_CACHE = Path.home() / ".cache" / "onnxfold-bench"
DEFAULT_MODELS = ["deep_12k", "deep_48k", "chain_200k", "llama_L32_dyn",
                  "bert_base_ts", "gpt2_small_ts", "vit_base_ts"]
TOOLS = ("cp", "import", "io", "ir", "onnxfold", "ort")
IMPORT_CODE = "import onnx, onnxruntime, numpy"
# what reading and writing the model costs before any folding: onnxfold's own reader and
# writer (checks included, no passes), and onnx-ir's plain load and save (onnxfold imported
# first, as the executable does: it defers onnx-ir's sympy import)
# (both leave as the executable does, without tearing the interpreter down: ``os._exit``)
IO_CODE = ("import os, sys, onnxfold; from onnxfold.io import load_model, save_model; "
           "save_model(load_model(sys.argv[1]), sys.argv[2]); os._exit(0)")
IR_CODE = ("import os, sys, onnxfold, onnx_ir as ir; "
           "ir.save(ir.load(sys.argv[1]), sys.argv[2]); os._exit(0)")

# nodes of a model, counted in a child (the parent stays free of onnx): graph + subgraphs
COUNT_CODE = """\
import json, sys, onnx
def count(g):
    n = 0
    for node in g.node:
        n += 1
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                n += count(a.g)
            n += sum(count(x) for x in a.graphs)
    return n
m = onnx.load(sys.argv[1], load_external_data=False)
print(json.dumps({"nodes": count(m.graph), "top_nodes": len(m.graph.node)}))
"""


def resolve(names: list[str], cache: Path, corpus: Path) -> tuple[dict[str, Path], list[str]]:
    found, missing = {}, []
    for name in names:
        cands = [Path(name)] if name.endswith(".onnx") else \
            [cache / f"{name}.onnx", corpus / f"{name}.onnx"]
        path = next((p for p in cands if p.exists()), None)
        if path is None:
            missing.append(name)
        else:
            found[path.stem] = path
    return found, missing


def count_nodes(path: Path, tmp: Path, timeout: float) -> int | None:
    run = run_child([sys.executable, "-c", COUNT_CODE, str(path)], tmp / "count", timeout)
    if run.rc != 0:
        return None
    return json.loads((tmp / "count.out").read_text())["nodes"]


def onnxfold_from(tmp: Path, timeout: float) -> str:
    """Where this interpreter imports onnxfold from (PYTHONPATH can point at a snapshot); its
    modules and rules are byte-compiled first, so no timed run compiles them."""
    code = ("import compileall, os, onnxfold, onnxfold.rules\n"
            "where = os.path.dirname(onnxfold.__file__)\n"
            "for d in {where, *onnxfold.rules.__path__}:\n"
            "    compileall.compile_dir(d, quiet=1)\n"
            "print(where)")
    # cwd: tmp, as for the tool runs (``-c`` puts the cwd first on sys.path)
    run = run_child([sys.executable, "-c", code], tmp / "where", timeout, cwd=tmp)
    return (tmp / "where.out").read_text().strip() if run.rc == 0 else "?"


def command(tool: str, src: Path, dst: Path, report: Path, size: int, peers: str) -> list[str]:
    if tool == "cp":
        return ["cp", str(src), str(dst)]
    if tool == "import":
        return [sys.executable, "-c", IMPORT_CODE]
    if tool in ("io", "ir"):
        return [sys.executable, "-c", IO_CODE if tool == "io" else IR_CODE, str(src), str(dst)]
    return tool_cmd(tool, src, dst, report, size, peers)


def summarize(runs: list[ChildRun]) -> dict[str, Any]:
    bad = next((r for r in runs if r.rc != 0 or r.timed_out), None)
    return {
        "ok": bad is None,
        "error": None if bad is None else (bad.error_line or f"exit {bad.rc}"),
        "wall_s": statistics.median(r.wall_s for r in runs),
        "user_s": statistics.median(r.user_s for r in runs),
        "sys_s": statistics.median(r.sys_s for r in runs),
        "peak_rss_mib": max(r.maxrss_mib for r in runs),
        "walls": [round(r.wall_s, 3) for r in runs],
        "runs": [asdict(r) for r in runs],
    }


def bench_one(name: str, src: Path, tmp_root: Path, repeat: int, timeout: float,
              peers: str) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"{name}_", dir=tmp_root))
    size = src.stat().st_size
    warm_cache(src)
    outs = {t: tmp / f"{name}.{t}.onnx" for t in TOOLS}
    report = tmp / "report.json"
    runs: dict[str, list[ChildRun]] = {t: [] for t in TOOLS}
    for r in range(repeat):
        for tool in TOOLS:
            for p in tmp.glob("*.onnx*"):
                p.unlink()
            os.sync()
            print(f"[{name}] {tool} run {r + 1}/{repeat}", file=sys.stderr, flush=True)
            cmd = command(tool, src, outs[tool], report, size, peers)
            runs[tool].append(run_child(cmd, tmp / f"{tool}_{r}", timeout, cwd=tmp))
            if tool in ("onnxfold", "ort") and r == repeat - 1 and outs[tool].exists():
                # the last round's output is kept (out of the *.onnx* glob) to count its nodes
                os.replace(outs[tool], tmp / f"kept_{tool}.model")
    entry: dict[str, Any] = {"path": str(src), "bytes": size,
                             "nodes": count_nodes(src, tmp, timeout), "tools": {}}
    for tool in TOOLS:
        s = summarize(runs[tool])
        kept = tmp / f"kept_{tool}.model"
        if kept.exists():
            s["nodes_out"] = count_nodes(kept, tmp, timeout)
            kept.unlink()
        entry["tools"][tool] = s
    for p in tmp.iterdir():
        p.unlink()
    tmp.rmdir()
    return entry


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def derived(e: dict[str, Any]) -> dict[str, float | None]:
    t = e["tools"]
    fold, ort, cp, imp, io, irs = (t[k]["wall_s"] if k in t and t[k]["ok"] else None
                                   for k in ("onnxfold", "ort", "cp", "import", "io", "ir"))
    n = e["nodes"] or 0
    floor = cp + imp if cp is not None and imp is not None else None
    return {
        "fold_over_ort": fold / ort if fold and ort else None,
        "floor": floor,
        "fold_over_floor": fold / floor if fold and floor else None,
        "ort_over_floor": ort / floor if ort and floor else None,
        "fold_us_node": fold / n * 1e6 if fold and n else None,
        "fold_us_node_above_import": (fold - imp) / n * 1e6 if fold and imp and n else None,
        "ort_us_node": ort / n * 1e6 if ort and n else None,
        "io_over_ort": io / ort if io and ort else None,
        "io_over_floor": io / floor if io and floor else None,
        "ir_over_ort": irs / ort if irs and ort else None,
    }


def _wall(x: dict[str, Any] | None) -> str:
    if x is None:
        return "-"
    if not x["ok"]:
        return f"failed: {x['error']}"[:60]
    return f"{x['wall_s']:.2f} ({x['user_s']:.2f}, {x['sys_s']:.2f})"


def render(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        "# Per-node cost and the I/O floor: onnxfold vs onnxruntime basic (issue #16)",
        "",
        f"- date: {result['date']}; repeat: {result['repeat']} interleaved rounds (median wall, "
        "max RSS); whole child processes, interpreter start-up included",
        f"- machine: {m.get('cpu', '?')}, nproc {m.get('nproc', '?')}, "
        f"{m.get('mem_total_gib', '?')} GiB RAM",
        f"- onnxfold {m.get('onnxfold', '?')} from `{result.get('onnxfold_from', '?')}`; "
        f"python {m.get('python', '')}, onnxruntime {m.get('onnxruntime', '?')}, "
        f"onnx {m.get('onnx', '?')}",
        f"- command: `{result['command']}`",
        "- floor = `cp IN fresh_file` + `python -c \"import onnx, onnxruntime, numpy\"`; "
        "µs/node = wall / input nodes; 'above import' = (onnxfold wall - import) / nodes",
        "- io = onnxfold's reader and writer alone (`load_model` + `save_model`, no pass); "
        "ir = onnx-ir's `ir.load` + `ir.save`: what reading and writing the model costs "
        "before any folding",
        "",
        "| model | nodes in | MiB | nodes out onnxfold / ort | cp s | import s | onnxfold s "
        "(user, sys) | ort s (user, sys) | onnxfold / ort | onnxfold / floor | ort / floor "
        "| onnxfold µs/node (above import) | ort µs/node | peak RSS MiB onnxfold / ort |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, e in result["models"].items():
        t, d = e["tools"], derived(e)

        lines.append(
            f"| {name} | {e['nodes']} | {e['bytes'] / MiB:.1f} "
            f"| {t['onnxfold'].get('nodes_out', '-')} / {t['ort'].get('nodes_out', '-')} "
            f"| {t['cp']['wall_s']:.2f} | {t['import']['wall_s']:.2f} | {_wall(t['onnxfold'])} "
            f"| {_wall(t['ort'])} | {_f(d['fold_over_ort'])}x | {_f(d['fold_over_floor'])}x "
            f"| {_f(d['ort_over_floor'])}x "
            f"| {_f(d['fold_us_node'], '.0f')} ({_f(d['fold_us_node_above_import'], '.0f')}) "
            f"| {_f(d['ort_us_node'], '.0f')} "
            f"| {t['onnxfold']['peak_rss_mib']:.0f} / {t['ort']['peak_rss_mib']:.0f} |")
    lines += ["", "Reading and writing alone (no pass), against the targets' references:", "",
              "| model | io s (user, sys) | ir s (user, sys) | io / ort | ir / ort "
              "| io / floor |", "|---|--:|--:|--:|--:|--:|"]
    for name, e in result["models"].items():
        t, d = e["tools"], derived(e)
        lines.append(f"| {name} | {_wall(t.get('io'))} | {_wall(t.get('ir'))} "
                     f"| {_f(d['io_over_ort'])}x | {_f(d['ir_over_ort'])}x "
                     f"| {_f(d['io_over_floor'])}x |")
    lines += ["", "Wall s of every round (onnxfold; ort):", ""]
    for name, e in result["models"].items():
        lines.append(f"- {name}: {e['tools']['onnxfold']['walls']}; {e['tools']['ort']['walls']}")
    if result["missing"]:
        lines += ["", f"Not found (skipped): {', '.join(result['missing'])}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--corpus", type=Path, default=BENCH_DIR.parent.parent / "corpus")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--peers-python", default=sys.executable,
                    help="interpreter for onnxruntime; default: this one")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--out", type=Path, default=BENCH_DIR / "results")
    ap.add_argument("--tmpdir", type=Path, default=None)
    a = ap.parse_args(argv)
    found, missing = resolve(a.models, a.cache, a.corpus)
    for name in missing:
        print(f"{name}: not in {a.cache} or {a.corpus}, skipped", file=sys.stderr)
    a.out.mkdir(parents=True, exist_ok=True)
    cmdline = "python bench/bench_deep.py " + shlex.join(argv if argv is not None
                                                          else sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="bench_deep_", dir=a.tmpdir) as tmp_s:
        tmp = Path(tmp_s)
        probe = probe_peers(a.peers_python, a.timeout)
        result: dict[str, Any] = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "repeat": a.repeat, "command": cmdline.strip(), "missing": missing,
            "machine": machine_info(tmp, a.timeout, a.peers_python, probe), "models": {},
            "onnxfold_from": onnxfold_from(tmp, a.timeout),
        }
        for name, path in found.items():
            result["models"][name] = e = bench_one(name, path, tmp, a.repeat, a.timeout,
                                                   a.peers_python)
            e["derived"] = derived(e)
            (a.out / "deep.json").write_text(json.dumps(result, indent=1) + "\n")
    md = render(result)
    (a.out / "deep.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
