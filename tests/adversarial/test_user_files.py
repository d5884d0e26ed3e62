"""Never write over anything the user has (issue 11: "The user's files are modified").

Every input file is hashed before and after; the directories involved are listed before and
after, and only the expected outputs may be new (no temporary file left behind).
"""

import os
import stat

import numpy as np
import onnx
import pytest

from tests.support.cli import REFUSAL_TIMEOUT, assert_ok, assert_one_error_line, run_cli
from tests.support.external_weights import (
    feeds,
    ort_run,
    runtime_proto,
    save_external,
)
from tests.support.files import assert_unchanged, snapshot


def _model(tmp_path, name="m.onnx", location="w.bin"):
    return save_external(runtime_proto(), tmp_path / "model", name=name, location=location)


def _out_is_data(tmp_path):
    m = _model(tmp_path)
    return ["optimize", m, "-o", m.parent / "w.bin"]


def _out_data_is_data(tmp_path):
    m = _model(tmp_path, location="o.onnx.data")
    return ["optimize", m, "-o", m.parent / "o.onnx", "--external-data", "yes"]


def _json_is_model(tmp_path):
    m = _model(tmp_path)
    return ["optimize", m, "-o", tmp_path / "out" / "o.onnx", "--json", m]


def _json_is_data(tmp_path):
    m = _model(tmp_path)
    return ["optimize", m, "-o", tmp_path / "out" / "o.onnx", "--json", m.parent / "w.bin"]


def _compare_json_is_data(tmp_path):
    a = _model(tmp_path)
    b = _model(tmp_path, name="b.onnx", location="b.bin")
    return ["compare", a, b, "--json", b.parent / "b.bin"]


def _split_into_own_dir(tmp_path):
    m = _model(tmp_path, name="entry.onnx")
    return ["split", m, "--runtime-const", "s", "-o", m.parent]


def _json_dir_missing(tmp_path):
    m = _model(tmp_path)
    return ["optimize", m, "-o", tmp_path / "out" / "o.onnx",
            "--json", tmp_path / "out" / "missing" / "r.json"]


def _run_out_is_data(tmp_path):
    m = _model(tmp_path, location="w.npz")  # np.savez keeps a name ending in .npz
    np.savez(tmp_path / "out" / "feeds.npz", **feeds())
    return ["run", m, "--runtime-const", "s", "--inputs", tmp_path / "out" / "feeds.npz",
            "-o", m.parent / "w.npz"]


REFUSED = {
    "optimize-o-is-input-data": _out_is_data,
    "optimize-o-data-is-input-data": _out_data_is_data,
    "optimize-json-is-input-model": _json_is_model,
    "optimize-json-is-input-data": _json_is_data,
    "compare-json-is-model-data": _compare_json_is_data,
    "split-entry-into-its-own-dir": _split_into_own_dir,
    "optimize-json-dir-missing": _json_dir_missing,  # must fail before the model is written
    "run-o-is-input-data": _run_out_is_data,
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_outputs_over_inputs_are_refused_before_anything_is_written(tmp_path, case):
    (tmp_path / "out").mkdir()
    args = REFUSED[case](tmp_path)
    before = snapshot(tmp_path)
    done = run_cli(*args, timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done)
    assert_unchanged(before, snapshot(tmp_path))
    assert not (tmp_path / "out" / "o.onnx").exists()


def test_symlinked_output_is_written_through(tmp_path):
    """An output that is a symlink is resolved once, when it is claimed (docs/files-and-safety.md):
    the model replaces the link's target by a rename in the target's directory, and the link
    stays a link to it."""
    model = _model(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    target = out / "precious.onnx"
    target.write_bytes(b"the user's file")
    link = out / "link.onnx"
    os.symlink("precious.onnx", link)
    done = run_cli("optimize", model, "-o", link, timeout=REFUSAL_TIMEOUT)
    assert_ok(done)
    assert os.path.islink(link), "the symlink was replaced by a regular file"
    assert os.readlink(link) == "precious.onnx"
    # no temporary left; the data named after the target (the input has external data)
    assert sorted(os.listdir(out)) == ["link.onnx", "precious.onnx", "precious.onnx.data"]
    onnx.checker.check_model(onnx.load(str(target)))


def _null_device(tmp_path):
    """A private null device node: the real /dev/null is not risked when running as root."""
    path = tmp_path / "out" / "null"
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        return path
    except OSError:
        if os.access("/dev", os.W_OK):
            pytest.skip("cannot mknod, and /dev is writable: not risking the real /dev/null")
        return "/dev/null"


def test_device_output_is_not_replaced(tmp_path):
    model = _model(tmp_path)
    (tmp_path / "out").mkdir()
    dev = _null_device(tmp_path)
    rdev = os.stat(dev).st_rdev
    listing = sorted(os.listdir(os.path.dirname(dev)))
    inputs = snapshot(model.parent)
    done = run_cli("optimize", model, "-o", dev, timeout=REFUSAL_TIMEOUT)
    if done.returncode == 2:
        assert_one_error_line(done)
    else:
        assert_ok(done)
    st = os.lstat(dev)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == rdev, f"{dev} was replaced"
    assert sorted(os.listdir(os.path.dirname(dev))) == listing
    assert_unchanged(inputs, snapshot(model.parent))


def test_valid_outputs_beside_the_inputs_leave_nothing_else(tmp_path):
    """The control case: -o and --json next to the input write exactly those files."""
    model = _model(tmp_path)
    before = snapshot(tmp_path)
    out = model.parent / "o.onnx"
    done = run_cli("optimize", model, "-o", out, "--external-data", "yes", "--json",
                   model.parent / "r.json", timeout=REFUSAL_TIMEOUT)
    assert_ok(done)
    assert_unchanged(before, snapshot(tmp_path),
                     new_ok=[out, model.parent / "o.onnx.data", model.parent / "r.json"])
    f = feeds()
    np.testing.assert_allclose(ort_run(out, f)[0], ort_run(model, f)[0], rtol=1e-5, atol=1e-6)


# -- every output is compared with every input: the --inputs .npz too ----------------------
def _npz_case(tmp_path):
    model = save_external(runtime_proto(), tmp_path / "model")
    npz = tmp_path / "f.npz"
    np.savez(npz, **feeds())
    return model, npz


def test_run_output_over_its_inputs_npz_is_refused(tmp_path):
    model, npz = _npz_case(tmp_path)
    before = snapshot(tmp_path)
    done = run_cli("run", model, "--runtime-const", "s", "--inputs", npz, "-o", npz,
                   timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done)
    assert_unchanged(before, snapshot(tmp_path))


def test_compare_json_over_its_inputs_npz_is_refused(tmp_path):
    model, npz = _npz_case(tmp_path)
    before = snapshot(tmp_path)
    done = run_cli("compare", model, model, "--inputs", npz, "--json", npz, timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done)
    assert_unchanged(before, snapshot(tmp_path))


REPORT_FLAGS = {"optimize-json": ("optimize", "--json"),
                "optimize-report": ("optimize", "--report"),
                "compare-json": ("compare", "--json"), "verify-json": ("verify-folds", "--json")}


def _report_argv(tmp_path, command: str) -> list:
    m = _model(tmp_path)
    if command == "optimize":
        return ["optimize", m, "-o", tmp_path / "o.onnx"]
    return [command, m, m]


@pytest.mark.parametrize("case", list(REPORT_FLAGS))
def test_a_report_that_cannot_be_written_is_said_before_any_work(tmp_path, case):
    """``--json`` on a path no file can be made in (``/proc``: read-only even for root) was
    said only after the model had been written, and exit 2 did not say it had been. Now it
    is refused when claimed: nothing written."""
    command, flag = REPORT_FLAGS[case]
    done = run_cli(*_report_argv(tmp_path, command), flag, "/proc/onnxfold-report",
                   timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done, "/proc/onnxfold-report", "cannot write here")
    assert not (tmp_path / "o.onnx").exists()
    assert done.stdout == ""  # no table: the run stopped before it


@pytest.mark.parametrize("case", list(REPORT_FLAGS))
def test_an_empty_report_path_is_refused(tmp_path, case):
    """``--json ''`` was taken as no ``--json``: exit 0, nothing written."""
    command, flag = REPORT_FLAGS[case]
    done = run_cli(*_report_argv(tmp_path, command), flag, "", timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done, f"argument {flag}", "an empty path names no file")
    assert not (tmp_path / "o.onnx").exists()
