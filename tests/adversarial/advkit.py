"""Helpers of the adversarial tier: the CLI as a subprocess, snapshots, canaries, forged models.

Deliberately not a ``conftest.py``: the other tiers import the top-level ``tests/conftest.py`` as
``conftest``, and a second ``conftest.py`` (without ``__init__.py``) would shadow it.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from conftest import make_model, tensor, vinfo
from onnx import TensorProto, helper

TIMEOUT = 60
D = 32  # W is D x D float32 = 4 KiB, exactly the canary's size
CANARY_WORD = b"CNRY"  # one float32: a transpose or copy of the canary still shows the pattern
CANARY = CANARY_WORD * 1024
CANARY_PROBE = CANARY_WORD * 8  # 32 bytes: present in any output holding >= 8 of its floats
PASSWD_PROBE = b"root:x:0:0"


# -- the command line --------------------------------------------------------------------------
def run_cli(args, cwd=None, timeout=TIMEOUT):
    """``python -m onnxfold ARGS`` -> (exit code, stdout, stderr)."""
    proc = subprocess.run([sys.executable, "-m", "onnxfold", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)
    return proc.returncode, proc.stdout, proc.stderr


def assert_no_traceback(code, stderr):
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    assert "Traceback" not in stderr, f"exit {code}, traceback: {last}\n{stderr}"


def assert_one_line_error(code, stderr, expected=2):
    """Exit ``expected``; stderr is one line ``onnxfold: error: ...``, no traceback."""
    assert_no_traceback(code, stderr)
    lines = stderr.strip().splitlines()
    assert code == expected, f"exit {code} (want {expected}); stderr:\n{stderr}"
    assert len(lines) == 1, f"stderr is {len(lines)} lines:\n{stderr}"
    assert lines[0].startswith("onnxfold: error: "), lines[0]


def assert_ok(code, stderr):
    assert_no_traceback(code, stderr)
    assert code == 0, f"exit {code}; stderr:\n{stderr}"


# -- snapshots: inputs unchanged, nothing left behind ------------------------------------------
def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def snapshot(*dirs):
    """{path: (kind, sha256 or link target)} of every entry under ``dirs`` (links not followed)."""
    out = {}
    for top in dirs:
        top = os.fspath(top)
        if not os.path.isdir(top):
            continue
        for root, subdirs, files in os.walk(top):
            for name in subdirs + files:
                path = os.path.join(root, name)
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    out[path] = ("link", os.readlink(path))
                elif stat.S_ISREG(st.st_mode):
                    out[path] = ("file", sha256(path))
                elif stat.S_ISDIR(st.st_mode):
                    out[path] = ("dir", None)
                else:
                    out[path] = ("special", stat.S_IFMT(st.st_mode))
    return out


def assert_unchanged(before, after, new_ok=()):
    """Every entry of ``before`` is still there, identical; nothing new but ``new_ok``."""
    changed = [p for p, v in before.items() if after.get(p) != v]
    assert not changed, f"modified or removed: {changed}"
    allowed = {os.fspath(p) for p in new_ok}
    stray = sorted(p for p in after if p not in before and p not in allowed)
    assert not stray, f"unexpected new files (temporary files left behind?): {stray}"


# -- canaries ------------------------------------------------------------------------------------
def make_canary(tmp_path):
    """tmp_path/secret/x.bin: 4 KiB the model must never be able to read."""
    secret = tmp_path / "secret"
    secret.mkdir(exist_ok=True)
    path = secret / "x.bin"
    path.write_bytes(CANARY)
    return path


def assert_no_canary(tmp_path, canary=None, probes=(CANARY_PROBE,)):
    """No file under tmp_path but the canary holds its (or /etc/passwd's) bytes."""
    canary_real = os.path.realpath(canary) if canary is not None else None
    leaked = []
    for root, _, files in os.walk(tmp_path):
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            if canary_real is not None and os.path.samefile(path, canary_real):
                continue
            with open(path, "rb") as f:
                data = f.read()
            leaked += [(path, p) for p in probes if p in data]
    assert not leaked, f"bytes from outside the model directory were written to: {leaked}"


# -- models -------------------------------------------------------------------------------------
def weights(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((D, D)).astype(np.float32),
            rng.standard_normal(D).astype(np.float32))


def mlp_proto(w=None, b=None):
    """y = x @ Transpose(W) + b, W and b initializers (the Transpose folds)."""
    if w is None:
        w, b = weights()
    nodes = [helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "Wt"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["y"])]
    return make_model(nodes, [vinfo("x", shape=[1, D])], [vinfo("y", shape=[1, D])],
                      [tensor("W", w), tensor("b", b)])


def runtime_proto(w=None):
    """y = x @ (Transpose(W) * s): W an initializer, s a graph input (the runtime constant)."""
    if w is None:
        w, _ = weights()
    nodes = [helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
             helper.make_node("Mul", ["Wt", "s"], ["Ws"]),
             helper.make_node("MatMul", ["x", "Ws"], ["y"])]
    return make_model(nodes, [vinfo("x", shape=[1, D]), vinfo("s", shape=[D])],
                      [vinfo("y", shape=[1, D])], [tensor("W", w)])


def weights_as_inputs_proto():
    """y = x @ Transpose(W) + b with W and b graph inputs (runtime constants), no initializer."""
    nodes = [helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "Wt"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["y"])]
    return make_model(nodes, [vinfo("x", shape=[1, D]), vinfo("W", shape=[D, D]),
                              vinfo("b", shape=[D])], [vinfo("y", shape=[1, D])])


def feeds(seed=1, s_ones=False):
    rng = np.random.default_rng(seed)
    out = {"x": rng.standard_normal((1, D)).astype(np.float32),
           "s": np.ones(D, np.float32) if s_ones else rng.standard_normal(D).astype(np.float32)}
    return out


def save_external(proto, model_dir, name="m.onnx", location="w.bin"):
    """Save with every initializer in ``model_dir/location``; return the model's path."""
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / name
    proto = onnx.ModelProto.FromString(proto.SerializeToString())  # onnx.save_model mutates it
    onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)
    return path


def save_inline(proto, model_dir, name="m.onnx"):
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / name
    onnx.save_model(proto, str(path))
    return path


def external_entries(path, name):
    """The external_data dict of initializer ``name`` in the saved model (graph only)."""
    model = onnx.load(str(path), load_external_data=False)
    t = next(t for t in model.graph.initializer if t.name == name)
    return {e.key: e.value for e in t.external_data}


def forge(path, name, **entries):
    """Rewrite initializer ``name``'s external_data entries in place (None deletes a key)."""
    model = onnx.load(str(path), load_external_data=False)
    t = next(t for t in model.graph.initializer if t.name == name)
    current = {e.key: e.value for e in t.external_data}
    for key, value in entries.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = str(value)
    del t.external_data[:]
    for key, value in current.items():
        t.external_data.add(key=key, value=value)
    t.data_location = TensorProto.EXTERNAL
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def ort_run(path_or_proto, feed):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    src = path_or_proto.SerializeToString() if isinstance(path_or_proto, onnx.ModelProto) \
        else str(path_or_proto)
    sess = ort.InferenceSession(src, options, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feed.items() if k in names})
