"""onnxfold in the flows that ship language models, with the real clients (issue 80): a model
directory as optimum's exporter or onnxruntime-genai's builder writes it (tiny random weights),
every ``.onnx`` in it optimized in place as those directories need (``onnxfold model.onnx
model.onnx``: their file names are fixed), then the client generating greedily from it: the
same tokens, and the same logits bit for bit, as from the unoptimized directory, in the
client's default load (optimum's merged decoders: BART, T5, and a decoder-only merged file).
The directory keeps its file names (optimum's ``model.onnx_data`` stays; its hub loader
fetches ``<file>_data``), and ``--check 3`` on a genai model passes at dims generation
produces, in lines of at most 200 characters."""

from __future__ import annotations

import os
import shutil

import numpy as np
import onnx
import pytest

from bench.client_models import FLOWS
from tests.support import breadth
from tests.support.cli import assert_ok, run_cli
from tests.support.clients import generation, made, run_flow

pytestmark = pytest.mark.slow


def _nodes(path):
    graphs, count = [onnx.load(path, load_external_data=False).graph], 0
    while graphs:
        graph = graphs.pop()
        count += sum(node.op_type != "Constant" for node in graph.node)
        graphs += [a.g for node in graph.node for a in node.attribute if a.type == a.GRAPH]
    return count


# CI: each client once: optimum's merged decoder (its If branches) and genai's int4 model; the
# breadth tier: optimum's split decoder and encoder-decoders (BART 47 s, T5 31 s) and genai's
# float32 model
@pytest.mark.parametrize("name", breadth.over(list(FLOWS), lambda name: name in (
    "optimum-llama-merged", "genai-qwen2-int4")))
def test_optimized_in_place_the_client_generates_the_same(tmp_path, name):
    source, reference = made(name)
    folded = tmp_path / name
    shutil.copytree(source, folded)
    files = sorted(os.listdir(folded))
    before = {f: _nodes(folded / f) for f in files if f.endswith(".onnx")}
    for model in before:  # as a user does it, inside the directory
        assert_ok(run_cli(model, model, "-q", cwd=folded))
    assert sorted(os.listdir(folded)) == files  # every name the client looks for is there
    after = {f: _nodes(folded / f) for f in before}
    assert all(after[f] <= before[f] for f in before), (before, after)
    out = tmp_path / "folded.npz"
    run_flow(FLOWS[name], "generate", name, folded, out)
    want, got = generation(reference), generation(out)
    loaded = FLOWS[name].loads
    assert loaded in str(got["files"]), got["files"]  # the client's default load read it
    if FLOWS[name].client == "optimum":
        assert after[loaded] < before[loaded], (loaded, before, after)  # something folded
    assert want["tokens"].tolist() == got["tokens"].tolist()
    assert want["logits"].shape == got["logits"].shape
    assert want["logits"].tobytes() == got["logits"].tobytes(), \
        float(np.nanmax(np.abs(want["logits"] - got["logits"])))


@pytest.mark.parametrize("name", [n for n, flow in FLOWS.items() if flow.client == "genai"])
def test_a_genai_model_is_checked_at_the_dims_generation_produces(tmp_path, name):
    source, _ = made(name)
    folded = tmp_path / name
    shutil.copytree(source, folded)
    done = run_cli("optimize", "model.onnx", "model.onnx", "--check", "3", cwd=folded)
    assert_ok(done)
    lines = done.stdout.splitlines()
    assert max(map(len, lines)) <= 200, max(lines, key=len)
    assert "dims related by the graph: kv_cache_dim = " in done.stdout, done.stdout
    assert "total_sequence_length = past_sequence_length + sequence_length" in \
        " ".join(done.stdout.split()), done.stdout
    assert "took one value only" not in done.stdout and "could not run" not in done.stdout
    assert "runtime ops  " in done.stdout and "GroupQueryAttention x2" in done.stdout
    assert "warning" not in done.stdout  # SimplifiedLayerNormalization is onnxruntime's
