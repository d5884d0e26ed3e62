"""A pre-imported interpreter that forks the command-line runs of a test worker.

Most of a small test's ``python -m onnxfold`` run is the interpreter starting and importing
numpy, onnx, onnx-ir and onnxfold (0.5-0.8 s of CPU each run; ~1,000 runs in the
``cli`` and ``adversarial`` tiers). The zygote is started once per worker with those imported
and forks one child per run: a real process with its own pid, exit status and signals, its
stdin, stdout and stderr pipes, the caller's working directory and environment, that runs
``onnxfold.__main__`` as ``python -m onnxfold`` does (``runpy``, ``SystemExit``, the threads
joined and ``atexit`` run at the end, an uncaught ``KeyboardInterrupt`` ending by SIGINT).

``run(args, cwd, timeout, input)`` gives a ``Finished`` (its ``cpu`` from ``wait4``: the
child and the children it waited for), or None where the run must be a spawned process: the
caller's resource limits, umask or a variable an import may read (``IMPORT_ENV``) differ from
the zygote's (a test that set a limit, ``TMPDIR`` or ``ONNXFOLD_*``), the zygote cannot be
started, or ``ONNXFOLD_TEST_SPAWN=1`` is set (every run spawned, as before the zygote). A
timeout kills the child and raises ``subprocess.TimeoutExpired`` as ``subprocess.run`` does.

Protocol: one SOCK_SEQPACKET control socket; each run sends a JSON request with four
descriptors (its reply socket, the child's stdin, stdout and stderr); the zygote forks, replies
``{"pid": N}``, and when ``wait4`` reaps the child ``{"status": S, "cpu": C}``.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import locale
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import threading
from typing import Any

LIMITS = sorted(name for name in dir(resource) if name.startswith("RLIMIT_"))
# variables the preloaded imports may have read (numpy's BLAS threads, locale, temporary
# directory, Python's own, onnxfold's): where one differs from the zygote's the run is spawned;
# any other (torch sets TORCHINDUCTOR_CACHE_DIR as test modules are collected) is the child's
# from the caller's environment, set before onnxfold runs
IMPORT_ENV = ("ONNXFOLD_", "PYTHON", "NPY_", "NUMPY", "OPENBLAS", "OMP_", "MKL_", "GOTO", "BLIS",
              "LC_", "LANG", "TMPDIR", "TMP", "TEMP", "HOME", "XDG_", "ORT_")
# not onnxruntime: its import opens a SQLite database (its usage records), a connection no
# forked child may share; each child imports it as a spawned one does (~0.1 s)
PRELOAD = ["numpy", "onnx", "onnx_ir", "onnxfold.app.cli", "onnxfold.app.optimize_command",
           "onnxfold.check.compare"]


def _limits() -> dict[str, list[int]]:
    return {name: list(resource.getrlimit(getattr(resource, name))) for name in LIMITS}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _state() -> dict[str, Any]:
    """What a spawned child would inherit besides its command, working directory and stdio."""
    env = {k: v for k, v in os.environ.items() if k.startswith(IMPORT_ENV)}
    return {"env": env, "limits": _limits(), "umask": _umask()}


# ---- the zygote process ---------------------------------------------------------------------

def _child(request: dict[str, Any], stdio: list[int], own: list[int]) -> None:
    """In the forked child: become ``python -m onnxfold ARGS`` and exit as it would."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        for fd in {*stdio, *own} - {0, 1, 2}:  # the zygote's own descriptors (what the
            os.close(fd)  # preloaded imports opened, if any, stays: a spawned child has it)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.stdin = sys.__stdin__ = open(0, closefd=False)  # noqa: SIM115 - the process's own
        sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)  # noqa: SIM115 - as above
        sys.stderr = sys.__stderr__ = open(2, "w", buffering=1,  # noqa: SIM115 - as above
                                           errors="backslashreplace", closefd=False)
        sys.argv = ["-m", *request["args"]]
        sys.path[0] = request["cwd"]
        code = _run_main()
    except BaseException:  # the zygote's own failure, said on the child's stderr
        import traceback

        os.write(2, f"test zygote: {traceback.format_exc()}".encode())
    finally:
        os._exit(code)


def _run_main() -> int:
    """Run ``onnxfold.__main__``; the exit code Python would give, after its shutdown steps."""
    import runpy
    import traceback

    code, interrupted = 0, False
    try:
        runpy.run_module("onnxfold", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        interrupted = True
    except BaseException:  # printed as the interpreter prints it
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # the interpreter joins its threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def serve(control_fd: int) -> None:
    """The zygote's loop: fork a child per request, reply its pid, then its end."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    control = socket.socket(fileno=control_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    replies: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    control.sendall(json.dumps(_state()).encode())
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                message, fds, _, _ = socket.recv_fds(control, 1 << 20, 4)
                if not message:
                    return  # the worker is gone
                reply = socket.socket(fileno=fds[0])
                pid = os.fork()
                if pid == 0:
                    _child(json.loads(message), fds[1:],
                           [control.fileno(), wake_r, wake_w, selector.fileno(), fds[0],
                            *(other.fileno() for other in replies.values())])
                for fd in fds[1:]:
                    os.close(fd)
                replies[pid] = reply
                reply.sendall(json.dumps({"pid": pid}).encode())
            else:
                os.read(wake_r, 4096)
        _reap(replies)


def _reap(replies: dict[int, socket.socket]) -> None:
    while replies:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        reply = replies.pop(pid, None)
        if reply is not None:
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):  # the caller gave up (a timeout): none to tell
                reply.sendall(json.dumps({"status": code,
                                          "cpu": usage.ru_utime + usage.ru_stime}).encode())
            reply.close()


# ---- the test worker's side -----------------------------------------------------------------

INITIAL = _state()  # the worker's, taken at import (collection), before any test changed it
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _as_initially() -> None:
    for name, limits in INITIAL["limits"].items():
        with contextlib.suppress(OSError, ValueError):  # a hard limit lowered since: the
            resource.setrlimit(getattr(resource, name), tuple(limits))  # states differ, spawned
    os.umask(INITIAL["umask"])


def _zygote_env() -> dict[str, str]:
    """The environment now, with the import-time variables as the worker started with them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(IMPORT_ENV)}
    return {**env, **INITIAL["env"]}


class _Zygote:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen(
            [sys.executable, "-c",
             f"from tests.support.zygote import serve; serve({theirs.fileno()})"],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, cwd=ROOT,
            env=_zygote_env(), preexec_fn=_as_initially)
        theirs.close()
        self.control, self.owner, self.lock = ours, os.getpid(), threading.Lock()
        atexit.register(self.close)
        ours.settimeout(120)
        self.state = json.loads(ours.recv(1 << 20))
        ours.settimeout(None)

    def close(self) -> None:
        """End the zygote (its control socket closed, it returns) as the worker ends."""
        if self.owner != os.getpid():
            return
        self.control.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def send(self, request: dict[str, Any], fds: list[int]) -> None:
        with self.lock:
            socket.send_fds(self.control, [json.dumps(request).encode()], fds)


_zygote: _Zygote | None = None
_broken = False


def _get() -> _Zygote | None:
    global _zygote, _broken
    if _broken or os.environ.get("ONNXFOLD_TEST_SPAWN", "") not in ("", "0"):
        return None
    if _zygote is None or _zygote.owner != os.getpid() or _zygote.process.poll() is not None:
        try:
            _zygote = _Zygote()
        except (OSError, ValueError, subprocess.SubprocessError):
            _broken = True
            return None
    return _zygote


def run(args: list[str], cwd: str | os.PathLike | None, timeout: float,
        input: str | None) -> Any:
    """``python -m onnxfold ARGS`` forked from the zygote: a ``Finished``, or None where the run
    must be spawned (see the module's docstring)."""
    from tests.support.cli import Finished

    if _state() != INITIAL:
        return None
    zygote = _get()
    if zygote is None or zygote.state != INITIAL:
        return None
    request = {"args": args, "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd()),
               "env": dict(os.environ)}
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    in_r, in_w = os.pipe() if input is not None else (os.dup(0), -1)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        zygote.send(request, [theirs.fileno(), in_r, out_w, err_w])
    finally:
        for fd in (theirs.fileno(), in_r, out_w, err_w):
            os.close(fd)
        theirs.detach()
    out, err, ended = _collect(ours, in_w, input, out_r, err_r, timeout, args)
    return Finished(ended["status"], out, err, ended["cpu"])


class _Exchange:
    """One run's pipes and replies: stdin fed, stdout and stderr drained, the zygote's replies
    read (the child's pid, then how it ended)."""

    def __init__(self, reply: socket.socket, in_w: int, pending: bytes, out_r: int,
                 err_r: int) -> None:
        self.reply, self.in_w, self.pending = reply, in_w, pending
        self.out_r, self.err_r = out_r, err_r
        self.chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
        self.pid: int | None = None
        self.ended: dict[str, Any] | None = None
        self.selector = selectors.DefaultSelector()
        for fd in self.chunks:
            self.selector.register(fd, selectors.EVENT_READ)
        self.selector.register(reply, selectors.EVENT_READ)
        if in_w >= 0:
            os.set_blocking(in_w, False)
            self.selector.register(in_w, selectors.EVENT_WRITE)

    def done(self) -> bool:
        return self.ended is not None and not self.selector.get_map()

    def step(self, timeout: float) -> None:
        for key, _ in self.selector.select(timeout):
            if key.fileobj is self.reply:
                self._read_reply()
            elif key.fd == self.in_w:
                self._feed()
            else:
                data = os.read(key.fd, 1 << 16)
                if data:
                    self.chunks[key.fd].append(data)
                else:
                    self.selector.unregister(key.fd)

    def _read_reply(self) -> None:
        message = self.reply.recv(1 << 16)
        if not message:
            self.selector.unregister(self.reply)
            if self.ended is None:
                raise RuntimeError("the test zygote ended before its child")
            return
        found = json.loads(message)
        self.pid = found.get("pid", self.pid)
        if "status" in found:
            self.ended = found
            self.selector.unregister(self.reply)

    def _feed(self) -> None:
        try:
            written = os.write(self.in_w, self.pending[:1 << 16])
        except BrokenPipeError:
            written = len(self.pending)
        self.pending = self.pending[written:]
        if not self.pending:
            self.selector.unregister(self.in_w)
            os.close(self.in_w)
            self.in_w = -1

    def output(self, fd: int) -> bytes:
        return b"".join(self.chunks[fd])

    def close(self) -> None:
        self.selector.close()
        self.reply.close()
        for fd in (self.out_r, self.err_r, self.in_w):
            if fd >= 0:
                os.close(fd)


def _collect(reply: socket.socket, in_w: int, input: str | None, out_r: int, err_r: int,
             timeout: float, args: list[str]) -> tuple[str, str, dict[str, Any]]:
    """Feed stdin, drain stdout and stderr and read the replies until the child has ended and
    both pipes are closed; on ``timeout`` kill it and raise ``TimeoutExpired``."""
    import time

    encoding = locale.getpreferredencoding(False)
    exchange = _Exchange(reply, in_w, input.encode(encoding) if input is not None else b"",
                         out_r, err_r)
    deadline = time.monotonic() + timeout
    try:
        while not exchange.done():
            left = deadline - time.monotonic()
            if left <= 0:
                if exchange.pid is not None:
                    os.kill(exchange.pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(["onnxfold", *args], timeout,
                                                exchange.output(out_r), exchange.output(err_r))
            exchange.step(left)
    finally:
        exchange.close()
    assert exchange.ended is not None

    def text(fd: int) -> str:
        return io.TextIOWrapper(io.BytesIO(exchange.output(fd)), encoding=encoding).read()

    return text(out_r), text(err_r), exchange.ended
