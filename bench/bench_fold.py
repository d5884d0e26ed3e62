"""Public cross-tool benchmark: onnxfold against the other ONNX constant folders.

For every model, every tool runs as its own child process, one process at a time:

===============  ==========================================================================
``onnxfold``     ``python -m onnxfold optimize IN -o OUT --json REPORT -q`` (this interpreter)
``ort``          ``onnxruntime.InferenceSession`` with ``ORT_ENABLE_BASIC`` (ONNX-level rewrites
                 incl. constant folding) and ``optimized_model_filepath``: the offline optimizer
``onnxsim``      ``onnxsim.simplify(IN, output_path=OUT)`` (onnxsim saves the model itself)
``onnxslim``     ``onnxslim.slim(IN, OUT)``
``polygraphy``   ``polygraphy surgeon sanitize --fold-constants IN -o OUT``
``graphsurgeon`` ``gs.import_onnx(onnx.load(IN)).fold_constants().cleanup()``, then
                 ``gs.export_onnx`` and ``onnx.save``
``onnxscript``   ``onnxscript.optimizer.optimize(onnx_ir.load(IN))``, then ``onnx_ir.save``
===============  ==========================================================================

The peers (every tool but onnxfold) run with ``--peers-python`` (default: this interpreter),
normally a separate venv so that their pins do not touch onnxfold's; a peer whose modules do not
import there is reported as ``not installed``. Large models: when the input is over 1.5 GiB (or,
for graphsurgeon and onnxscript, whose folded model we hold before saving, when its tensors are),
each peer is asked to save external data (``OUT.data``) where its API allows; onnxsim and onnxslim
also switch to it by themselves above 2 GB, onnxfold does (``--external-data auto``). A peer that
cannot save a large model shows up as crashed.

Measured per tool (``--repeat N`` runs, interleaved between the tools; before each run the
previous outputs are deleted and ``sync`` flushes them, so no tool pays for another's writeback):

* status: ``ok``, ``crashed: <first error line>`` (the exception of the first traceback, the
  first ``[E]`` line, the killing signal, ...), ``timeout (N s)`` (``--tool-timeout``, default
  900 s; the process group is killed) or ``not installed``;
* wall time of the child (median over the runs), including interpreter start-up and imports,
  and its user and system CPU time (``os.wait4``, medians): on a VM whose free memory is handed
  back to the host, touching fresh memory (anonymous or page cache) costs system time that varies
  from run to run, which is where most of the wall-time noise comes from;
* peak RSS of the child alone (max over the runs): ``ru_maxrss`` from ``os.wait4`` on its pid.
  Linux carries the parent's RSS high-water mark into a child at ``exec``, so the parent stays
  small (no numpy/onnx imports, all analysis in further children); the RSS of a trivial child,
  the floor below which no number can go, is shown in the header. Memory-mapped weights that a
  tool touches count towards RSS;
* ``RSS / input``: peak RSS over the input's size on disk (.onnx plus external data).

Measured per output (of the last run; only for status ``ok``), each check in its own child:

* ``cf_shape left``: constant-foldable nodes remaining, ``stats()`` of the corpus tools'
  ``onnxstats.py`` (the input row shows the count before folding);
* output size on disk (.onnx plus external data);
* ``loads in ORT``: an ``InferenceSession`` with default options can be created;
* ``max abs diff``: largest absolute difference of any output versus the original model, both run
  with ``ORT_DISABLE_ALL`` (so only the rewrite is compared, not onnxruntime's own fusions), on the
  same seeded random inputs: symbolic dims -> 1, floats standard normal, integer inputs uniform in
  [0, 1000) except names containing ``mask`` (ones), ``token_type``/``segment`` (zeros) and
  ``position`` (0, 1, 2, ...), which would otherwise index out of range or overflow;
* for onnxfold also ``pool_peak_bytes`` from its JSON report (peak of its buffer pool).

The ratio table gives onnxfold / peer for wall time and peak RSS per model (where both are ok).
Results go to ``<out>/results.md`` (also printed), ``<out>/results.json`` and ``<out>/results.svg``
(grouped bars of wall time and peak RSS per model and tool, log scale, hand-written SVG).
Optimized models live in a temporary directory that is deleted per model once it is measured.

Usage (see bench/README.md)::

    python bench/bench_fold.py --corpus ../corpus --peers-python ../peers-venv/bin/python
        [--models bert_base_ts ... | path/to/model.onnx] [--tools onnxfold ort ...] [--repeat N]
        [--tool-timeout 900 [onnxsim=1800 ...]] [--out bench/results] [--build]

The code: this driver (arguments, the loop over models, writing the results) and the package
``bench/foldbench/`` (runner, peers, checks, machine, measure, render; see its docstring).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from foldbench import SEED
from foldbench.machine import machine_info
from foldbench.measure import bench_model
from foldbench.peers import TOOLS, peer_availability, probe_peers
from foldbench.render import render_markdown, render_svg
from foldbench.runner import run_child

REPO = Path(__file__).resolve().parent.parent
BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_MODELS = ["bert_base_ts", "gpt2_small_ts", "vit_base_ts", "syn_chain_big",
                  "syn_expand_postpone", "syn_fp16_cast", "distilbert_qdq"]
DEFAULT_TOOL_TIMEOUT = 900.0


def resolve_models(corpus: Path, names: list[str]) -> tuple[dict[str, Path], list[str]]:
    """Corpus names or .onnx paths -> {stem: path} of those that exist, and the missing stems."""
    found: dict[str, Path] = {}
    missing: list[str] = []
    for name in names:
        path = Path(name) if name.endswith(".onnx") else corpus / f"{name}.onnx"
        if path.exists():
            found[path.stem] = path
        else:
            missing.append(path.stem)
    return found, missing


def parse_timeouts(items: list[str], tools: list[str]) -> dict[str, float]:
    """``["900", "onnxsim=1800"]`` -> seconds per tool."""
    default = DEFAULT_TOOL_TIMEOUT
    per: dict[str, float] = {}
    for item in items:
        if "=" in item:
            tool, secs = item.split("=", 1)
            if tool not in TOOLS:
                raise ValueError(f"unknown tool {tool!r} in --tool-timeout")
            per[tool] = float(secs)
        else:
            default = float(item)
    return {t: per.get(t, default) for t in tools}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True, help="directory with <model>.onnx")
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS,
                    help="corpus model names (or .onnx paths); default: %(default)s")
    ap.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS, metavar="TOOL",
                    help="tools to run, in this order; default: %(default)s")
    ap.add_argument("--peers-python", default=sys.executable,
                    help="interpreter for every tool but onnxfold (e.g. "
                         "../peers-venv/bin/python); default: this one")
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool (median wall, max RSS)")
    ap.add_argument("--out", type=Path, default=BENCH_DIR / "results",
                    help="where results.md / results.json / results.svg go")
    ap.add_argument("--corpus-tools", type=Path, default=REPO.parent / "shared" / "corpus",
                    help="directory with onnxstats.py and build.py; default: %(default)s")
    ap.add_argument("--build", action="store_true",
                    help="build missing corpus models with <corpus-tools>/build.py --only ...")
    ap.add_argument("--tmpdir", type=Path, default=None, help="where optimized models go")
    ap.add_argument("--tool-timeout", nargs="+", default=[], metavar="[TOOL=]SECONDS",
                    help=f"seconds per tool run: a default (else {DEFAULT_TOOL_TIMEOUT:.0f}) "
                         "and/or TOOL=SECONDS overrides")
    ap.add_argument("--timeout", type=float, default=3600.0,
                    help="seconds per analysis child (stats, reference, accuracy)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")
    if not (a.corpus_tools / "onnxstats.py").exists():
        ap.error(f"{a.corpus_tools}/onnxstats.py not found (see --corpus-tools)")
    tools = list(dict.fromkeys(a.tools))
    try:
        tool_timeouts = parse_timeouts(a.tool_timeout, tools)
    except ValueError as exc:
        ap.error(str(exc))

    found, missing = resolve_models(a.corpus, a.models)
    if missing and a.build:
        build = [sys.executable, str(a.corpus_tools / "build.py"), str(a.corpus),
                 "--only", *missing]
        print("+", " ".join(build), file=sys.stderr, flush=True)
        subprocess.run(build, check=False)
        found, missing = resolve_models(a.corpus, a.models)
    if missing:
        print(f"missing in {a.corpus}: {', '.join(missing)}\n  build them with: python "
              f"{a.corpus_tools / 'build.py'} {a.corpus} --only {' '.join(missing)}\n"
              "  (or rerun this script with --build)", file=sys.stderr)
        if not found:
            return 2

    probe = probe_peers(a.peers_python, a.timeout)
    installed = peer_availability(probe, tools, a.peers_python)

    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench_fold_", dir=a.tmpdir) as tmp_s:
        tmp = Path(tmp_s)
        result: dict[str, Any] = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "repeat": a.repeat,
            "seed": SEED,
            "tools": tools,
            "tool_timeouts": tool_timeouts,
            "not_installed": {t: why for t, why in installed.items() if why},
            "machine": machine_info(tmp, a.timeout, a.peers_python, probe),
            "missing": missing,
            "models": {},
        }
        for name, path in found.items():
            result["models"][name] = bench_model(
                name, path, a.corpus_tools, tmp, a.repeat, a.timeout, tools, tool_timeouts,
                a.peers_python, installed)
            # partial results survive an interrupted run
            (a.out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
        floor_end = run_child([sys.executable, "-c", "pass"], tmp / "floor_end", a.timeout)
        result["machine"]["rss_floor_mib"] = round(
            max(result["machine"]["rss_floor_mib"], floor_end.maxrss_mib), 1)

    md = render_markdown(result)
    (a.out / "results.md").write_text(md)
    (a.out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    (a.out / "results.svg").write_text(render_svg(result))
    print(md)
    print(f"wrote {a.out / 'results.md'}, results.json and results.svg", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
