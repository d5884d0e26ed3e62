"""The benchmark runner's parts on real child processes: the runner's command line, the measured
child (peak RSS, resource limits, timeout), the ``ir`` floor tool, and the README sections the
benchmarks rewrite."""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from bench import builders
from bench.process import median, ratio, run_child
from bench.readme import markers, replace_section
from bench.tools import tool_cmd
from tests.support.cli import Finished, run_python

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> Finished:
    return run_python("-m", "bench", *args, cwd=ROOT, timeout=120)


def test_list_names_every_benchmark():
    proc = _bench("list")
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[0] for line in proc.stdout.splitlines()] == \
        ["floor", "layers", "peers", "limits", "ab", "done_when", "latency", "adapters", "signals",
         "check_cost", "api_cost", "llm", "clients", "fusions"]


def test_an_unknown_benchmark_is_a_usage_error():
    proc = _bench("run", "nope")
    assert proc.returncode == 2
    assert "unknown: nope" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_options_after_the_names_reach_the_benchmark():
    proc = _bench("run", "floor", "--repeat", "0")
    assert proc.returncode == 2
    assert "--repeat must be >= 1" in proc.stderr


def _own_peak_mib() -> float:
    """This process's peak RSS (``VmHWM``) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc/self/status")


def test_a_child_is_measured_with_its_own_peak_rss(tmp_path):
    # a forked child's high-water mark starts at most at its parent's: grow well above that
    floor = _own_peak_mib()
    target = int(floor) + 200
    grow = f"b = bytearray({target} << 20); b[::4096] = b'x' * len(b[::4096])"
    small = run_child([sys.executable, "-c", "pass"], tmp_path / "small", 60)
    big = run_child([sys.executable, "-c", grow], tmp_path / "big", 60)
    assert small.rc == big.rc == 0
    assert small.maxrss_mib < floor + 50 < target <= big.maxrss_mib, (floor, small, big)
    assert big.wall_s > 0


def test_a_child_gets_the_resource_limits_asked_for(tmp_path):
    code = "import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    run = run_child([sys.executable, "-c", code], tmp_path / "limited", 60,
                    rlimits={resource.RLIMIT_NOFILE: 64})
    assert run.rc == 0
    assert (tmp_path / "limited.out").read_text().strip() == "64"


def test_a_child_past_its_timeout_is_killed_and_says_so(tmp_path):
    run = run_child([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "slow", 1)
    assert run.timed_out  # killed at 1 s (the runner says so), not after its 60 s of sleep
    assert run.rc != 0


def test_median_and_ratio():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(3.0, 0.0) is None
    assert ratio(None, 2.0) is None


def test_the_ir_floor_writes_a_model_that_computes_the_original(tmp_path):
    src, dst = tmp_path / "deep.onnx", tmp_path / "ir.onnx"
    onnx.save(builders.deep_graph(20), str(src))
    run = run_child(tool_cmd("ir", src, dst, tmp_path / "report.json", src.stat().st_size),
                    tmp_path / "ir", 120, cwd=ROOT)
    assert run.rc == 0, run.stderr_tail
    x = {"x": np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)}
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, x)
    got = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(None, x)
    np.testing.assert_array_equal(want[0], got[0])
    assert len(onnx.load(str(dst)).graph.node) == 20 * 6


def test_a_section_is_replaced_between_its_markers_and_the_rest_kept(tmp_path):
    readme = tmp_path / "README.md"
    begin, end = markers("floor")
    readme.write_text(f"# title\n\n{begin}\nold table\n{end}\n\ntext after\n")
    replace_section(readme, "floor", "new table")
    replace_section(readme, "floor", "newer table")
    page = readme.read_text()
    assert page == f"# title\n\n{begin}\nnewer table\n{end}\n\ntext after\n"


def test_a_missing_section_is_appended(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# title\n")
    replace_section(readme, "limits", "a table")
    begin, end = markers("limits")
    assert readme.read_text() == f"# title\n\n{begin}\na table\n{end}\n"
