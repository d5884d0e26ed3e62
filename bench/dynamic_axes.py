"""Issue #13's table: nodes left by each tool on models with dynamic axes, kept and fixed.

Usage (one command; the models come from ``bench/make_dynamic_models.py``)::

    python bench/dynamic_axes.py --corpus DIR --peers-python PEERS_VENV/bin/python \
        [--models cnn_dyn ...] [--repeat 5] [--out bench/results/dynamic_axes.json]

For every model, with the dynamic axes kept and then with every input fixed:

* nodes (not counting ``Constant``, subgraphs included; ``tools.wild_corpus.count_nodes``) of the
  input and of onnxfold (``python -m onnxfold optimize``), onnxsim, onnxslim, onnxscript and
  onnxruntime's basic offline optimization (``foldbench.peers``: the same invocations as
  ``bench_fold.py``). Fixed: onnxfold ``--input-shape``, onnxsim ``overwrite_input_shapes``
  (its ``--overwrite-input-shape``), onnxslim ``input_shapes`` (``--input-shapes``);
  onnxscript and ORT run on the model with its input dims fixed first (``onnx``, in the peers'
  interpreter: inputs and outputs get the values, ``value_info`` is dropped).
* onnxfold's output against the input with ``onnxfold compare`` at two bindings of every
  dynamic dim (dynamic) or at the fixed shape: max abs diff and whether it is bitwise equal.
* ``--repeat N`` (on the GPT-2 models): whole-process wall time of onnxfold and of ORT basic's
  offline optimization, interleaved, N runs each: medians and the ratio. (Peak RSS is in the
  JSON but not meaningful: this parent has loaded onnx and models, and Linux carries its RSS
  high-water mark into each child; ``bench_fold.py`` measures RSS properly.)

Prints Markdown and writes the numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))  # tools

from foldbench.peers import PEER_CODE, tool_cmd  # noqa: E402
from foldbench.runner import run_child  # noqa: E402

from tools.wild_corpus import count_nodes  # noqa: E402

TOOLS = ("onnxfold", "onnxsim", "onnxslim", "onnxscript", "ort")
LABEL = {"onnxfold": "onnxfold", "onnxsim": "onnxsim", "onnxslim": "onnxslim",
         "onnxscript": "onnxscript", "ort": "ORT basic"}
INT_RANGES = ["input_ids=0:1000", "attention_mask=0:2", "token_type_ids=0:2"]

# model: (dims fixed, as dim=value; two bindings of the dynamic dims for compare)
MODELS: dict[str, tuple[dict[str, int], list[dict[str, int]]]] = {
    "cnn_dyn": ({"N": 1}, [{"N": 1}, {"N": 3}]),
    "gpt2_ts_dyn": ({"N": 1, "seq": 128}, [{"N": 1, "seq": 5}, {"N": 3, "seq": 17}]),
    "gpt2_dynamo_dyn": ({"batch": 1, "seq": 128},
                        [{"batch": 1, "seq": 5}, {"batch": 3, "seq": 17}]),
    "bert_ts_dyn": ({"N": 1}, [{"N": 1}, {"N": 4}]),
}
TIMED = ("gpt2_dynamo_dyn", "gpt2_ts_dyn")

FIX_CODE = """\
import json, sys
import onnx
src, dst, dims = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
m = onnx.load(src)
for v in list(m.graph.input) + list(m.graph.output):
    for d in v.type.tensor_type.shape.dim:
        if d.HasField("dim_param") and d.dim_param in dims:
            d.dim_value = dims[d.dim_param]
del m.graph.value_info[:]
onnx.save(m, dst)
"""

FIXED_PEER_CODE = {
    "onnxsim": """\
import json, sys
import onnxsim
src, dst, shapes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
_, ok = onnxsim.simplify(src, output_path=dst, overwrite_input_shapes=shapes)
if not ok:
    sys.exit("onnxsim: the simplified model failed its check")
""",
    "onnxslim": """\
import json, sys
import onnxslim
src, dst, shapes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
onnxslim.slim(src, dst, input_shapes=[k + ":" + ",".join(map(str, v)) for k, v in shapes.items()])
""",
}


def _input_shapes(path: Path, dims: dict[str, int]) -> dict[str, list[int]]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return {v.name: [d.dim_value if d.HasField("dim_value") else dims[d.dim_param]
                     for d in v.type.tensor_type.shape.dim] for v in model.graph.input}


def _input_names(path: Path) -> set[str]:
    import onnx

    return {v.name for v in onnx.load(str(path), load_external_data=False).graph.input}


def _nodes(path: Path) -> int:
    import onnx

    return count_nodes(onnx.load(str(path), load_external_data=False))[1]


def _run(cmd: list[str], log: Path) -> tuple[bool, str]:
    r = run_child(cmd, log, timeout=1800)
    return r.rc == 0, r.error_line


def _compare(a: Path, b: Path, binding: dict[str, int], tmp: Path) -> dict:
    out = tmp / "compare.json"
    cmd = [sys.executable, "-m", "onnxfold", "compare", str(a), str(b), "-n", "2",
           "--json", str(out)]
    names = _input_names(a)
    for spec in INT_RANGES:
        if spec.split("=")[0] in names:
            cmd += ["--int-range", spec]
    for k, v in binding.items():
        cmd += ["--dim", f"{k}={v}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    data = json.loads(out.read_text()) if out.exists() else {}
    rows = data.get("rows", [])
    out.unlink(missing_ok=True)
    return {"binding": binding, "ok": proc.returncode == 0 and bool(data.get("ok")),
            "bitwise": bool(rows) and all(r.get("bitwise_equal") for r in rows),
            "max_abs": max((r.get("max_abs_diff") for r in rows), default=None),
            "error": "" if proc.returncode == 0 else (proc.stderr or proc.stdout)[-300:]}


def measure(corpus: Path, name: str, peers: str, tmp: Path) -> dict:
    src = corpus / f"{name}.onnx"
    fixed_dims, bindings = MODELS[name]
    shapes = _input_shapes(src, fixed_dims)
    fixed_src = tmp / f"{name}.fixed.onnx"
    ok, err = _run([peers, "-c", FIX_CODE, str(src), str(fixed_src), json.dumps(fixed_dims)],
                   tmp / f"{name}.fix")
    assert ok, err
    row: dict = {"dynamic": {"input": _nodes(src)}, "fixed": {"input": _nodes(fixed_src)},
                 "input_shapes": shapes}
    specs = [f"{k}:{','.join(map(str, v))}" for k, v in shapes.items()]
    for tool in TOOLS:
        for mode in ("dynamic", "fixed"):
            dst = tmp / f"{name}.{mode}.{tool}.onnx"
            if mode == "dynamic":
                cmd = tool_cmd(tool, src, dst, tmp / "report.json", 0, peers)
            elif tool == "onnxfold":
                cmd = tool_cmd(tool, src, dst, tmp / "report.json", 0, peers)
                for spec in specs:
                    cmd += ["--input-shape", spec]
            elif tool in FIXED_PEER_CODE:
                cmd = [peers, "-c", FIXED_PEER_CODE[tool], str(src), str(dst),
                       json.dumps(shapes)]
            else:
                cmd = tool_cmd(tool, fixed_src, dst, tmp / "report.json", 0, peers)
            ok, err = _run(cmd, tmp / f"{name}.{mode}.{tool}")
            row[mode][tool] = _nodes(dst) if ok else f"crashed: {err}"
            print(f"  {name} {mode} {tool}: {row[mode][tool]}", file=sys.stderr)
            if tool == "onnxfold" and ok:
                checks = [_compare(src, dst, b, tmp) for b in bindings] if mode == "dynamic" \
                    else [_compare(src, dst, fixed_dims, tmp)]
                row[mode]["onnxfold_compare"] = checks
            for f in tmp.glob(f"{name}.{mode}.{tool}.onnx*"):
                if tool != "onnxfold":
                    f.unlink()
    return row


def timing(corpus: Path, name: str, peers: str, tmp: Path, repeat: int) -> dict:
    src = corpus / f"{name}.onnx"
    runs: dict[str, list] = {"onnxfold": [], "ort": []}
    for i in range(repeat):
        order = ("onnxfold", "ort") if i % 2 == 0 else ("ort", "onnxfold")
        for tool in order:
            dst = tmp / f"{name}.timed.{tool}.onnx"
            r = run_child(tool_cmd(tool, src, dst, tmp / "report.json", 0, peers),
                          tmp / f"{name}.timed.{tool}", timeout=1800)
            assert r.rc == 0, r.error_line
            runs[tool].append((r.wall_s, r.maxrss_mib))
            dst.unlink()
    med = {t: statistics.median(w for w, _ in rs) for t, rs in runs.items()}
    return {"runs": runs, "median_s": med, "max_rss_mib": {t: max(m for _, m in rs)
                                                           for t, rs in runs.items()},
            "ratio": med["onnxfold"] / med["ort"]}


def render(rows: dict, times: dict) -> str:
    lines = []
    for mode, title in (("dynamic", "dynamic axes kept"), ("fixed", "every input fixed")):
        lines += [f"\n### Nodes (not counting `Constant`), {title}\n",
                  "| model | input | " + " | ".join(LABEL[t] for t in TOOLS) + " | best peer |",
                  "|---|--:|" + "--:|" * len(TOOLS) + "--:|"]
        for name, row in rows.items():
            r = row[mode]
            peers = [r[t] for t in TOOLS[1:] if isinstance(r[t], int)]
            best = min(peers) if peers else None
            cells = [f"**{r[t]}**" if r[t] == best or (t == "onnxfold" and isinstance(
                r[t], int) and best is not None and r[t] <= best) else str(r[t]) for t in TOOLS]
            lines.append(f"| {name} | {r['input']} | " + " | ".join(cells) + f" | {best} |")
        lines.append("")
        for name, row in rows.items():
            for c in row[mode].get("onnxfold_compare", []):
                lines.append(f"- {name} {mode}, onnxfold vs input at "
                             f"{', '.join(f'{k}={v}' for k, v in c['binding'].items())}: "
                             f"{'equal' if c['ok'] else 'DIFFERENT'}"
                             f"{', bitwise' if c['bitwise'] else ''}"
                             f" (max abs {c['max_abs']})")
    if times:
        lines += ["\n### Fold time, whole process, median of runs (interleaved)\n",
                  "| model | onnxfold (runs) | ORT basic offline (runs) | onnxfold / ORT |",
                  "|---|--:|--:|--:|"]
        for name, t in times.items():
            m = t["median_s"]
            spread = {k: "-".join(f"{f(w for w, _ in t['runs'][k]):.2f}" for f in (min, max))
                      for k in m}
            lines.append(f"| {name} | {m['onnxfold']:.2f} s ({spread['onnxfold']}) | "
                         f"{m['ort']:.2f} s ({spread['ort']}) | {t['ratio']:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--peers-python", required=True)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--repeat", type=int, default=5, help="timed runs (0: no timing)")
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "dynamic_axes.json")
    args = ap.parse_args(argv)
    assert set(PEER_CODE) >= {"ort", "onnxsim", "onnxslim", "onnxscript"}
    rows, times = {}, {}
    with tempfile.TemporaryDirectory(prefix="dynamic_axes_") as d:
        tmp = Path(d)
        for name in args.models:
            rows[name] = measure(args.corpus, name, args.peers_python, tmp)
            for f in tmp.glob("*.onnx*"):
                f.unlink()
        if args.repeat:
            for name in TIMED:
                if name in args.models:
                    times[name] = timing(args.corpus, name, args.peers_python, tmp,
                                         args.repeat)
    args.out.write_text(json.dumps({"nodes": rows, "times": times}, indent=1))
    print(render(rows, times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
