"""``--shard K/N``: a batch split among N runs of the same command, each with its K (a
Kubernetes indexed Job, a Slurm array): together the shards fold every model exactly once,
as evenly as the count allows, the same split on every host whatever the zoo's path, each
shard's ``--json`` its manifest; what a whole batch refuses, every shard refuses alike.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.support import breadth
from tests.support.cli import assert_one_error_line, run_cli, save_add_model

NAMES = ["a.onnx", "b.onnx", "c.onnx", "d.onnx", "e.onnx", "f.onnx", "deep/g.onnx",
         "deep/h.onnx"]


@pytest.fixture
def zoo(tmp_path):
    root = tmp_path / "zoo"
    for name in NAMES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        save_add_model(root / name)
    return root


def _shards(zoo, out, count, tmp_path, tag=""):
    manifests = []
    for k in range(count):
        manifest = tmp_path / f"manifest{tag}-{k}.json"
        proc = run_cli("optimize", zoo, "-r", "-o", f"{out}/", "--shard", f"{k}/{count}",
                       "--json", manifest)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"shard {k}/{count}: ")
        manifests.append(json.loads(manifest.read_text()))
    return manifests


@pytest.mark.parametrize("count", [1, 3, pytest.param(8, marks=breadth.MARK), 11])
def test_the_shards_fold_every_model_once_and_evenly(zoo, tmp_path, count):
    out = tmp_path / "out"
    manifests = _shards(zoo, out, count, tmp_path)
    taken = [m["models"] for m in manifests]
    assert sorted(name for models in taken for name in models) == sorted(NAMES)
    assert max(map(len, taken)) - min(map(len, taken)) <= 1
    assert {m["batch_digest"] for m in manifests} == {manifests[0]["batch_digest"]}
    for k, m in enumerate(manifests):
        assert (m["shard"], m["index"], m["count"], m["batch_models"]) == (
            f"{k}/{count}", k, count, len(NAMES))
        assert [o["status"] for o in m["outcomes"]] == ["ok"] * len(m["models"])
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*.onnx"))
    assert written == sorted(NAMES)


def test_every_host_splits_alike_wherever_the_zoo_is(zoo, tmp_path):
    """Two hosts mount the zoo at different paths: the same models in each shard."""
    elsewhere = tmp_path / "mnt" / "models"
    shutil.copytree(zoo, elsewhere)
    here = _shards(zoo, tmp_path / "o1", 3, tmp_path, "a")
    there = _shards(elsewhere, tmp_path / "o2", 3, tmp_path, "b")
    assert [m["models"] for m in here] == [m["models"] for m in there]
    assert here[0]["batch_digest"] == there[0]["batch_digest"]


def test_an_empty_shard_writes_its_manifest_and_nothing_else(zoo, tmp_path):
    out, manifest = tmp_path / "out", tmp_path / "m.json"
    proc = run_cli("optimize", zoo / "a.onnx", zoo / "b.onnx", "-o", f"{out}/", "--shard",
                   "5/6", "--json", manifest)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "shard 5/6: 0 of the batch's 2 models"
    data = json.loads(manifest.read_text())
    assert data["models"] == [] and data["outcomes"] == [] and data["batch_models"] == 2
    assert not list(out.rglob("*.onnx"))


def test_what_the_batch_refuses_every_shard_refuses(tmp_path):
    """x/m.onnx and y/m.onnx would both be written to OUT/m.onnx: refused by a shard that
    holds neither, as by one that holds both."""
    for d in ("x", "y", "z"):
        (tmp_path / d).mkdir()
        save_add_model(tmp_path / d / ("m.onnx" if d != "z" else "other.onnx"))
    for k in range(3):
        proc = run_cli("optimize", tmp_path / "x" / "m.onnx", tmp_path / "y" / "m.onnx",
                       tmp_path / "z" / "other.onnx", "-o", f"{tmp_path / 'out'}/",
                       "--shard", f"{k}/3")
        assert_one_error_line(proc, "would both be written to")


@pytest.mark.parametrize(("value", "says"), [
    ("3/3", "K must be from 0 to N-1"), ("0/0", "K must be from 0 to N-1"),
    ("1", "expected K/N"), ("-1/2", "expected K/N"), ("a/b", "expected K/N"),
    ("\uff11/\uff12", "expected K/N")])  # fullwidth digits: ASCII only, as every count
def test_a_bad_shard_is_one_line(zoo, value, says):
    assert_one_error_line(run_cli("optimize", zoo, f"--shard={value}"), "--shard", says)


def test_one_model_is_no_batch_to_shard(zoo, tmp_path):
    assert_one_error_line(run_cli("optimize", zoo / "a.onnx", "-o", tmp_path / "o.onnx",
                                  "--shard", "0/2"), "--shard: splits a batch")
