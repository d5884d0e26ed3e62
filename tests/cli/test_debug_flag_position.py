"""``--debug`` works before the subcommand as after it: the traceback comes with the line."""

from __future__ import annotations

import pytest

from onnxfold.app.cli import main


@pytest.mark.parametrize("where", ["before", "after", "absent"])
def test_debug_anywhere(where: str, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("ONNXFOLD_DEBUG", raising=False)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    command = ["optimize", str(bad), "-o", str(tmp_path / "o.onnx")]
    argv = {"before": ["--debug", *command], "after": [*command, "--debug"],
            "absent": command}[where]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("onnxfold: error: "), err
    assert ("Traceback" in err) == (where != "absent"), err
