"""Random text inputs are weighed by what they take: each element is a Python ``str`` (50 to
170 bytes) behind the object array's pointer, and onnxruntime copies it into a
``std::string``. Weighed at the pointer's 8 bytes, a static [3000, 3000] string input passed
as 72 MB and ran for 867 s in a 1 GiB cgroup, nearly killed."""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxfold.check.inputs import feeds
from tests.support.memcg import run_in_memory_cgroup

GiB = 1 << 30


def _ort_copy(text: str) -> int:
    return feeds.STD_STRING_BYTES + len(text.encode()) + 1


def test_the_weight_of_a_text_element_bounds_the_largest_one():
    """The widest and longest element the words can make (the longest words, one of them of
    the widest script) and every element of a large random sample fit the bound."""
    longest = sorted(feeds._WORDS, key=len)[-feeds.MAX_TEXT_WORDS:]
    widest = max(feeds._WORDS, key=lambda w: max(map(ord, w)))
    worst = " ".join([widest, *[w for w in longest if w != widest]][:feeds.MAX_TEXT_WORDS])
    sample = feeds._random_text(np.random.default_rng(0), (20_000,)).tolist()
    for text in [worst, *sample]:
        assert 8 + sys.getsizeof(text) + _ort_copy(text) <= feeds.TEXT_ELEMENT_BYTES, text
    assert feeds.element_bytes(np.dtype(object)) == feeds.TEXT_ELEMENT_BYTES
    assert feeds.element_bytes(np.dtype(np.float32)) == 4


def test_a_huge_static_text_input_declines_in_one_line(tmp_path):
    """[3000, 3000] random text: 2.3 GB as weighed; in a 1 GiB cgroup the check declines
    before a string is made (exit 2, one line, never killed)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["text"], ["y"])], "g",
        [helper.make_tensor_value_info("text", TensorProto.STRING, [3000, 3000])],
        [helper.make_tensor_value_info("y", TensorProto.STRING, [3000, 3000])])
    path = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    outcome = run_in_memory_cgroup(1 * GiB, ["compare", path, path, "-n", "1"])
    assert outcome.returncode == 2 and outcome.oom_kills == 0, outcome
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1 and "the random inputs of one input set would take" in lines[0], \
        outcome.stderr
