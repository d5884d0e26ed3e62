"""Wall time and peak RSS of ``onnxfold optimize`` on models of many weights, and whether it
folds under ``ulimit -v`` of 256 MiB (onnxfold's own floor) + 3x the model's size.

    python bench/limits.py mlp 20000 /tmp/mlp20k.onnx      # a MatMul chain of N 33x33 weights
    python bench/limits.py measure MODEL... [--base DIR]    # DIR: another checkout to compare

Each run is a child process; peak RSS comes from ``os.wait4``. ``--base`` runs the same
command with ``PYTHONPATH=DIR`` (e.g. ``git archive REV | tar -x -C DIR``, then
``ln -s ../rules DIR/onnxfold/rules``: the editable install maps ``onnxfold.rules`` to this
checkout's ``rules/`` otherwise) first.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOOR = 256 << 20


def build_mlp(count: int, path: str, width: int = 33) -> None:
    """``count`` MatMuls, each with its own inline ``width`` x ``width`` float32 weight (33:
    4,356 B, just over the reader's 4 KiB threshold), and one foldable ``b * b``."""
    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    for i in range(count):
        weight = (rng.standard_normal((width, width)) * 0.17).astype(np.float32)
        inits.append(numpy_helper.from_array(weight, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"]))
        prev = f"h{i}"
    inits.append(numpy_helper.from_array(np.full((width,), 0.5, np.float32), "b"))
    nodes += [helper.make_node("Mul", ["b", "b"], ["bb"]),
              helper.make_node("Add", [prev, "bb"], ["y"])]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def run(model: str, out: str, base: str | None, address_space: int | None
        ) -> tuple[int, float, float, list[str]]:
    """(exit code, wall seconds, peak RSS MiB, report lines that say skipped or error)."""
    env = dict(os.environ)
    if base:
        env["PYTHONPATH"] = base

    def limit() -> None:
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:
        # run from the output's directory: ``-m`` puts the working directory first on the path,
        # which would shadow ``--base`` from a checkout
        proc = subprocess.Popen([sys.executable, "-m", "onnxfold", "optimize",
                                 os.path.abspath(model), "-o", out], stdout=log,
                                stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=limit,
                                cwd=os.path.dirname(out))
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        log.seek(0)
        notes = [line for line in log.read().splitlines() if "skipped" in line or "error" in line]
    return os.waitstatus_to_exitcode(status), wall, usage.ru_maxrss / 1024, notes


def measure(models: list[str], base: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.onnx")
        for model in models:
            size = os.path.getsize(model)
            limit = FLOOR + 3 * size
            for label, path in ([("base", base)] if base else []) + [("this", None)]:
                code, wall, rss, notes = run(model, out, path, None)
                print(f"{os.path.basename(model)} {size / 2**20:.1f} MiB {label}: exit {code}, "
                      f"{wall:.2f} s, peak RSS {rss:.1f} MiB {notes}")
                code, wall, _, notes = run(model, out, path, limit)
                print(f"    ulimit -v {limit >> 20} MiB: exit {code}, {wall:.2f} s {notes[:1]}",
                      flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    mlp = sub.add_parser("mlp", help="build a MatMul chain of N inline weights")
    mlp.add_argument("count", type=int)
    mlp.add_argument("output")
    meas = sub.add_parser("measure", help="wall, peak RSS and ulimit -v runs")
    meas.add_argument("models", nargs="+")
    meas.add_argument("--base", help="another checkout's directory, run first to compare")
    args = parser.parse_args()
    if args.command == "mlp":
        build_mlp(args.count, args.output)
    else:
        measure(args.models, args.base)


if __name__ == "__main__":
    main()
