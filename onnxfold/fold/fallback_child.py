"""An expensive fallback session run in a child process, killed at ``--fold-timeout``.

onnxruntime reads ``RunOptions.terminate`` only between kernels, so one long kernel (a large
constant Conv) runs on long after the timeout in the folding process. A batch whose estimated
cost (``onnxfold.fold.fold_cost``) could approach the timeout therefore runs in a child process
(``python -m onnxfold.fold.fallback_child DIR``) that is killed when the timeout is reached; the
nodes then stay unfolded with the decline "exceeded --fold-timeout". Cheap batches, the common
case, stay in the process: starting a child costs about half a second.

The child gets the batch model's bytes and its arrays through files in a private temporary
directory (``.npy``, memory-mapped by the child, so a weight is not copied through a pipe or
held twice in memory), builds the same session from the same bytes as the process would (the
same bits come out), and writes its results there as ``.npy`` files. The directory is removed
whatever happens. The child tells the parent on its stdout when the session is built: the
timeout counts from then, as it does in the process (building a session is not stopped by it
either). On Linux the child also dies with its parent (``PR_SET_PDEATHSIG``), so a run killed
from outside leaves no onnxruntime process behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import shutil
import signal
import site
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict

import numpy as np

from onnxfold.analysis.declines import DeclineKind
from onnxfold.errors import clipped
from onnxfold.fold.fallback_session import (
    FallbackError,
    Wanted,
    first_line,
    is_raw_dtype,
    raw_bits,
    run_guarded,
    to_ort,
)
from onnxfold.host import endings
from onnxfold.host.ort_sessions import open_session, session_options
from onnxfold.io.tempfiles import own_tree
from onnxfold.ir.arrays import c_contiguous
from onnxfold.ir.dtypes import np_dtype, onnx_type

MIN_FLOPS = 1e9  # below this a kernel takes well under a second: never worth a child
# The slowest rate assumed of an expensive kernel (a ConvTranspose, a Conv with a large kernel,
# one core of a loaded machine): a batch goes to a child once it could take half the timeout
# at that rate. One that stays runs at most that long past the timeout (onnxruntime stops it
# after the kernel), and the common, cheap folds pay nothing.
SLOW_FLOPS_PER_SECOND = 1e9
STARTUP_SECONDS = 120.0  # for the child to start Python, import onnxruntime, build the session
READY = b"ready\n"
SMALL_BYTES = 1 << 20  # arrays read into memory rather than mapped


def worth_a_child(flops: float, timeout: float) -> bool:
    """Whether a batch of ``flops`` estimated operations runs in a child under ``timeout``."""
    return flops >= max(MIN_FLOPS, timeout * SLOW_FLOPS_PER_SECOND / 2)


class ChildUnavailable(Exception):
    """No child process can be started here (no temporary directory, a full disk, no Python
    executable to run): the caller runs the batch in its own process instead."""


def run_in_child(model: bytes, handed: Mapping[str, np.ndarray],
                 inputs: Mapping[str, np.ndarray], outputs: Sequence[Wanted],
                 room: int | None, contrib: bool, timeout: float) -> list[np.ndarray]:
    """Run the batch ``model`` (its ``handed`` initializers given as external initializers,
    ``inputs`` fed) in a child process; the ``outputs``' arrays. Raises FallbackError when it
    fails, dies, or runs longer than ``timeout`` seconds (then it is killed), and
    ChildUnavailable when it cannot be started."""
    try:
        with endings.deferred():  # made and recorded together (an interrupted run removes it)
            directory = tempfile.mkdtemp(prefix="onnxfold-fallback-")
            own_tree(directory)
    except OSError as e:
        raise ChildUnavailable(e.strerror or str(e)) from None
    try:
        try:
            with open(os.path.join(directory, "model.onnx"), "wb") as f:
                f.write(model)
            manifest = {"handed": _save_arrays(directory, "h", handed),
                        "inputs": _save_arrays(directory, "i", inputs),
                        "outputs": [asdict(w) for w in outputs], "room": room,
                        "contrib": contrib}
            with open(os.path.join(directory, "manifest.json"), "w") as f:
                json.dump(manifest, f)
        except OSError as e:
            raise ChildUnavailable(e.strerror or str(e)) from None
        _run_child(directory, timeout)
        try:
            with open(os.path.join(directory, "result.json")) as f:
                result = json.load(f)
            if "error" in result:
                raise FallbackError(result["error"], DeclineKind[result["kind"]])
            arrays = []
            for spec, name in zip(outputs, result["outputs"]):
                arr = np.load(os.path.join(directory, name), allow_pickle=False)
                if spec.raw_only and spec.elem_type is not None:
                    arr = arr.view(np_dtype(spec.elem_type))
                arrays.append(arr)
        except (OSError, ValueError, KeyError) as e:
            raise FallbackError(f"cannot read the results of onnxruntime's process ({e})"
                                ) from None
        return arrays
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _save_arrays(directory: str, prefix: str, arrays: Mapping[str, np.ndarray]) -> list[dict]:
    """Save each array as ``<prefix><k>.npy``; entries naming the file and, for types numpy
    cannot save (bfloat16, float8: saved as unsigned integers), the ONNX type."""
    entries = []
    for k, (name, arr) in enumerate(arrays.items()):
        entry: dict = {"name": name, "file": f"{prefix}{k}.npy", "onnx_type": None}
        if is_raw_dtype(arr.dtype):
            entry["onnx_type"] = onnx_type(arr.dtype)
            arr = raw_bits(c_contiguous(arr))
        np.save(os.path.join(directory, entry["file"]), arr, allow_pickle=False)
        entries.append(entry)
    return entries


def _run_child(directory: str, timeout: float) -> None:
    """Start the child on ``directory``, let it run ``timeout`` seconds once its session is
    built, kill it after; FallbackError unless it ended normally."""
    with open(os.path.join(directory, "stderr"), "wb") as err:
        if not sys.executable:
            raise ChildUnavailable("no Python executable (sys.executable is empty)")
        try:
            proc = subprocess.Popen([sys.executable, "-m", "onnxfold.fold.fallback_child",
                                     directory, str(os.getpid())],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=err, env=_child_environment())
        except OSError as e:
            raise ChildUnavailable(e.strerror or str(e)) from None
    assert proc.stdout is not None  # stdout=PIPE
    try:
        readable, _, _ = select.select([proc.stdout], [], [], STARTUP_SECONDS + timeout)
        if not readable:
            raise FallbackError(f"onnxruntime did not start within {STARTUP_SECONDS:g} s",
                                DeclineKind.SIZE)
        _remove_inputs(directory)  # read or mapped by now: a kill from outside leaves less
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise FallbackError(f"exceeded --fold-timeout ({timeout:g} s): onnxruntime was "
                                "stopped", DeclineKind.SIZE) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    if proc.returncode < 0:
        raise FallbackError(f"onnxruntime's process died (signal {-proc.returncode})")
    if proc.returncode != 0:
        with open(os.path.join(directory, "stderr"), errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
        raise FallbackError(clipped(lines[-1], 300) if lines else
                            f"onnxruntime's process exited with {proc.returncode}")


def _child_environment() -> dict[str, str]:
    """This process's environment, with the directory this ``onnxfold`` was imported from
    first on ``PYTHONPATH`` unless it is a site-packages directory: the child imports the same
    onnxfold even when it was found through a ``sys.path`` entry that a script added."""
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    installed = {os.path.abspath(p) for p in (*site.getsitepackages(),
                                              site.getusersitepackages())}
    if package_root in installed:  # found there by any interpreter (and not put before the
        return dict(os.environ)    # standard library, as a PYTHONPATH entry would be)
    current = os.environ.get("PYTHONPATH")
    return {**os.environ,
            "PYTHONPATH": package_root + (os.pathsep + current if current else "")}


def _remove_inputs(directory: str) -> None:
    """Delete the model and the arrays written for the child (it has read or mapped them)."""
    for name in os.listdir(directory):
        if name in ("model.onnx", "manifest.json") or (
                name.startswith(("h", "i")) and name.endswith(".npy")):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))


def _load_arrays(directory: str, entries: list[dict]) -> tuple[list[str], list]:
    names, values = [], []
    for entry in entries:
        path = os.path.join(directory, entry["file"])
        mapped = os.path.getsize(path) > SMALL_BYTES
        arr = np.load(path, mmap_mode="r" if mapped else None, allow_pickle=False)
        if entry["onnx_type"] is not None:
            import onnxruntime as ort

            value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(arr, entry["onnx_type"])
        else:
            value = to_ort(arr)
        names.append(entry["name"])
        values.append(value)
    return names, values


def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (elsewhere: nothing); exit now
    if the parent (process ``parent``) is already gone."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _child(directory: str) -> dict:
    """The child's work: build the session, say so, run it, save the results."""
    import onnxruntime as ort

    with open(os.path.join(directory, "manifest.json")) as f:
        manifest = json.load(f)
    outputs = [Wanted(**{**w, "shape": None if w["shape"] is None else tuple(w["shape"])})
               for w in manifest["outputs"]]
    with open(os.path.join(directory, "model.onnx"), "rb") as f:
        model = f.read()  # from bytes, as in the folding process
    try:
        handed_names, handed_values = _load_arrays(directory, manifest["handed"])
        input_names, input_values = _load_arrays(directory, manifest["inputs"])
        session = open_session(model, session_options(optimized=False),
                               handed=dict(zip(handed_names, handed_values)))
        run_options = ort.RunOptions()
        run_options.log_severity_level = 4
        os.write(1, READY)
        arrays = run_guarded(session, dict(zip(input_names, input_values)), outputs,
                             run_options, manifest["room"], manifest["contrib"])
    except FallbackError as e:
        return {"error": str(e), "kind": e.reason.kind.name}
    except Exception as e:  # onnxruntime raises several unrelated exception types
        return {"error": first_line(e), "kind": DeclineKind.RUNTIME_ERROR.name}
    names = []
    for k, arr in enumerate(arrays):
        if is_raw_dtype(arr.dtype):
            arr = raw_bits(arr)
        names.append(f"o{k}.npy")
        np.save(os.path.join(directory, names[-1]), arr, allow_pickle=False)
    return {"outputs": names}


def main(directory: str, parent: int) -> None:
    _die_with_parent(parent)
    result = _child(directory)
    with open(os.path.join(directory, "result.json"), "w") as f:
        json.dump(result, f)
    with contextlib.suppress(OSError):
        os.write(1, READY)  # a failure before the session was built: the parent waits no more


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
