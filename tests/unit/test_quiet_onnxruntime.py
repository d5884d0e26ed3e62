"""``onnxfold.host.logs``: onnxruntime's native notices kept off stderr, everything else stays."""

from __future__ import annotations

import os
import sys

from onnxfold.host.logs import _ORT_NOTICE, _stderr_without
from tests.support.cli import run_python


def test_only_onnxruntime_notices_are_dropped(capfd) -> None:
    with _stderr_without(_ORT_NOTICE):
        os.write(2, b"\x1b[0;93m2026-01-01 [W:onnxruntime:Default, t.cc:1 f] telemetry\x1b[m\n"
                    b"\x1b[1;31m2026-01-01 [E:onnxruntime:Default, t.cc:2 f] broken\x1b[m\n"
                    b"[I:onnxruntime:, x.cc:3 g] info\nsomething else\n")
        print("from python", file=sys.stderr)
    err = capfd.readouterr().err
    assert "telemetry" not in err and "info" not in err
    assert "broken" in err and "something else\n" in err and "from python\n" in err


def test_the_import_hook_imports_onnxruntime_once() -> None:
    """In a fresh interpreter: onnxruntime imports through the hook, which then removes
    itself (the read-only HOME case of tests/adversarial checks what stderr shows)."""
    code = ("import sys\nfrom onnxfold.host.logs import quiet_onnxruntime_startup\n"
            "quiet_onnxruntime_startup()\nassert 'onnxruntime' not in sys.modules\n"
            "import onnxruntime\n"
            "assert not any(type(f).__name__ == '_QuietImportFinder' for f in sys.meta_path)\n"
            "onnxruntime.InferenceSession\nprint('ok')\n")
    proc = run_python("-c", code, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr


def test_no_stderr_at_all(monkeypatch) -> None:
    """sys.stderr None (descriptor 2 closed at start-up): the block runs, nothing raises."""
    monkeypatch.setattr(sys, "stderr", None)
    ran = []
    with _stderr_without(_ORT_NOTICE):
        ran.append(True)
    assert ran == [True]
