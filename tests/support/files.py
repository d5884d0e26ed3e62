"""What a run did to the file system: snapshots of directories (inputs unchanged, no stray
temporary file) and canaries (bytes from outside the model directory never reach an output)."""

from __future__ import annotations

import hashlib
import os
import stat

CANARY_WORD = b"CNRY"  # one float32: a transpose or copy of the canary still shows the pattern
CANARY = CANARY_WORD * 1024
CANARY_PROBE = CANARY_WORD * 8  # 32 bytes: present in any output holding >= 8 of its floats
PASSWD_PROBE = b"root:x:0:0"


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
