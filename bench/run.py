"""The benchmark runner: ``python -m bench run NAME [NAME ...] [OPTIONS]``.

=============  ================================================================================
``floor``      onnxfold's whole run against onnx-ir's bare ``ir.load`` + ``ir.save`` and
               onnxruntime basic on a 12k-node graph, a 32-layer Llama and BERT-base (``floor.py``)
``layers``     what one more layer costs: a dynamo Llama at 32, 64 and 128 layers, onnxfold
               against onnx-ir's load + save, onnxruntime basic and onnxsim (``layers.py``)
``peers``      onnxfold against onnxruntime basic, onnxsim, onnxslim and the onnxscript optimizer
               on five fresh transformer exports: the README's peer table (``peers.py``)
``limits``     20,000 small weights (also under ``ulimit -n 256``) and a contrib op under a pool
               budget: wall, peak RSS, what is left (``limits.py``)
``ab``         two onnxfold commits on the same models, interleaved: fold time before / after
               (``ab.py``; prints its table, writes nothing)
``done_when``  issue 24's node table: onnxfold and the four peers on the exports its "Done when"
               names, each output checked in onnxruntime at two bindings (``done_when.py``;
               writes ``bench/results/done_when_24.md``)
``latency``    deployed latency, original against output, in onnxruntime on float32, float16,
               static-QDQ and dynamically quantized exports (``latency.py``)
``adapters``   LoRA adapters fed as inputs: onnxruntime (inputs, multi-LoRA), onnxfold.Session
               (ort, mlir) and the merged model on two decoders; fold, switching, peak RSS
               (``adapters.py``; writes ``bench/results/adapters.md``)
``signals``    a signal in the middle of an onnxruntime inference of ``--check``, ``compare``,
               ``verify-folds``, ``--latency``, a Session's fold: time to exit, files left
               (``signals.py``; writes ``bench/results/signals.md``)
``api_cost``   the Python API on a proto against a path: ``simplify(onnx.load(p))`` against
               ``simplify(p)``, with and without ``check_n=3`` (``api_cost.py``)
``check_cost`` what ``--check 3`` costs beside the fold and an onnxruntime session of the
               original, on BERT-base and ResNet-50, and ``--check 1`` in stages on an
               8-layer slice of the 7B decoder (``check_cost.py``)
``llm``        a 7B-shaped decoder (11.9 GB, external data) and an 8-layer slice of it: the fold
               against ``cp`` + ``sync``, under memory limits, ``--check`` in stages in 8, 4
               and 2 GiB cgroups, the peers on the same file, session creation (``llm.py``)
``clients``    onnxfold, onnxsim and onnxslim in optimum's and genai's directories, in place,
               then the real client generating: what breaks, nodes, time, memory, the same
               tokens and logits (``clients.py``)
``fusions``    onnxruntime's transformer optimizer before and after onnxfold, onnxsim and
               onnxslim on BERT, DistilBERT, GPT-2, ViT, BART and Llama exports (optimum's and
               dynamo's): nodes, fused ops, onnxruntime's own final graph (``fusions.py``)
=============  ================================================================================

Arguments after the names go to each benchmark (``python -m bench run floor --help`` lists
them). Each writes its table into ``bench/README.md`` (``done_when`` into its results file).
Run one benchmark at a time, on a quiet machine: every measurement is a whole child process,
and a busy neighbour is in its wall time.

``python -m bench list`` names the benchmarks.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from bench import (
    ab,
    adapters,
    api_cost,
    check_cost,
    clients,
    done_when,
    floor,
    fusions,
    latency,
    layers,
    limits,
    llm,
    peers,
    signals,
)

BENCHMARKS: dict[str, Callable[[list[str] | None], int]] = {
    "floor": floor.main, "layers": layers.main, "peers": peers.main, "limits": limits.main,
    "ab": ab.main, "done_when": done_when.main, "latency": latency.main,
    "adapters": adapters.main, "signals": signals.main, "check_cost": check_cost.main,
    "api_cost": api_cost.main,
    "llm": llm.main, "clients": clients.main, "fusions": fusions.main}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("run", "list"))
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"of {', '.join(BENCHMARKS)}")
    if not args or args[0] not in ("run", "list"):
        ap.parse_args(args)  # prints the usage and exits 2
    if args[0] == "list":
        for name, bench_main in BENCHMARKS.items():
            doc = sys.modules[bench_main.__module__].__doc__ or ""
            print(f"{name:8} {doc.strip().splitlines()[0]}")
        return 0
    # the names lead; the first argument that names no benchmark starts the options
    names = args[1:2]
    for arg in args[2:]:
        if arg not in BENCHMARKS:
            break
        names.append(arg)
    options = args[1 + len(names):]
    if not names or names[0] not in BENCHMARKS:
        ap.error(f"name one or more benchmarks of {', '.join(BENCHMARKS)}"
                 + (f" (unknown: {names[0]})" if names else ""))
    for name in names:
        code = BENCHMARKS[name](options)
        if code:
            return code
    return 0
