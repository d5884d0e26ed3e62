"""The error contract: one line per failure, exit 2 for bad input, 3 for a bug, no leftovers."""

from __future__ import annotations

import os
import time

import pytest

from onnxfold.app import cli
from onnxfold.io.tempfiles import remove_stale, replacing

TINY_BERT = os.path.join(os.path.dirname(__file__), "..", "..", "models", "tiny_bert_ts.onnx")


def test_an_internal_error_is_one_line_and_exit_3(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("something\nthat spans lines")

    monkeypatch.setattr("onnxfold.pipeline.optimizer.optimize", broken)
    out = tmp_path / "out.onnx"
    assert cli.main(["optimize", TINY_BERT, "-o", str(out)]) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("onnxfold: internal error: RuntimeError: "), err
    assert "--debug" in err[0]
    assert os.listdir(tmp_path) == []


def test_debug_prints_the_traceback(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("onnxfold.pipeline.optimizer.optimize", lambda *a, **k: 1 / 0)
    code = cli.main(["optimize", TINY_BERT, "-o", str(tmp_path / "o.onnx"), "--debug"])
    assert code == cli.EXIT_INTERNAL
    assert "Traceback" in capsys.readouterr().err


def test_a_killed_runs_temporary_files_are_removed_by_the_next(tmp_path):
    dead = 4194303  # above the default pid_max: no such process
    stale = tmp_path / f".out.onnx.onnxfold-{dead}-abcd1234.tmp"
    stale.write_bytes(b"half")
    recent = tmp_path / f".other.onnx.onnxfold-{dead}-efgh5678.tmp"
    recent.write_bytes(b"maybe another container's")
    hour_ago = time.time() - 3600
    os.utime(stale, (hour_ago, hour_ago))
    with replacing(str(tmp_path / "out.onnx")) as (_fd, mine):
        assert not stale.exists() and (tmp_path / mine).exists()
        assert recent.exists()  # written in the last ten minutes: left alone
        assert remove_stale(str(tmp_path), min_age=0) == 1  # ours belongs to a live process


@pytest.mark.parametrize("length", [10, 240])
def test_temporary_names_stay_under_the_file_name_limit(tmp_path, length):
    with replacing(str(tmp_path / ("m" * length + ".onnx")), suffix=".check.onnx") as (_fd, tmp):
        assert len(tmp) <= 255 and (tmp_path / tmp).exists()


def test_an_output_onnxruntime_refuses_is_never_written(tmp_path, capsys):
    from dataclasses import replace

    from tests.support.bugged_rules import corrupting, with_rule

    patched = with_rule(corrupting("Gather"))  # a node onnxruntime does not know
    out = tmp_path / "out.onnx"
    line = cli.parse(["optimize", TINY_BERT, "-o", str(out)])
    command = replace(line.command, settings=replace(line.command.settings, catalogue=patched))
    assert cli.run(replace(line, command=command)) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "onnxruntime refuses the folded model" in err[0], err
    assert os.listdir(tmp_path) == []
    assert cli.main(["optimize", TINY_BERT, "-o", str(out), "--no-verify"]) == 0


def _graph_file(tmp_path, nodes, name):
    import onnx
    from onnx import helper

    info = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [info("x", 1, [2])], [info("c", 1, [2])])
    path = str(tmp_path / f"{name}.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_skip_check_still_refuses_cycles_and_undefined_values(tmp_path, capsys):
    from onnx import helper

    cycle = _graph_file(tmp_path, [helper.make_node("Relu", ["b"], ["c"]),
                                   helper.make_node("Neg", ["c"], ["b"])], "cycle")
    undefined = _graph_file(tmp_path, [helper.make_node("Abs", ["zz"], ["c"])], "undefined")
    for path, message in ((cycle, "has a cycle"), (undefined, "'zz'")):
        out = str(tmp_path / "out.onnx")
        assert cli.main(["optimize", path, "-o", out, "--skip-check"]) == cli.EXIT_USAGE
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert not os.path.exists(out)
    unsorted = _graph_file(tmp_path, [helper.make_node("Relu", ["b"], ["c"]),
                                      helper.make_node("Neg", ["x"], ["b"])], "unsorted")
    assert cli.main(["optimize", unsorted, "-o", str(tmp_path / "o.onnx"), "--skip-check",
                     "-q"]) == 0
    # with onnx's checker too (it refuses a graph out of order; it checks the sorted graph)
    assert cli.main(["optimize", unsorted, "-o", str(tmp_path / "o2.onnx"), "-q"]) == 0
    assert os.path.exists(tmp_path / "o2.onnx")


def test_an_opset_newer_than_onnx_knows_is_not_folded(tmp_path):
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    import onnxfold

    newest = onnx.defs.onnx_opset_version()
    info = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("Neg", ["w"], ["n"]),
                               helper.make_node("Add", ["x", "n"], ["c"])], "g",
                              [info("x", 1, [2])], [info("c", 1, [2])],
                              [numpy_helper.from_array(np.float32([1, 2]), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", newest + 1)])
    path = str(tmp_path / "new.onnx")
    onnx.save(model, path)
    result = onnxfold.optimize(path, check=False)
    assert [n.op_type for n in result.model.graph] == ["Neg", "Add"]
    assert "newer than the installed onnx knows" in result.report.skipped_steps[0]
