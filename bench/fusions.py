"""Node counts after onnxfold, onnxruntime's basic level and onnxsim, on models with fusions.

The done-when of issue 14: on a torchvision ResNet-18 (random weights), a Conv+BN+Add model, an
OCR-like model with ConvTranspose+BN, and BERT-base / GPT-2 exports, count the nodes (``Constant``
nodes included, subgraphs included) of

* onnxfold: ``python -m onnxfold optimize M -o OUT`` (default flags),
* ORT basic: onnxruntime with ``ORT_ENABLE_BASIC`` and ``optimized_model_filepath``,
* onnxsim: ``onnxsim.simplify(M, output_path=OUT)``,

check every output against the original with ``onnxfold compare`` (onnxruntime, random inputs,
unbound dimensions 1), and write ``bench/results/fusions.md``: the table, and where onnxfold
ends with more nodes than a peer, the op types it has more of (between the file's ``BEGIN`` and
``END`` markers when it has them: the prose after them, on why, is written by hand and kept).

The small models are built here (onnx.helper; ResNet-18 exported by torch in ``--torch-python``,
a venv with torch and torchvision), BERT and GPT-2 come from ``--corpus`` (built by
``shared/corpus/build.py``). Everything generated goes to ``--cache`` (default
``$ONNXFOLD_FUSIONS_CACHE`` or ``~/.cache/onnxfold-fusions``), never into the tree.

    python bench/fusions.py [--torch-python /tmp/torchvenv/bin/python]
        [--peers-python /tmp/peersvenv/bin/python] [--corpus /tmp/corpus] [--cache DIR]
        [--only NAME ...] [--out bench/results/fusions.md]

One tool runs at a time (the BERT and GPT-2 runs are heavy on a small machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))  # tools

from foldbench.peers import tool_cmd  # noqa: E402

from tools.wild_corpus import _commit, _machine, _versions  # noqa: E402

TOOLS = ("onnxfold", "ort", "onnxsim")
LABEL = {"onnxfold": "onnxfold", "ort": "ORT basic", "onnxsim": "onnxsim"}
MODELS = ("resnet18_ts", "resnet18_ts_bnstats", "resnet18_dynamo", "conv_bn_add", "ocr_like",
          "bert_base_ts", "gpt2_small_ts")
DESCRIPTION = {
    "resnet18_ts": "torchvision ResNet-18, random weights (seed 0), TorchScript exporter, "
                   "opset 17, `training=PRESERVE` in eval mode (BatchNormalization kept: the "
                   "default `EVAL` export fuses it itself), dynamic batch",
    "resnet18_ts_bnstats": "the same export with each BatchNorm's weight, bias, running mean "
                           "and variance drawn at random (as trained; torchvision's init makes "
                           "them 1, 0, 0, 1, and the exporter then shares one tensor of each "
                           "size between all the BatchNorms through Identity nodes)",
    "resnet18_dynamo": "the same network through `torch.onnx.export(dynamo=True)`, opset 18 "
                       "(its own optimizer off, so BatchNormalization stays)",
    "conv_bn_add": "onnx.helper: Conv+BN+Relu, Conv (no bias)+BN, per-channel Mul and Add, "
                   "residual Add, Relu, Conv+BN, GlobalAveragePool, Gemm head; weights in "
                   "Constant nodes and initializers",
    "ocr_like": "onnx.helper, DBNet-head style (paddle2onnx habits: weights in Constant "
                "nodes): Conv+BN+Relu, ConvTranspose+BN+Relu twice, Conv, Sigmoid; dynamic H, W",
    "bert_base_ts": "BERT-base (uncased), TorchScript exporter (shared/corpus)",
    "gpt2_small_ts": "GPT-2 small, TorchScript exporter (shared/corpus)",
}

# The torch child: argv = [OUT, "ts" | "dynamo"]. torchvision's CPU wheel is absent from the
# index this was first run against; with a CUDA build of torchvision beside a CPU torch, its
# meta registrations of the detection ops (nms, roi_align) fail at import; the classification
# models need none of them, so that module is stubbed out before torchvision is imported.
RESNET_CODE = """\
import sys, types
sys.modules.setdefault("torchvision._meta_registrations",
                       types.ModuleType("torchvision._meta_registrations"))
import torch, torchvision
out, how = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = torchvision.models.resnet18(weights=None).eval()
x = torch.randn(1, 3, 224, 224)
if how == "ts_bnstats":  # BatchNorm parameters and statistics as a trained model has them
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
if how.startswith("ts"):
    torch.onnx.export(model, (x,), out, dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["logits"],
                      training=torch.onnx.TrainingMode.PRESERVE,
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
else:
    program = torch.onnx.export(model, (x,), dynamo=True, opset_version=18, optimize=False,
                                input_names=["input"], output_names=["logits"],
                                dynamic_shapes=({0: torch.export.Dim("batch")},))
    program.save(out)
"""


BEGIN = "<!-- fusions.py: begin (generated, do not edit by hand) -->"
END = "<!-- fusions.py: end -->"


def default_cache() -> Path:
    return Path(os.environ.get("ONNXFOLD_FUSIONS_CACHE")
                or Path.home() / ".cache" / "onnxfold-fusions")


# ---- the small models ---------------------------------------------------------------------

def _bn_params(rng, channels: int, prefix: str) -> list:
    import numpy as np
    from onnx import numpy_helper

    return [numpy_helper.from_array(a.astype(np.float32), f"{prefix}_{n}") for n, a in (
        ("scale", rng.uniform(0.5, 1.5, channels)), ("bias", rng.normal(0, 0.1, channels)),
        ("mean", rng.normal(0, 0.1, channels)), ("var", rng.uniform(0.5, 1.5, channels)))]


def _bn(prefix: str, x: str, y: str):
    from onnx import helper

    return helper.make_node("BatchNormalization", [x] + [f"{prefix}_{n}" for n in (
        "scale", "bias", "mean", "var")], [y], epsilon=1e-5, name=prefix)


def _constant(name: str, array):
    """A Constant node holding ``array`` (paddle2onnx keeps weights this way)."""
    from onnx import helper, numpy_helper

    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name))


def build_conv_bn_add(path: Path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    nodes = [
        _constant("w1", w(16, 3, 3, 3)), _constant("b1", w(16)),
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        _bn("bn1", "c1", "n1"),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        _bn("bn2", "c2", "n2"),
        helper.make_node("Mul", ["n2", "chan_scale"], ["m"]),
        helper.make_node("Add", ["m", "chan_shift"], ["a"]),
        helper.make_node("Add", ["a", "r1"], ["s"]),
        helper.make_node("Relu", ["s"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], strides=[2, 2]),
        _bn("bn3", "c3", "n3"),
        helper.make_node("GlobalAveragePool", ["n3"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wfc", "bfc"], ["y"], transB=1),
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in (
        ("w2", w(16, 16, 3, 3)), ("chan_scale", w(1, 16, 1, 1) + 1),
        ("chan_shift", w(1, 16, 1, 1)), ("w3", w(32, 16, 1, 1)), ("b3", w(32)),
        ("wfc", w(10, 32)), ("bfc", w(10)))]
    inits += _bn_params(rng, 16, "bn1") + _bn_params(rng, 16, "bn2") + _bn_params(rng, 32, "bn3")
    graph = helper.make_graph(
        nodes, "conv_bn_add", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def build_ocr_like(path: Path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(1)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    nodes, inits = [], []

    def bn(prefix: str, x: str, y: str, channels: int):
        for param in _bn_params(rng, channels, prefix):  # in Constant nodes too
            nodes.append(_constant(param.name, onnx.numpy_helper.to_array(param)))
        nodes.append(_bn(prefix, x, y))

    nodes += [_constant("cw", w(32, 3, 3, 3)), _constant("cb", w(32))]
    nodes.append(helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1],
                                  strides=[2, 2]))
    bn("bn0", "c", "c_bn", 32)
    nodes.append(helper.make_node("Relu", ["c_bn"], ["c_r"]))
    nodes += [_constant("dw1", w(32, 16, 2, 2))]
    nodes.append(helper.make_node("ConvTranspose", ["c_r", "dw1"], ["d1"], strides=[2, 2]))
    bn("bn1", "d1", "d1_bn", 16)
    nodes.append(helper.make_node("Relu", ["d1_bn"], ["d1_r"]))
    nodes += [_constant("cw2", w(16, 16, 3, 3))]
    nodes.append(helper.make_node("Conv", ["d1_r", "cw2"], ["c2"], pads=[1, 1, 1, 1],
                                  strides=[2, 2]))
    bn("bn2", "c2", "c2_bn", 16)
    nodes.append(helper.make_node("Relu", ["c2_bn"], ["c2_r"]))
    nodes += [_constant("dw2", w(16, 4, 2, 2)), _constant("db2", w(4))]
    nodes.append(helper.make_node("ConvTranspose", ["c2_r", "dw2", "db2"], ["d2"],
                                  strides=[2, 2]))
    bn("bn3", "d2", "d2_bn", 4)
    nodes.append(helper.make_node("Relu", ["d2_bn"], ["d2_r"]))
    nodes += [_constant("pw", w(1, 4, 1, 1)), _constant("pb", w(1))]
    nodes.append(helper.make_node("Conv", ["d2_r", "pw", "pb"], ["p"]))
    nodes.append(helper.make_node("Sigmoid", ["p"], ["y"]))
    graph = helper.make_graph(
        nodes, "ocr_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1, "h", "w"])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def build(name: str, cache: Path, args) -> Path | None:
    """The model ``name`` (built into the cache unless already there), or None if missing."""
    if name in ("bert_base_ts", "gpt2_small_ts"):
        path = Path(args.corpus) / f"{name}.onnx"
        if not path.exists():
            print(f"{name}: not in {args.corpus} (shared/corpus/build.py builds it)",
                  file=sys.stderr)
            return None
        return path
    path = cache / "models" / f"{name}.onnx"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.onnx")
    if name == "conv_bn_add":
        build_conv_bn_add(tmp)
    elif name == "ocr_like":
        build_ocr_like(tmp)
    else:
        how = name.removeprefix("resnet18_")
        proc = subprocess.run([args.torch_python, "-W", "ignore", "-c", RESNET_CODE, str(tmp),
                               how], capture_output=True, text=True, cwd=str(cache))
        if proc.returncode != 0:
            print(f"{name}: export failed: {proc.stderr.strip()[-800:]}", file=sys.stderr)
            return None
    tmp.replace(path)
    return path


# ---- the runs -----------------------------------------------------------------------------

def count(path: Path) -> tuple[int, Counter]:
    """All nodes (subgraphs included) and the op types of the main graph's nodes."""
    import onnx

    from tools.wild_corpus import count_nodes

    model = onnx.load(str(path), load_external_data=False)
    return count_nodes(model)[0], Counter(n.op_type for n in model.graph.node)


def run_tool(tool: str, src: Path, work: Path, args) -> dict:
    dst = work / f"{src.stem}.{tool}.onnx"
    for stale in (dst, Path(str(dst) + ".data")):
        stale.unlink(missing_ok=True)
    report = work / f"{src.stem}.{tool}.json"
    cmd = tool_cmd(tool, src, dst, report, src.stat().st_size, args.peers_python)
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=str(work),
                          timeout=args.timeout)
    result: dict = {"seconds": round(time.perf_counter() - started, 1), "code": proc.returncode}
    if proc.returncode != 0 or not dst.exists():
        result["error"] = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return result
    result["nodes"], ops = count(dst)
    result["ops"] = dict(ops)
    check = subprocess.run([sys.executable, "-m", "onnxfold", "compare", str(src), str(dst),
                            "--rtol", str(args.rtol), "--atol", str(args.atol)],
                           capture_output=True, text=True, timeout=args.timeout)
    result["match"] = check.returncode == 0
    if check.returncode != 0:
        result["compare"] = (check.stderr.strip() or check.stdout.strip())[-300:]
    return result


def op_difference(mine: dict, theirs: dict) -> str:
    """The op types onnxfold has more of than a peer: ``Op +n`` (and fewer: ``Op -n``)."""
    more = Counter(mine)
    more.subtract(theirs)
    plus = [f"{op} +{n}" for op, n in sorted(more.items(), key=lambda kv: -kv[1]) if n > 0]
    minus = [f"{op} {n}" for op, n in sorted(more.items(), key=lambda kv: kv[1]) if n < 0]
    return ", ".join(plus) + (f" (fewer: {', '.join(minus)})" if minus else "")


def render(rows: list[dict], args, command: str) -> str:
    lines = [
        "# Fusions: onnxfold vs onnxruntime basic vs onnxsim",
        "",
        f"Generated {datetime.now(UTC).date()} by `{command}` with onnxfold at {_commit()}; "
        f"{_versions()}; peers in `{args.peers_python}` ({args.peer_versions}); machine: "
        f"{_machine()}.",
        "",
        "Nodes of the main graph and every subgraph, `Constant` nodes included. ORT basic is "
        "onnxruntime with `ORT_ENABLE_BASIC` and `optimized_model_filepath`; onnxsim is "
        "`onnxsim.simplify(M, output_path=OUT)` with its defaults; onnxfold is `onnxfold "
        "optimize M -o OUT` with its defaults. *match*: `onnxfold compare M OUT --rtol "
        f"{args.rtol} --atol {args.atol}` (onnxruntime, seeded random inputs, unbound "
        "dimensions 1) for the three outputs, in the order onnxfold / ORT / onnxsim. Generated "
        "models are kept in the cache (`--cache`), not in the tree.",
        "",
        "| model | original | onnxfold | ORT basic | onnxsim | match | onnxfold s |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    notes = []
    for row in rows:
        cells = []
        for tool in TOOLS:
            r = row["tools"].get(tool, {})
            cells.append(str(r["nodes"]) if "nodes" in r else "failed")
        match = " / ".join("-" if "match" not in row["tools"].get(t, {}) else
                           ("ok" if row["tools"][t]["match"] else "**differs**") for t in TOOLS)
        fold = row["tools"].get("onnxfold", {})
        lines.append(f"| {row['name']} | {row['original']} | {' | '.join(cells)} | {match} | "
                     f"{fold.get('seconds', '-')} |")
        for tool in TOOLS[1:]:
            peer = row["tools"].get(tool, {})
            if "nodes" in fold and "nodes" in peer and fold["nodes"] > peer["nodes"]:
                notes.append(f"* **{row['name']}**, onnxfold {fold['nodes']} vs "
                             f"{LABEL[tool]} {peer['nodes']}: "
                             f"{op_difference(fold['ops'], peer['ops'])}")
        for tool in TOOLS:
            r = row["tools"].get(tool, {})
            if "error" in r:
                notes.append(f"* **{row['name']}**: {LABEL[tool]} failed: `{r['error']}`")
            if "compare" in r:
                notes.append(f"* **{row['name']}**: {LABEL[tool]}'s output differs: "
                             f"`{' '.join(r['compare'].split())}`")
    lines += ["", "## The models", ""]
    lines += [f"* **{row['name']}**: {DESCRIPTION[row['name']]}" for row in rows]
    lines += ["", "## Where onnxfold has more nodes than a peer (op types, onnxfold minus peer)",
              ""]
    lines += notes or ["* nowhere"]
    lines += ["", "## Reproduce", "", "```bash", command, "```", ""]
    return "\n".join(lines)


def peer_versions(python: str) -> str:
    code = ("from importlib.metadata import version as v; "
            "print(f\"onnxruntime {v('onnxruntime')}, onnxsim {v('onnxsim')}\")")
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return proc.stdout.strip() or "versions unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--torch-python", default="/tmp/torchvenv/bin/python")
    ap.add_argument("--peers-python", default="/tmp/peersvenv/bin/python")
    ap.add_argument("--corpus", default="/tmp/corpus")
    ap.add_argument("--cache", type=Path, default=default_cache())
    ap.add_argument("--only", nargs="*", choices=MODELS)
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "fusions.md")
    ap.add_argument("--json", type=Path, help="also write every number as JSON")
    args = ap.parse_args(argv)
    args.peer_versions = peer_versions(args.peers_python)
    work = args.cache / "runs"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.only or MODELS:
        src = build(name, args.cache, args)
        if src is None:
            continue
        row = {"name": name, "original": count(src)[0], "tools": {}}
        for tool in TOOLS:
            print(f"{name}: {tool} ...", file=sys.stderr, flush=True)
            row["tools"][tool] = run_tool(tool, src, work, args)
            r = row["tools"][tool]
            print(f"{name}: {tool} {r.get('nodes', 'failed')} nodes, match "
                  f"{r.get('match', '-')}, {r['seconds']} s", file=sys.stderr, flush=True)
        rows.append(row)
    command = "python bench/fusions.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in (("torch_python", args.torch_python),
                                                     ("peers_python", args.peers_python),
                                                     ("corpus", args.corpus)))
    if args.only:
        command += " --only " + " ".join(args.only)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = f"{BEGIN}\n{render(rows, args, command)}\n{END}\n"
    if args.out.exists():  # keep the prose around the generated block
        old = args.out.read_text()
        if BEGIN in old and END in old:
            text = old[:old.index(BEGIN)] + text + old[old.index(END) + len(END) + 1:]
    args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
