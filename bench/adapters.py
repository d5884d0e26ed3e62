"""LoRA adapters fed as graph inputs: onnxruntime's two ways against ``onnxfold.Session`` and the
merged model, on a Llama-style and a Qwen2-style decoder (issue 33).

Usage::

    python -m bench run adapters [--models llama_lora qwen2_lora] [--rounds 30] [--past 128]
                                 [--prefill 64] [--threads 1] [--work DIR] [--no-readme]

The decoders (``bench/adapter_models.py``: transformers configs, random weights, peft LoRA of
rank 16 on q, k, v, o, gate, up and down with B non-zero, exported by dynamo with the adapters
as graph inputs, four adapter files, the merged model) are built once into ``--work``, each in a
child. Then per decoder, in one child process, every row's sessions are made and timed
interleaved (``--rounds`` rounds, one call of each row per round; medians), on a decode step
(one token after a cache of ``--past``) and on a prefill (``--prefill`` tokens, no cache), with
``--threads`` intra-op threads:

=====================  ========================================================================
``ort_inputs``         onnxruntime, the adapters fed as inputs every call
``ort_multi_lora``     onnxruntime's multi-LoRA: ``LoraAdapter`` of adapter 0 and
                       ``RunOptions.add_active_adapter`` (the adapter inputs with defaults)
``session_ort``        ``onnxfold.Session`` (ort backend), the adapters fed every call
``session_mlir``       the same with the mlir (IREE) backend for the fold
``merged``             peft's ``merge_and_unload`` of adapter 0, exported alike
``entry``              the Session's entry session alone, ``InferenceSession.run``
=====================  ========================================================================

Also measured there: each Session's creation (compile-time fold, merge, split, backend prepare;
IREE compiles the fold), its first call's fold and entry session, switching among the four
adapter files once each has its set (``Session.set_adapter``; no fold may happen), what the
kept sets cost, and the logits' largest difference from ``ort_inputs`` relative to their
largest magnitude. Peak RSS: one child per row (its sessions, three decode steps and a
prefill), ``ru_maxrss`` read by ``os.wait4``; ``session_ort_4_sets`` keeps four adapters' sets.

Then weights fed as inputs (``bench/weight_inputs.py``): BERT-base (TorchScript) and GPT-2 small
(dynamo) from ``bench/builders.py`` with every float weight a graph input, a Session with all of
them runtime constants against the pre-folded model (``onnxfold.optimize`` of the original) and
the original, interleaved on the export's example inputs (``--weights NAME ...``; none: skip).

Writes ``bench/results/adapters.md`` (and ``.json``) and the tables into ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.adapter_models import DECODERS
from bench.adapter_runs import LABELS
from bench.machine import dated
from bench.process import run_child
from bench.readme import replace_section

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WORK = Path.home() / ".cache" / "onnxfold-bench" / "adapters"
EXPORT_CACHE = Path.home() / ".cache" / "onnxfold-bench"  # bench/builders.py's exports
WEIGHT_MODELS = ("bert_base_ts", "gpt2_small_dynamo")
MODELS = ("llama_lora", "qwen2_lora")
TIMED = ("ort_inputs", "ort_multi_lora", "session_ort", "session_mlir", "merged", "entry")
RSS_ROWS = ("ort_inputs", "ort_multi_lora", "session_ort", "session_mlir", "merged",
            "session_ort_4_sets")


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _child(args: list[str], stem: Path, timeout: float) -> Any:
    run = run_child([sys.executable, *args], stem, timeout, cwd=ROOT)
    if run.rc != 0:
        raise RuntimeError(f"{' '.join(args[:3])} failed: {run.error_line}")
    return run


def measure(name: str, a: argparse.Namespace) -> dict[str, Any]:
    """One decoder: built, timed, and each row's peak RSS."""
    logs = a.work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    _log(f"[{name}] building (once)")
    _child(["-m", "bench.adapter_models", name, str(a.work)], logs / f"{name}-build", a.timeout)
    _log(f"[{name}] timing {a.rounds} interleaved rounds")
    _child(["-m", "bench.adapter_runs", "latency", name, str(a.work), str(a.past),
            str(a.prefill), str(a.rounds), str(a.threads)], logs / f"{name}-latency", a.timeout)
    result: dict[str, Any] = json.loads((logs / f"{name}-latency.out").read_text())
    result["rss_mib"] = {}
    for row in RSS_ROWS:
        _log(f"[{name}] peak RSS of {row}")
        run = _child(["-m", "bench.adapter_runs", "rss", row, name, str(a.work), str(a.past),
                      str(a.prefill), str(a.threads)], logs / f"{name}-rss-{row}", a.timeout)
        result["rss_mib"][row] = run.maxrss_mib
    return result


def measure_weights(name: str, a: argparse.Namespace) -> dict[str, Any]:
    """One export with its weights fed as inputs, timed against the pre-folded model."""
    logs = a.work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    _log(f"[{name}] building (once)")
    _child(["-m", "bench.builders", name, str(EXPORT_CACHE)], logs / f"{name}-build", a.timeout)
    _log(f"[{name}] weights as inputs, {a.rounds} interleaved rounds")
    _child(["-m", "bench.weight_inputs", name, str(EXPORT_CACHE), str(a.work), str(a.rounds),
            str(a.threads)], logs / f"{name}-weights", a.timeout)
    result: dict[str, Any] = json.loads((logs / f"{name}-weights.out").read_text())
    return result


def _ms(t: dict[str, float]) -> str:
    """A row's medians: wall · CPU."""
    return f"{t['wall']:.2f} · {t['cpu']:.2f} ms"


def _cpu(times: dict[str, dict[str, float]], row: str, to: str) -> str:
    return f"{times[row]['cpu'] / times[to]['cpu']:.3f}x"


def _weights_table(results: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["**Weights fed as inputs**: every float weight a runtime constant, fed each call",
             "", "| export (weights) | original | pre-folded | Session | x pre-folded | "
             "entry alone | Session first call | largest difference |",
             "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for name, res in results.items():
        ms = res["ms"]
        lines.append(f"| `{name}` ({res['weights']}, {res['weight_mib']:.0f} MiB) | "
                     f"{_ms(ms['original'])} | {_ms(ms['prefolded'])} | {_ms(ms['session'])} | "
                     f"**{_cpu(ms, 'session', 'prefolded')}** | {_ms(ms['entry'])} | "
                     f"{res['made_and_first_call_s']:.1f} s | "
                     f"{res['max_abs_diff']:.1e} (of {res['max_abs']:.1f}) |")
    return lines


def _row_table(name: str, res: dict[str, Any]) -> list[str]:
    decode, prefill, rss = res["decode"], res["prefill"], res["rss_mib"]
    lines = [f"**{name}**: {DECODERS[name].describe()}", "",
             "| row | decode step | x merged | prefill | x merged | peak RSS |",
             "|---|--:|--:|--:|--:|--:|"]
    for row in TIMED:
        memory = f"{rss[row]:,.0f} MiB" if row in rss else "-"
        lines.append(f"| {LABELS[row]} | {_ms(decode[row])} | "
                     f"**{_cpu(decode, row, 'merged')}** | {_ms(prefill[row])} | "
                     f"**{_cpu(prefill, row, 'merged')}** | {memory} |")
    lines.append(f"| {LABELS['session_ort_4_sets']} | | | | | "
                 f"{rss['session_ort_4_sets']:,.0f} MiB |")
    return lines


def _facts(name: str, res: dict[str, Any]) -> list[str]:
    decode, prefill = res["decode"], res["prefill"]
    switch = res["switch_ms"]
    lines = [""]
    for row in ("session_ort", "session_mlir"):
        c = res["costs"][row]
        lines.append(f"- {LABELS[row]}: made in {c['init_s']:.2f} s; first call "
                     f"{c['first_call_s'] * 1e3:.0f} ms (fold {c['fold_s'] * 1e3:.0f} ms, "
                     f"entry session {c['bind_s'] * 1e3:.0f} ms); {c['merges']}")
    lines.append(f"- a Session call / its entry session alone (CPU): decode "
                 f"**{_cpu(decode, 'session_ort', 'entry')}**, prefill "
                 f"{_cpu(prefill, 'session_ort', 'entry')}")
    lines.append(f"- switching among the 4 adapter files, sets kept: median "
                 f"**{statistics.median(switch):.2f} ms**, max {max(switch):.2f} ms over "
                 f"{len(switch)} switches ({res['switch_folds']} folds in all: one per "
                 f"adapter); the 4 sets count {res['sets_bytes'] / 2**20:,.0f} MiB")
    acc = res["accuracy"]

    def worst(row: str) -> str:
        return f"{max(acc[f'{row}_decode'], acc[f'{row}_prefill']):.1e}"

    lines.append("- logits against the unmerged model in onnxruntime (largest difference / "
                 f"largest logit): Session {worst('session_ort')} (ort), "
                 f"{worst('session_mlir')} (mlir); peft's merged export {worst('merged')}; "
                 f"multi-LoRA {worst('ort_multi_lora')}")
    return lines


def render(results: dict[str, dict[str, Any]], weights: dict[str, dict[str, Any]],
           a: argparse.Namespace, header: str) -> str:
    lines = [header, ""]
    for name, res in results.items():
        lines += _row_table(name, res) + _facts(name, res) + [""]
    if weights:
        lines += [*_weights_table(weights), ""]
    lines.append(f"Each time: medians of {a.rounds} interleaved rounds in one process (each "
                 "round starting one row further), wall · CPU (the process's user + system "
                 "time: what a busy neighbour does not add to); ratios by CPU time. "
                 f"{a.threads} intra-op thread(s); a decode step is 1 token after a cache of "
                 f"{a.past}, a prefill {a.prefill} tokens. Peak RSS: one process per row.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench run adapters", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(DECODERS),
                    metavar="NAME", help="default: %(default)s")
    ap.add_argument("--weights", nargs="*", default=list(WEIGHT_MODELS), metavar="NAME",
                    help="exports timed with their weights fed as inputs; default: %(default)s")
    ap.add_argument("--rounds", type=int, default=30, help="interleaved rounds (medians)")
    ap.add_argument("--past", type=int, default=128, help="a decode step's cache length")
    ap.add_argument("--prefill", type=int, default=64, help="a prefill's tokens")
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime's intra-op threads")
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK,
                    help="where the models are built and logs go; default: %(default)s")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per child")
    ap.add_argument("--no-readme", action="store_true",
                    help="print the tables only; write no file")
    a = ap.parse_args(argv)
    if a.rounds < 1:
        ap.error("--rounds must be >= 1")
    results = {name: measure(name, a) for name in a.models}
    weights = {name: measure_weights(name, a) for name in a.weights}
    header = dated(f"python -m bench run adapters{' ' + ' '.join(argv) if argv else ''}",
                   ("onnxfold", "onnxruntime", "iree-base-runtime", "numpy", "torch",
                    "transformers", "peft"))
    text = render(results, weights, a, header)
    print(text)
    if not a.no_readme:
        out = ROOT / "bench" / "results" / "adapters.md"
        out.write_text("# LoRA adapters as inputs (`python -m bench run adapters`)\n\n"
                       + text + "\n")
        out.with_suffix(".json").write_text(
            json.dumps({"adapters": results, "weights": weights}, indent=1) + "\n")
        replace_section(ROOT / "bench" / "README.md", "adapters", text)
        _log(f"wrote {out} and the table into bench/README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
