"""The measurable "Done when" items of issue 25, each as one run of the CLI in a child process,
printed as one line (exit code, peak RSS from ``os.wait4``, what was written or declined).

    python bench/limit_proofs.py            # everything below; results: bench/results/limits.md
    python bench/limit_proofs.py concat     # one of: descriptors cgroup quantize concat contrib npz

The memory-cgroup runs need root and a cgroup v1/v2 memory controller (as the tests in
``tests/adversarial/test_memory_cgroup.py``, whose models and cgroup helper they reuse).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT), str(ROOT / "tests" / "adversarial")]

from limits import build_mlp  # noqa: E402

MiB, GiB = 1 << 20, 1 << 30


def cli(args: list[str], limits: dict[int, int] | None = None) -> tuple[int, str, float]:
    """(exit code, output, peak RSS MiB) of ``python -m onnxfold ARGS`` under ``limits``
    (``resource.RLIMIT_*`` -> value)."""
    def apply() -> None:
        for which, value in (limits or {}).items():
            resource.setrlimit(which, (value, value))

    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen([sys.executable, "-m", "onnxfold", *args], stdout=log,
                                stderr=subprocess.STDOUT, text=True, preexec_fn=apply)
        _, status, usage = os.wait4(proc.pid, 0)
        log.seek(0)
        return os.waitstatus_to_exitcode(status), log.read(), usage.ru_maxrss / 1024


def notes(text: str) -> list[str]:
    """The lines of a run's output that say it skipped, declined for size, or failed."""
    return [line.strip() for line in text.splitlines()
            if "skipped" in line or "error" in line or "size:" in line][:3]


def largest_initializer(path: str) -> int:
    model = onnx.load(path, load_external_data=False)
    return max((int(np.prod(t.dims)) * (np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
                                         .itemsize if t.data_type != TensorProto.STRING else 1)
                for t in model.graph.initializer), default=0)


def descriptors(tmp: str) -> None:
    for count, nofile in ((20_000, 256), (1_100, 1024)):
        model, out = f"{tmp}/mlp{count}.onnx", f"{tmp}/out.onnx"
        build_mlp(count, model)
        code, text, rss = cli(["optimize", model, "-o", out],
                              {resource.RLIMIT_NOFILE: nofile})
        print(f"MLP of {count} inline weights ({os.path.getsize(model) / MiB:.1f} MiB), "
              f"ulimit -n {nofile}: exit {code}, peak RSS {rss:.0f} MiB {notes(text)}")


def cgroup(tmp: str) -> None:
    from test_memory_cgroup import range_model, tile_model

    from tests.support.memcg import create

    for name, build, flags in (("3 GiB Tile -> ReduceMax", tile_model, []),
                               ("3 GiB Tile -> ReduceMax", tile_model,
                                ["--memory-limit", "256M"]),
                               ("Range 4e8 -> Cast -> ReduceMax", range_model, [])):
        group = create(1 * GiB)
        if isinstance(group, str):
            print(f"{name}: no memory cgroup ({group})")
            return
        try:
            model, out = build(Path(tmp) / "m.onnx"), f"{tmp}/out.onnx"
            outcome = group.run(["optimize", model, "-o", out, *flags])
        finally:
            group.remove()
        folded = outcome.returncode == 0 and not onnx.load(out).graph.node
        peak = f"{outcome.peak / MiB:.0f} MiB" if outcome.peak else "n/a"
        print(f"{name} in a 1 GiB cgroup {' '.join(flags) or '(default flags)'}: exit "
              f"{outcome.returncode}, oom kills {outcome.oom_kills}, cgroup peak {peak}, "
              f"peak RSS {outcome.max_rss / MiB:.0f} MiB, "
              f"{'folded' if folded else 'declined'}")


def quantize(tmp: str) -> None:
    """[128,768] x [768,768] constant MatMul -> QuantizeLinear(uint8): the folded initializer
    against onnxruntime running the original."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 768)).astype(np.float32)
    b = (rng.standard_normal((768, 768)) * 0.05).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["m"]),
         helper.make_node("QuantizeLinear", ["m", "s", "z"], ["q"]),
         helper.make_node("Add", ["q", "x"], ["y"])], "mq",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [128, 768])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [128, 768])],
        [numpy_helper.from_array(a, "a"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(np.array(0.0173, np.float32), "s"),
         numpy_helper.from_array(np.array(128, np.uint8), "z")])
    model, out = f"{tmp}/mq.onnx", f"{tmp}/out.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    code, _text, _ = cli(["optimize", model, "-o", out])
    feed = {"x": np.zeros((128, 768), np.uint8)}

    def run(path: str) -> np.ndarray:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return ort.InferenceSession(path, options).run(None, feed)[0]

    folded = [n.op_type for n in onnx.load(out).graph.node] == ["Add"]
    differ = int(np.count_nonzero(run(model) != run(out)))
    print(f"MatMul [128,768]x[768,768] -> QuantizeLinear(uint8), default flags: exit {code}, "
          f"{'folded' if folded else 'not folded'}, {differ} of {128 * 768} values differ")


def _doubling_chain(path: str, steps: int) -> None:
    """As tests/adversarial/test_growth_across_chains.py: NonZero hides the length."""
    nodes = [helper.make_node("NonZero", ["ones"], ["nz"]),
             helper.make_node("Cast", ["nz"], ["cz"], to=TensorProto.FLOAT),
             helper.make_node("Reshape", ["cz", "flat"], ["c0"])]
    nodes += [helper.make_node("Concat", [f"c{i}", f"c{i}"], [f"c{i + 1}"], axis=0)
              for i in range(steps)]
    nodes.append(helper.make_node("Gather", [f"c{steps}", "x"], ["y"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(np.ones(4, np.float32), "ones"),
         numpy_helper.from_array(np.array([-1], np.int64), "flat")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def concat(tmp: str) -> None:
    model, out = f"{tmp}/concat40.onnx", f"{tmp}/out.onnx"
    _doubling_chain(model, 40)
    for flags in ([], ["--pool-budget", "512M"]):
        code, _text, rss = cli(["optimize", model, "-o", out, *flags])
        print(f"40 Concat doublings ({os.path.getsize(model)} B) {' '.join(flags) or '(default)'}"
              f": exit {code}, largest constant written {largest_initializer(out)} B, "
              f"output {os.path.getsize(out)} B, peak RSS {rss:.0f} MiB")


def contrib(tmp: str) -> None:
    rows = 30_000
    a = np.random.default_rng(0).standard_normal((rows, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("CDist", ["A", "A"], ["d"], domain="com.microsoft"),
         helper.make_node("ReduceMax", ["d"], ["m"], keepdims=0),
         helper.make_node("Add", ["x", "m"], ["y"])], "cdist",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(a, "A")])
    model, out = f"{tmp}/cdist.onnx", f"{tmp}/out.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]), model)
    code, text, rss = cli(["optimize", model, "-o", out, "--pool-budget", "256M"])
    print(f"CDist {rows}x{rows} ({rows * rows * 4 / GiB:.2f} GiB) --pool-budget 256M: exit "
          f"{code}, peak RSS {rss:.0f} MiB {notes(text)}")


def npz(tmp: str) -> None:
    """40 members of 64 MiB of zeros, each just under the per-member bound (~2.6 MB)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model, archive = f"{tmp}/relu.onnx", f"{tmp}/bomb.npz"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    zeros = np.zeros(64 * MiB - 4096, np.uint8)
    np.savez_compressed(archive, **{f"m{i}": zeros for i in range(40)})
    code, text, rss = cli(["run", model, "--inputs", archive])
    print(f".npz of 40 x 64 MiB members ({os.path.getsize(archive) / 1e6:.1f} MB): run "
          f"--inputs: exit {code}, peak RSS {rss:.0f} MiB, {text.strip().splitlines()[-1]}")


PROOFS: dict[str, Callable[[str], None]] = {
    "descriptors": descriptors, "cgroup": cgroup, "quantize": quantize, "concat": concat,
    "contrib": contrib, "npz": npz}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("proofs", nargs="*", help=f"some of: {' '.join(PROOFS)} (default: all)")
    args = parser.parse_args()
    unknown = set(args.proofs) - set(PROOFS)
    if unknown:
        parser.error(f"unknown: {' '.join(sorted(unknown))}")
    for name in args.proofs or PROOFS:
        with tempfile.TemporaryDirectory() as tmp:
            PROOFS[name](tmp)


if __name__ == "__main__":
    main()
