"""Every bad input is one line on stderr and exit 2 (or exit 0 where the input is valid).

Each case runs the real command line in a subprocess on a model built here: numbers beyond
int64 or in non-ASCII digits, a shape contradicting the model, a bad ``--memory-limit``, no
usable temporary directory (single run, ``run`` and a batch, which must leave no output
directory behind), names carrying terminal escape sequences, a float16 tensor that overflows
its ``int32_data``, onnxruntime's start-up warning with a read-only HOME under ``-q``, and a
NaN cast to int64 used as a shape. The environment cases need a private mount namespace
(``unshare -rm``: read-only ``/tmp``, ``/var/tmp``, HOME), skipped where it is unavailable.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.support.cli import (
    REFUSAL_TIMEOUT,
    Finished,
    assert_one_error_line,
    onnxfold_argv,
    run_cli,
    run_command,
)
from tests.support.models import make_model, vinfo

TIMEOUT = 120
HUGE = "99999999999999999999999"  # beyond int64
ESCAPES = "\x1b]0;owned\x07\x1b[31m\x9b2J\u202e\r"  # title, colour, CSI, bidi override, CR


def _save(path: Path, nodes, inputs, outputs, initializers=(), name: str = "g") -> str:
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return str(path)


def add_one(path: Path) -> str:
    """Y = X + 1 with X float32[2, n]."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    return _save(path, [helper.make_node("Add", ["X", "one"], ["Y"], name="add")],
                 [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, "n"])],
                 [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, "n"])], [one])


def nan_shape(path: Path, suffix: str = "") -> str:
    """Y = Reshape(X, Cast<int64>([NaN, 2])): the cast is foldable, but a NaN cast to int64 is
    no valid shape, so the node stays (onnxruntime would refuse the folded model). ``suffix``
    is appended to the graph's, the nodes' and the values' names."""
    nan = helper.make_tensor("nan" + suffix, TensorProto.FLOAT, [2], [float("nan"), 2.0])
    return _save(path, [
        helper.make_node("Cast", ["nan" + suffix], ["shape" + suffix], to=TensorProto.INT64,
                         name="cast" + suffix),
        helper.make_node("Reshape", ["X" + suffix, "shape" + suffix], ["Y" + suffix],
                         name="reshape" + suffix)],
        [helper.make_tensor_value_info("X" + suffix, TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("Y" + suffix, TensorProto.FLOAT, [2, 2])], [nan],
        name="g" + suffix)


RAW_CONTROLS = ["\x1b", "\x07", "\x9b", "\u202e", "\r"]  # those of ESCAPES


def assert_escaped(text: str) -> None:
    """``text`` (a command's output) shows ESCAPES as escapes, not as the characters."""
    for char in RAW_CONTROLS:
        assert char not in text, f"raw {char!r} printed:\n{text!r}"
    # (an error line joins whitespace: the CR may be a space there)
    assert "\\x1b]0;owned\\x07\\x1b[31m\\x9b2J\\u202e" in text, text


# -- running the command line, in a mount namespace where the case needs one ------------------
UNSHARE = shutil.which("unshare")


def _namespaces_work() -> bool:
    if UNSHARE is None:
        return False
    return run_command([UNSHARE, "-rm", "sh", "-c", "mount --bind /tmp /tmp"],
                       timeout=30).returncode == 0


NAMESPACES = _namespaces_work()


def read_only(*paths: str) -> str:
    """Shell commands making ``paths`` read-only inside the namespace."""
    return "".join(f"mount --bind {p} {p} && mount -o remount,bind,ro {p} && " for p in paths)


def writable(*paths: str) -> str:
    """Shell commands making ``paths`` writable again under a read-only parent."""
    return "".join(f"mount --bind {p} {p} && mount -o remount,bind,rw {p} && " for p in paths)


@dataclass
class Run:
    """A command line, the environment it adds, and the mounts to set up first."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    mounts: str = ""  # shell commands run (as root of a user namespace) before onnxfold
    cwd: str | None = None


def _run(run: Run) -> Finished:
    """The command line of ``run``, in a mount namespace if it has mounts to set up."""
    command = onnxfold_argv(*run.argv)
    if run.mounts:
        if not NAMESPACES:
            pytest.skip("needs `unshare -rm` (user and mount namespaces)")
        command = [UNSHARE, "-rm", "sh", "-c", run.mounts + 'exec "$@"', "sh", *command]
    env = {**os.environ, **run.env}
    env.pop("ONNXFOLD_DEBUG", None)
    return run_command(command, env=env, cwd=run.cwd, timeout=TIMEOUT)


# -- the cases --------------------------------------------------------------------------------
@dataclass
class Case:
    """``build(tmp_path)`` -> the run; then the exit code, stderr's line count, and words that
    stderr must (``says``) and must not (``hides``) contain."""

    build: Callable[[Path], Run]
    code: int = 2
    lines: int = 1
    says: tuple[str, ...] = ()
    hides: tuple[str, ...] = ()
    after: Callable[[Path, Finished], None] | None = None


def _optimize(*flags: str) -> Callable[[Path], Run]:
    def build(tmp: Path) -> Run:
        return Run(["optimize", add_one(tmp / "m.onnx"), "-o", str(tmp / "o.onnx"), *flags])
    return build


def _no_temp_directory(*argv: str, batch: bool = False) -> Callable[[Path], Run]:
    """``TMPDIR`` missing, ``/tmp``, ``/var/tmp`` and the current directory read-only: no
    directory ``tempfile`` could use; outputs go to a writable ``out``."""
    def build(tmp: Path) -> Run:
        model = add_one(tmp / "m.onnx")
        (tmp / "out").mkdir()
        np.savez(tmp / "x.npz", X=np.zeros((2, 3), np.float32))
        if batch:
            args = ["optimize", model, add_one(tmp / "m2.onnx"), "-o", str(tmp / "out/many/")]
        else:
            args = [a.format(model=model, tmp=tmp) for a in argv]
        return Run(args, env={"TMPDIR": str(tmp / "missing")}, cwd=str(tmp),
                   mounts=read_only("/tmp", "/var/tmp", str(tmp)) + writable(str(tmp / "out")))
    return build


def _unwritable_temp_directory(tmp: Path) -> Run:
    """``TMPDIR`` an existing directory that is read-only, and no other usable directory."""
    run = _no_temp_directory(batch=True)(tmp)
    run.env["TMPDIR"] = str(tmp)  # read-only in the namespace
    return run


def _left_no_directory(tmp: Path, proc: Finished) -> None:
    assert not (tmp / "out/many").exists(), "the batch left its output directory behind"
    assert os.listdir(tmp / "out") == []


def _full_temp_directory(tmp: Path) -> Run:
    """``TMPDIR`` a full 64 KiB file system, and no other usable directory."""
    run = _no_temp_directory(batch=True)(tmp)
    full = tmp / "full"
    full.mkdir()
    run.env["TMPDIR"] = str(full)
    run.mounts = (f"mount -t tmpfs -o size=64k tmpfs {full} && "
                  f"(dd if=/dev/zero of={full}/fill bs=4k 2>/dev/null; true) && " + run.mounts)
    return run


def float16_overflow(path: Path) -> str:
    """Y = X + Cast<float>(h), h float16 with 0x13c00 in its int32_data (onnxruntime: "data
    overflow")."""
    h = helper.make_tensor("h", TensorProto.FLOAT16, [2], [0, 0])
    h.int32_data[:] = [0x13C00, 0x3C00]
    return _save(path, [helper.make_node("Cast", ["h"], ["f"], to=TensorProto.FLOAT),
                        helper.make_node("Add", ["X", "f"], ["Y"])],
                 [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
                 [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])], [h])


def _read_only_home(error: bool = False) -> Callable[[Path], Run]:
    """HOME (and the cache under it) read-only: onnxruntime cannot persist its telemetry device
    ID there and says so on stderr as it is imported, unless onnxfold keeps that quiet. With
    ``error``: ``compare`` of a model onnxruntime refuses (an error after that import)."""
    def build(tmp: Path) -> Run:
        home = tmp / "home"
        home.mkdir()
        if error:
            model = nan_shape(tmp / "m.onnx")
            argv = ["compare", model, model]
        else:
            argv = ["optimize", add_one(tmp / "m.onnx"), "-o", str(tmp / "o.onnx"), "-q"]
        return Run(argv, env={"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")},
                   mounts=read_only(str(home)))
    return build


def _names_explained(tmp: Path) -> Run:
    model = nan_shape(tmp / "m.onnx", ESCAPES + "<b>&")
    return Run(["optimize", model, "-o", str(tmp / "o.onnx"), "--explain",
                "--json", str(tmp / "r.json"), "--report", str(tmp / "r.html")])


def _names_reported(tmp: Path, proc: Finished) -> None:
    assert_escaped(proc.stdout)
    assert "rule declined" in proc.stdout and "Reshape" in proc.stdout, proc.stdout
    report = json.loads((tmp / "r.json").read_text())
    assert any("cast" + ESCAPES in text for text in _strings(report)), "JSON keeps real names"
    page = (tmp / "r.html").read_text()
    assert "<b>&" not in page and "&lt;b&gt;&amp;" in page, "the HTML report escapes HTML"


def _strings(value) -> list[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _name_in_error(tmp: Path) -> Run:
    model = nan_shape(tmp / ("m" + ESCAPES + ".onnx"), ESCAPES)
    return Run(["optimize", model, "-o", str(tmp / "o.onnx"), "--input-shape", "Q:3"])


CASES: dict[str, Case] = {
    "input-shape beyond int64": Case(_optimize("--input-shape", f"X:2,{HUGE}"),
                                     says=("--input-shape", HUGE)),
    "input-shape dim binding beyond int64": Case(_optimize("--input-shape", f"n={HUGE}"),
                                                 says=("--input-shape",)),
    "dim beyond int64": Case(_optimize("--check", "1", "--dim", f"n={HUGE}"), says=("--dim",)),
    "superscript digit": Case(_optimize("--input-shape", "X:2,\u00b2"), says=("--input-shape",)),
    "input-shape contradicting the model": Case(_optimize("--input-shape", "X:3,4"),
                                                says=("--input-shape", "dim 0")),
    "bad memory-limit": Case(_optimize("--memory-limit", "5Q"), says=("--memory-limit",)),
    "no temp directory, one model": Case(
        _no_temp_directory("optimize", "{model}", "-o", "{tmp}/out/o.onnx", "-q"),
        code=0, lines=0),
    "no temp directory, run": Case(
        _no_temp_directory("run", "{model}", "--inputs", "{tmp}/x.npz"),
        says=("set TMPDIR to a writable directory",)),
    "no temp directory, batch": Case(_no_temp_directory(batch=True),
                                     says=("set TMPDIR to a writable directory",),
                                     after=_left_no_directory),
    "unwritable temp directory, batch": Case(_unwritable_temp_directory,
                                             says=("set TMPDIR to a writable directory",),
                                             after=_left_no_directory),
    "full temp directory, batch": Case(_full_temp_directory,
                                       says=("set TMPDIR to a writable directory",),
                                       after=_left_no_directory),
    "escape sequences in names, --explain": Case(_names_explained, code=0, lines=0,
                                                 after=_names_reported),
    "escape sequences in names, error line": Case(
        _name_in_error, says=("--input-shape Q: no such input",),
        after=lambda tmp, proc: assert_escaped(proc.stderr)),
    "escape sequences in a file name": Case(
        lambda tmp: Run(["inspect", str(tmp / ("m" + ESCAPES + ".onnx"))]), says=("no such",),
        after=lambda tmp, proc: assert_escaped(proc.stderr)),
    "float16 int32_data overflow": Case(
        lambda tmp: Run(["optimize", float16_overflow(tmp / "m.onnx"), "-o", str(tmp / "o.onnx")]),
        says=("initializer h", "int32_data"), after=lambda tmp, proc: _nothing_written(tmp)),
    "output path not UTF-8": Case(
        lambda tmp: Run(["optimize", add_one(tmp / "m.onnx"), "-o", f"{tmp}/o\udcfe.onnx"]),
        says=("not valid UTF-8",), after=lambda tmp, proc: _nothing_written(tmp)),
    "read-only HOME, -q": Case(_read_only_home(), code=0, lines=0),
    "read-only HOME, an error": Case(_read_only_home(error=True), says=("onnxruntime",),
                                     hides=("telemetry",)),
    "NaN cast to int64 used as a shape": Case(
        lambda tmp: Run(["optimize", nan_shape(tmp / "m.onnx"), "-o", str(tmp / "o.onnx"),
                         "--explain"]),
        code=0, lines=0, after=lambda tmp, proc: _kept_with_reason(tmp, proc)),
}


def _nothing_written(tmp: Path) -> None:
    assert sorted(os.listdir(tmp)) == ["m.onnx"]


def _kept_with_reason(tmp: Path, proc: Finished) -> None:
    """The Cast stays (declined with its reason) and the output runs like the input."""
    assert "is not a valid element of Reshape's shape" in proc.stdout, proc.stdout
    folded = onnx.load(tmp / "o.onnx")
    assert [n.op_type for n in folded.graph.node] == ["Cast", "Reshape"]


@pytest.mark.parametrize("command", ["inspect", "compare", "optimize"])
def test_model_names_are_printed_escaped(command: str, tmp_path: Path) -> None:
    """inspect's and compare's output and optimize's table show the names escaped."""
    model = nan_shape(tmp_path / ("m" + ESCAPES + ".onnx"), ESCAPES)
    argv = {"inspect": ["inspect", model], "compare": ["compare", model, model],
            "optimize": ["optimize", model, "-o", str(tmp_path / ("o" + ESCAPES + ".onnx"))]}
    proc = _run(Run(argv[command]))
    if command == "compare":  # onnxruntime refuses the NaN shape: the error names the model
        assert proc.returncode == 2, proc.stderr
        assert_escaped(proc.stderr)
    else:
        assert proc.returncode == 0, proc.stderr
        assert_escaped(proc.stdout)


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    proc = _run(case.build(tmp_path))
    lines = proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == case.code, f"exit {proc.returncode}; stderr:\n{proc.stderr}"
    assert len(lines) == case.lines, f"{len(lines)} stderr lines:\n{proc.stderr}"
    if case.code == 2:
        assert lines[0].startswith("onnxfold: error: "), lines[0]
    for word in case.says:
        assert word in proc.stderr, proc.stderr
    for word in case.hides:
        assert word not in proc.stderr + proc.stdout, proc.stderr + proc.stdout
    if case.after is not None:
        case.after(tmp_path, proc)


def test_tables_align_escaped_names(tmp_path: Path) -> None:
    """compare's table measures an output name as it is shown (escaped)."""
    name = "Y" + ESCAPES
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    model = _save(tmp_path / "m.onnx",
                  [helper.make_node("Identity", ["one"], ["c"], name="id"),
                   helper.make_node("Add", ["X", "c"], [name], name="add")],
                  [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
                  [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2])], [one])
    compared = _run(Run(["compare", model, model]))
    assert compared.returncode == 0, compared.stderr
    rows = [line for line in compared.stdout.splitlines() if "float32  [2]" in line]
    assert len(rows) == 1 and rows[0].startswith(printable_name(name)), compared.stdout
    header = next(line for line in compared.stdout.splitlines() if line.startswith("output"))
    assert header.index("dtype") == rows[0].index("float32"), compared.stdout


def printable_name(name: str) -> str:
    return name.encode("unicode_escape").decode().replace("\\r", "\\x0d")


# -- string tensors stored as external data or as a sparse initializer ------------------------
def test_string_tensor_with_external_data_is_one_line(tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "w.bin").write_bytes(b"hello world!" * 10)
    t = onnx.TensorProto(name="s", data_type=TensorProto.STRING, dims=[2],
                         data_location=TensorProto.EXTERNAL)
    t.external_data.add(key="location", value="w.bin")
    proto = make_model([helper.make_node("Identity", ["s"], ["y"])], [],
                       [vinfo("y", TensorProto.STRING, [2])], [t])
    onnx.save_model(proto, str(model_dir / "m.onnx"))
    for args in (["optimize", model_dir / "m.onnx", "-o", tmp_path / "o.onnx"],
                 ["inspect", model_dir / "m.onnx"]):
        assert_one_error_line(run_cli(*args, timeout=REFUSAL_TIMEOUT))


def test_sparse_initializer_of_strings_is_one_line(tmp_path):
    values = helper.make_tensor("S", TensorProto.STRING, [1], [b"a"])
    indices = helper.make_tensor("S_i", TensorProto.INT64, [1], [1])
    graph = helper.make_graph([helper.make_node("Identity", ["S"], ["y"])], "g", [],
                              [vinfo("y", TensorProto.STRING, [4])],
                              sparse_initializer=[helper.make_sparse_tensor(values, indices,
                                                                            [4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save_model(proto, str(path))
    done = run_cli("optimize", path, "-o", tmp_path / "o.onnx", timeout=REFUSAL_TIMEOUT)
    if done.returncode == 0:
        return  # densified validly is fine too
    assert_one_error_line(done)


# -- the Python API: runtime constants numpy or no backend can fold ---------------------------
def _transposed_weight(path: Path) -> str:
    """Y = X @ Transpose(W), W a graph input (the runtime constant)."""
    return _save(path, [helper.make_node("Transpose", ["W"], ["Wt"]),
                        helper.make_node("MatMul", ["X", "Wt"], ["Y"])],
                 [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4]),
                  helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 4])],
                 [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4])])


@pytest.mark.parametrize(("weight", "says"), [
    (np.ones((4, 4), dtype=object), "an array of Python objects"),
    (np.full((4, 4), "x"), "an array of strings"),
    ([[1.0, 2.0], [3.0]], "not an array"),
], ids=["object array", "string array", "ragged list"])
@pytest.mark.parametrize("backend", ["ort", "numpy"])
def test_unfoldable_runtime_constant_is_one_line(tmp_path, weight, says, backend):
    """numpy raised its own TypeError ("Cannot change data-type for array of references")
    from the fingerprint of an object array; onnxruntime a RuntimeError for strings."""
    import onnxfold

    session = onnxfold.Session(_transposed_weight(tmp_path / "m.onnx"), ["W"], backend=backend)
    x = np.ones((1, 4), np.float32)
    for call in (lambda: session.run(None, {"X": x, "W": weight}),
                 lambda: session.refold({"X": x, "W": weight})):
        with pytest.raises(onnxfold.InputError) as caught:
            call()
        message = str(caught.value)
        assert "\n" not in message and says in message and "'W'" in message, message
    assert session.run(None, {"X": x, "W": np.eye(4, dtype=np.float32)})[0].shape == (1, 4)


# -- a batch: each model's line in a one-model run's form, the model named first -----------------
def test_batch_lines_start_as_a_one_model_runs_do(tmp_path):
    """A job's error that does not name its model (``--input-shape Q: no such input``) was
    printed as ``MODEL: onnxfold: error: ...``; every line is ``onnxfold: error: MODEL: ...``
    now, as when the message names the model itself (a file that is no ONNX model)."""
    models = tmp_path / "in"
    models.mkdir()
    shaped = add_one(models / "a.onnx")
    (models / "b.onnx").write_bytes(b"not a model")
    proc = _run(Run(["optimize", shaped, str(models / "b.onnx"), "-o", str(tmp_path / "out/"),
                        "--input-shape", "Q:3"]))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 2, proc.stderr
    assert lines[0].startswith(f"onnxfold: error: {shaped}: --input-shape Q: no such input"), \
        lines
    assert lines[1].startswith(f"onnxfold: error: {models / 'b.onnx'}: not an ONNX model"), lines


def test_batch_line_about_a_model():
    """The form each kind of line takes (``onnxfold.app.batch.line_about``)."""
    from onnxfold.app.batch import line_about

    assert line_about("m.onnx", "onnxfold: error: --dim n: bad") == \
        "onnxfold: error: m.onnx: --dim n: bad"
    assert line_about("m.onnx", "onnxfold: error: m.onnx: truncated") == \
        "onnxfold: error: m.onnx: truncated"
    assert line_about("m.onnx", "onnxfold: internal error: killed by signal 9") == \
        "onnxfold: internal error: m.onnx: killed by signal 9"
    assert line_about("m.onnx", "onnxfold: check failed: y outside tolerance") == \
        "onnxfold: check failed: m.onnx: y outside tolerance"
    assert line_about("m.onnx", "libfoo: a notice") == "onnxfold: warning: m.onnx: libfoo: a notice"
