"""The command line: summaries, JSON, and one-line errors with exit code 2 on bad input."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnxfold.app.signature import si
from tests.support.cli import assert_one_error_line, run_cli
from tests.support.models import MODELS, make_model, tensor, vinfo
from tests.support.running import random_feeds, run_ort

TINY_BERT = os.path.join(MODELS, "tiny_bert_ts.onnx")


def test_optimize_prints_summary_and_writes_json(tmp_path):
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    proc = run_cli("optimize", TINY_BERT, "-o", str(out), "--json", str(report))
    assert proc.returncode == 0, proc.stderr
    assert "nodes" in proc.stdout and "wrote" in proc.stdout
    assert "pool peak" not in proc.stdout  # how the run went: with -v
    assert proc.stdout.splitlines()[-1].startswith("check        not run: --check 3 ")
    data = json.loads(report.read_text())
    # constant nodes gone: folded, or pruned uncomputed as nothing read them
    assert data["folded_nodes"] + data["unneeded_nodes"] > 100
    assert data["nodes_after"] < data["nodes_before"]
    feeds = random_feeds(TINY_BERT)
    np.testing.assert_allclose(run_ort(TINY_BERT, feeds)[0], run_ort(str(out), feeds)[0],
                               atol=1e-5)


def test_inspect_and_rules():
    proc = run_cli("inspect", TINY_BERT)
    assert proc.returncode == 0 and "constant-foldable nodes:" in proc.stdout
    proc = run_cli("inspect", TINY_BERT, "--json")
    assert json.loads(proc.stdout)["foldable_nodes"] > 0
    proc = run_cli("rules")
    assert proc.returncode == 0 and "Transpose" in proc.stdout


def test_inspect_says_the_signature_optimize_says_of_its_input(tmp_path):
    """``inspect`` (where onnxslim's ``--inspect`` points its users) prints the signature:
    the facts and the compute counted as ``optimize`` counts its input. On this TorchScript
    export an unfolded count saw no MatMul shape (0 MACs, "not counted: MatMul, ...")."""
    proc = run_cli("inspect", TINY_BERT, "--json")
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)["signature"]
    text = run_cli("inspect", TINY_BERT).stdout
    assert "signature    opset 17, IR 8; parameters " in text
    assert "inputs       input_ids int64[1,16], attention_mask int64[1,16]" in text
    report = tmp_path / "r.json"
    assert run_cli("optimize", TINY_BERT, "-o", tmp_path / "o.onnx", "--json",
                   report).returncode == 0
    before = json.loads(report.read_text())["signature"]["compute"]["before"]
    assert found["compute"]["before"] == before
    assert before["ops"]["MatMul"]["macs"] > 1_000_000 and "MatMul" not in before["not_counted"]
    assert f"compute      {si(before['flops'], 'FLOPs')} ({si(before['macs'])} MACs) at " in text


@pytest.mark.parametrize("name", ["tiny_bert_ts.onnx", "tiny_bert_ts_dynamic.onnx"])
def test_inspect_folds_once(name, monkeypatch):
    """One fold per ``inspect``, its count included (issue 83: the count's shapes are the
    fold's walk's, at fixed shapes too; no second fold): the tiny BERTs, static or dynamic,
    counted whole (their attention mask's Where too)."""
    from onnxfold.app import inspection
    from onnxfold.pipeline import optimizer

    calls = []
    real = optimizer.optimize
    monkeypatch.setattr(optimizer, "optimize", lambda *a, **k: calls.append(k) or real(*a, **k))
    info = inspection.inspect_model(str(Path(TINY_BERT).parent / name))
    assert info["signature"]["compute"]["before"]["not_counted"] == {}
    assert len(calls) == 1


def test_inspect_describes_what_the_fold_refuses(tmp_path, monkeypatch):
    """A model the fold cannot take is still described; its signature line says why not."""
    from onnxfold.app import inspection
    from onnxfold.errors import InputError

    def refused(*args, **kwargs):
        raise InputError("a model the fold refuses")

    monkeypatch.setattr("onnxfold.pipeline.optimizer.optimize", refused)
    info = inspection.inspect_model(TINY_BERT)
    assert info["signature"] is None and info["foldable_nodes"] > 0
    assert info["text"].splitlines()[-1] == "signature    not made: a model the fold refuses"


@pytest.fixture
def existing_output(tmp_path):
    out = tmp_path / "existing.onnx"
    out.write_bytes(b"user data")
    yield out
    assert out.read_bytes() == b"user data"  # never overwritten on failure


def test_missing_file(tmp_path, existing_output):
    assert_one_error_line(run_cli("optimize", str(tmp_path / "nope.onnx"), "-o",
                                  str(existing_output)), "no such file")


def test_not_onnx(tmp_path, existing_output):
    bad = tmp_path / "bad.onnx"
    bad.write_text("this is not a model\n" * 10)
    assert_one_error_line(run_cli("optimize", str(bad), "-o", str(existing_output)),
                       "not an ONNX model")


def test_truncated(tmp_path, existing_output):
    data = Path(TINY_BERT).read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    assert_one_error_line(run_cli("optimize", str(cut), "-o", str(existing_output)))


def test_invalid_graph(tmp_path, existing_output):
    proto = make_model([helper.make_node("Add", ["x", "undefined"], ["y"])],
                       [vinfo("x", shape=[2])], [vinfo("y", shape=[2])])
    path = tmp_path / "invalid.onnx"
    onnx.save(proto, str(path))
    # onnx's checker calls it "not topologically sorted"; the structure check names it
    assert_one_error_line(run_cli("optimize", str(path), "-o", str(existing_output)),
                       "value 'undefined' read by Add node", "is never defined")


def test_missing_external_data(tmp_path, existing_output):
    proto = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [vinfo("x", shape=[512])],
                       [vinfo("y", shape=[512])], [tensor("w", np.ones(512, np.float32))])
    path = tmp_path / "ext.onnx"
    onnx.save(proto, str(path), save_as_external_data=True, location="ext.onnx.data",
              size_threshold=0)
    os.remove(tmp_path / "ext.onnx.data")
    assert_one_error_line(run_cli("optimize", str(path), "-o", str(existing_output)),
                       "external data file not found")


def test_unwritable_output(tmp_path):
    proc = run_cli("optimize", TINY_BERT, "-o", str(tmp_path / "no" / "such" / "dir.onnx"))
    assert_one_error_line(proc, "does not exist")
    if os.geteuid() != 0:  # root ignores directory permissions
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        assert_one_error_line(run_cli("optimize", TINY_BERT, "-o", str(ro / "x.onnx")))


def test_bad_option_value():
    proc = run_cli("optimize", TINY_BERT, "-o", "x.onnx", "--max-tensor", "lots")
    assert proc.returncode == 2 and "not a size" in proc.stderr


@pytest.mark.parametrize("model", ["tiny_bert_ts.onnx", "tiny_gpt2_ts.onnx"])
def test_output_is_byte_identical_across_processes(tmp_path, model):
    """Hash seeds and memory addresses differ per process; the written model must not."""
    digests = set()
    for seed in ("0", "1", "2"):
        out = tmp_path / f"out{seed}.onnx"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = run_cli("optimize", os.path.join(MODELS, model), "-o", out, "-q", env=env)
        assert proc.returncode == 0, proc.stderr
        digests.add(out.read_bytes())
    assert len(digests) == 1


def test_prefilled_output_equals_unprefilled_and_leaves_no_temporaries(tmp_path):
    """Inputs over 16 MiB get their output's pages warmed on a second thread while folding."""
    w = np.random.default_rng(0).standard_normal((2048, 2560)).astype(np.float32)  # 20 MiB
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"])]
    src = tmp_path / "big.onnx"
    onnx.save(make_model(nodes, [vinfo("x", shape=[1, 2560])], [vinfo("y", shape=[1, 2048])],
                         [tensor("w", w)]), src)
    outs = {}
    for flag in ("", "--no-prefill"):
        out = tmp_path / f"out{flag}.onnx"
        proc = run_cli("optimize", str(src), "-o", str(out), "-q", *([flag] if flag else []))
        assert proc.returncode == 0, proc.stderr
        outs[flag] = out.read_bytes()
    assert outs[""] == outs["--no-prefill"]
    assert sorted(os.listdir(tmp_path)) == ["big.onnx", "out--no-prefill.onnx", "out.onnx"]
    x = {"x": np.ones((1, 2560), np.float32)}
    np.testing.assert_array_equal(run_ort(str(tmp_path / "out.onnx"), x)[0],
                                  run_ort(str(src), x)[0])

    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x0e" * (20 << 20))
    assert_one_error_line(run_cli("optimize", str(junk), "-o", str(tmp_path / "j.onnx")),
                       "not an ONNX model")
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]


@pytest.mark.parametrize("external", [False, True], ids=["embedded", "external-data"])
def test_in_place_output(tmp_path, external):
    src = tmp_path / "m.onnx"
    if external:
        model = onnx.load(TINY_BERT)
        onnx.save(model, str(src), save_as_external_data=True, location="m.onnx.data",
                  size_threshold=1024)
    else:
        shutil.copy(TINY_BERT, src)
    feeds = random_feeds(TINY_BERT)
    before = run_ort(TINY_BERT, feeds)
    args = ["optimize", str(src), "-o", str(src), "-q"]
    if external:
        args += ["--external-data", "yes"]
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    names = sorted(os.listdir(tmp_path))  # in place, the data is published under a fresh name
    if external:
        assert len(names) == 2 and names[0] == "m.onnx", names
        assert names[1].startswith("m.onnx.") and names[1].endswith(".data"), names
    else:
        assert names == ["m.onnx"]
    for a, b in zip(before, run_ort(str(src), feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_refused_in_place_run_leaves_the_input(tmp_path):
    import hashlib

    src = tmp_path / "m.onnx"
    shutil.copy(TINY_BERT, src)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    proc = run_cli("optimize", str(src), "-o", str(src), "--check", "1", "--rtol", "0", "--atol",
                   "-1")
    assert proc.returncode == 2  # a negative tolerance is bad input: nothing written
    assert hashlib.sha256(src.read_bytes()).hexdigest() == digest
    assert os.listdir(tmp_path) == ["m.onnx"]


@pytest.mark.parametrize(("data", "written"), [
    ("m.onnx.data", "m.onnx.data"),  # torch's name
    ("m.onnx_data", "m.onnx_data"),  # optimum's and transformers' (model.onnx_data)
    ("weights.bin", "m.onnx.data"),  # another model may read it: named, left
])
@pytest.mark.parametrize("check", [[], ["--check", "1"]], ids=["plain", "checked"])
def test_in_place_over_external_data_leaves_no_file_nothing_reads(tmp_path, data, written,
                                                                   check):
    """Written in place, its data named as the input's was where that follows the model's
    name (``m.onnx.data``, ``m.onnx_data``: written under a fresh name until the model is
    replaced, then renamed back), else ``m.onnx.data``: the input's data file goes with it (it
    stayed, unreferenced and unmentioned), or is named on stderr when it may be another's."""
    src = tmp_path / "m.onnx"
    onnx.save(onnx.load(TINY_BERT), str(src), save_as_external_data=True, location=data,
              size_threshold=1024)
    feeds = random_feeds(TINY_BERT)
    proc = run_cli("optimize", src, "-o", src, "-q", *check)
    assert proc.returncode == 0, proc.stderr
    removed = data == written
    assert sorted(os.listdir(tmp_path)) == sorted(["m.onnx", written] +
                                                  ([] if removed else [data]))
    locations = {e.value for t in onnx.load(str(src), load_external_data=False).graph.initializer
                 for e in t.external_data if e.key == "location"}
    assert locations == {written}
    assert proc.stderr == ("" if removed else
                           f"onnxfold: warning: {tmp_path / data}: the input's external data "
                           "is not read by " + str(src) + " since it was written in place; "
                           "left as it is (another model may read it)\n")
    for a, b in zip(run_ort(TINY_BERT, feeds), run_ort(str(src), feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_an_input_onnxruntime_cannot_load_is_said_of_the_output(tmp_path):
    """An op of a domain onnxruntime has no kernel of, folded around: the output cannot load
    either, and the report says so (it was written without a word)."""
    src = tmp_path / "m.onnx"
    model = make_model([helper.make_node("Relu", ["x"], ["r"]),
                        helper.make_node("Foo", ["r"], ["y"], domain="my.ops")],
                       [vinfo("x", shape=[2])], [vinfo("y", shape=[2])])
    model.opset_import.append(helper.make_opsetid("my.ops", 1))
    onnx.save(model, str(src))
    proc = run_cli("optimize", src, "-o", tmp_path / "o.onnx")
    assert proc.returncode == 0, proc.stderr
    assert "warning      onnxruntime loads neither the input nor the output written" \
        in proc.stdout and "my.ops:Foo" in proc.stdout
