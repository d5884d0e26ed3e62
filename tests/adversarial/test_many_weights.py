"""Models of thousands of inline weights under the limits of an ordinary machine.

Every inline weight of 4 KiB or more is read as a view into the model file; these tests run
the CLI in a child process under ``ulimit -n`` and ``ulimit -v`` (``preexec_fn``), check that
the folded model computes what onnxruntime computes on the original, and measure the child's
peak RSS with ``os.wait4``. A limit the run really hits is named as a limit, never as a bad
input.
"""

from __future__ import annotations

import os
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bench.builders import many_weight_mlp
from tests.support.cli import Finished, assert_one_error_line, run_python
from tests.support.measured_child import run_limited

WIDTH = 33  # a 33x33 float32 weight is 4,356 B: just over the reader's 4 KiB threshold
# Address space onnxfold needs before any model: Python, numpy, onnx, onnx-ir and
# onnxruntime's shared objects (measured: a 3-weight model fails at 200 MiB, folds at 250 MiB)
ADDRESS_SPACE_FLOOR = 256 << 20


def mlp(count: int, path: str) -> str:
    """The benchmarks' many-weight MLP (``bench.builders.many_weight_mlp``) of ``count``
    ``WIDTH`` x ``WIDTH`` weights, saved to ``path``."""
    onnx.save(many_weight_mlp(count, WIDTH), path)
    return path


def assert_same_outputs(original: str, folded: str) -> None:
    x = {"x": np.random.default_rng(1).standard_normal((1, WIDTH)).astype(np.float32)}
    want = ort.InferenceSession(original, providers=["CPUExecutionProvider"]).run(None, x)
    got = ort.InferenceSession(folded, providers=["CPUExecutionProvider"]).run(None, x)
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a, b)


def assert_folded(done: Finished) -> None:
    assert done.returncode == 0, done.stderr
    assert "skipped" not in done.stdout, done.stdout
    assert "folded       1 nodes:" in done.stdout, done.stdout  # (-v: the fold counts)


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> str:
    """20,000 inline weights (88 MB)."""
    return mlp(20_000, str(tmp_path_factory.mktemp("many") / "mlp20k.onnx"))


def test_20000_inline_weights_fold_under_ulimit_n_256(many, tmp_path):
    out = str(tmp_path / "out.onnx")
    assert_folded(run_limited(["optimize", many, "-o", out, "-v"], nofile=256)[0])
    assert_same_outputs(many, out)


def assert_folded_quietly(done: Finished, original: str, out: str) -> None:
    """A ``-q`` run (no report: the signature builds the input's graph objects once more for
    its feed plan, about 3.6 KB a node, measured apart) folded: the output holds the one
    constant subgraph as a new initializer in place of its node."""
    assert done.returncode == 0, done.stderr
    assert done.stdout == "", done.stdout
    names = [{t.name for t in onnx.load(path, load_external_data=False).graph.initializer}
             for path in (original, out)]
    assert len(names[1] - names[0]) == 1, names[1] - names[0]


def test_20000_inline_weights_fold_under_ulimit_v_of_three_times_their_size(many, tmp_path):
    """One mapping of the file, not one per weight: the address space onnxfold needs grows
    with the file, not with the number of weights times the file."""
    out = str(tmp_path / "out.onnx")
    limit = ADDRESS_SPACE_FLOOR + 3 * os.path.getsize(many)
    assert_folded_quietly(run_limited(["optimize", many, "-o", out, "-q"],
                                      address_space=limit)[0], many, out)
    assert_same_outputs(many, out)


def test_1100_weight_mlp_folds_under_ulimit_n_1024(tmp_path):
    model = mlp(1100, str(tmp_path / "mlp.onnx"))
    out = str(tmp_path / "out.onnx")
    assert_folded(run_limited(["optimize", model, "-o", out, "-v"], nofile=1024)[0])
    assert_same_outputs(model, out)


def test_peak_rss_of_many_small_weights_stays_close_to_the_file_size(many, tmp_path):
    """Deduplication samples each of the 20,000 weights and gives their pages back as it
    goes. Above what a 3-weight model needs, the run takes the graph's objects (about 100 MB
    for 20,000 nodes) and part of the file: measured 1.35x to 1.6x the file's size, depending
    on how the page cache holds it (large folios after a read are mapped whole)."""
    small = mlp(3, str(tmp_path / "small.onnx"))
    _, base = run_limited(["optimize", small, "-o", str(tmp_path / "small.out.onnx"), "-q"])
    out = str(tmp_path / "out.onnx")
    done, peak = run_limited(["optimize", many, "-o", out, "-q"])
    assert_folded_quietly(done, many, out)
    size = os.path.getsize(many)
    assert peak - base < 1.9 * size, (peak, base, size)


def _in_child(body: str, tmp_path) -> Finished:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(body))
    return run_python(script)


def test_too_many_open_files_is_named_with_the_limit(tmp_path):
    """The limit is set once everything is imported, to the descriptors already open: opening
    the model is the first thing that cannot be done."""
    model = mlp(3, str(tmp_path / "mlp.onnx"))
    result = _in_child(f"""
        import os, resource, sys
        import onnxruntime
        from onnxfold.app import cli
        used = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (used, resource.getrlimit(
            resource.RLIMIT_NOFILE)[1]))
        sys.exit(cli.main(["optimize", {model!r}, "-o", {str(tmp_path / "o.onnx")!r}]))
    """, tmp_path)
    assert_one_error_line(result, "too many open files (ulimit -n is ")
    assert "not an ONNX model" not in result.stderr
    assert not (tmp_path / "o.onnx").exists()


def test_memory_error_at_load_is_out_of_memory_not_a_bad_model(tmp_path):
    """A 64 MiB doc_string cannot be parsed with 32 MiB of address space left."""
    model = tmp_path / "doc.onnx"
    proto = onnx.load(mlp(3, str(tmp_path / "mlp.onnx")))
    proto.doc_string = "d" * (64 << 20)
    onnx.save(proto, model)
    result = _in_child(f"""
        import resource, sys
        import onnxruntime
        from onnxfold.app import cli
        with open("/proc/self/status") as f:
            size = next(int(line.split()[1]) for line in f if line.startswith("VmSize")) << 10
        resource.setrlimit(resource.RLIMIT_AS, (size + (32 << 20), resource.RLIM_INFINITY))
        sys.exit(cli.main(["optimize", {str(model)!r}, "-o", {str(tmp_path / "o.onnx")!r}]))
    """, tmp_path)
    assert result.returncode == 2, result.stderr
    assert "out of memory (ulimit -v is " in result.stderr, result.stderr
    assert "not an ONNX model" not in result.stderr
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("mib", [175, 200, 225])
def test_too_little_address_space_to_start_is_named_not_a_bug(tmp_path, mib):
    """Near the floor the first thing to fail is loading numpy's or onnxruntime's shared
    objects (measured: onnxruntime's at 200 MiB): whatever fails, it is the limit that is
    named, never an internal error."""
    model = mlp(3, str(tmp_path / "mlp.onnx"))
    (code, _out, err, _cpu), _rss = run_limited(["optimize", model, "-o", str(tmp_path / "o.onnx")],
                                          address_space=mib << 20)
    assert "internal error" not in err and "Traceback" not in err, err
    assert code == 0 or (code == 2 and f"ulimit -v is {mib} MiB" in err), (code, err)


def test_address_space_run_out_while_reading_the_graph_is_named(many, tmp_path):
    """At 3x the file size alone (no room for onnxfold's own floor) the 20,000-node graph
    does not fit while onnx-ir builds it: onnx-ir wraps the MemoryError in its own error,
    which is still named as the limit, not as an unreadable model."""
    limit = 3 * os.path.getsize(many)
    (code, _out, err, _cpu), _rss = run_limited(["optimize", many, "-o", str(tmp_path / "o.onnx")],
                                          address_space=limit)
    assert "cannot read model" not in err and "internal error" not in err, err
    assert code == 0 or (code == 2 and f"ulimit -v is {limit >> 20} MiB" in err), (code, err)
