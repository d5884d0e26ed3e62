"""Real resource-limit failures, each produced in a child process, named with their limit."""

from __future__ import annotations

import re
import textwrap

from tests.support.cli import run_python


def _child(body: str) -> str:
    result = run_python("-c", textwrap.dedent(body), timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_thread_the_address_space_cannot_hold():
    said = _child("""
        import resource, threading
        from onnxfold.host.limits import describe
        with open("/proc/self/status") as f:
            size = next(int(l.split()[1]) for l in f if l.startswith("VmSize")) << 10
        resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 20), resource.RLIM_INFINITY))
        try:
            threading.Thread(target=lambda: None).start()
        except RuntimeError as e:
            print(describe(e))
    """)
    assert said.startswith("cannot start a thread (ulimit -v is "), said


def test_too_many_open_files():
    said = _child("""
        import os, resource
        from onnxfold.host.limits import describe
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(
            resource.RLIMIT_NOFILE)[1]))
        held = []
        try:
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as e:
            print(describe(e))
    """)
    assert said == "too many open files (ulimit -n is 64)"


def test_a_native_failure_without_exception_is_out_of_memory_only_under_ulimit_v():
    said = _child("""
        import resource
        from onnxfold.host.limits import describe
        error = SystemError("error return without exception set")
        print(describe(error))
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, resource.RLIM_INFINITY))
        print(describe(error))
    """)
    assert said.splitlines() == [
        "None", "out of memory (ulimit -v is 8192 MiB; a native library failed to allocate)"]


def test_other_errors_are_not_limits():
    from onnxfold.host.limits import describe

    assert describe(OSError(2, "No such file or directory")) is None
    assert describe(ValueError("bad")) is None


def test_the_writer_out_of_descriptors_names_the_limit_not_bad_input(tmp_path):
    source, target = tmp_path / "w.bin", tmp_path / "out.bin"
    source.write_bytes(b"x" * 8192)
    said = _child(f"""
        import os, resource
        from onnxfold.errors import ResourceLimitError
        from onnxfold.io.segments import FileRange, copy_range
        dst = os.open({str(target)!r}, os.O_RDWR | os.O_CREAT)
        used = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (used - 1, resource.getrlimit(
            resource.RLIMIT_NOFILE)[1]))
        try:
            copy_range(FileRange({str(source)!r}, 0, 8192), dst, 0)
        except ResourceLimitError as e:
            print(e)
    """)
    assert re.search(r"w\.bin: cannot open external data to copy it: too many open files "
                     r"\(ulimit -n is \d+\)$", said), said


def test_a_write_out_of_descriptors_names_the_limit_not_the_output():
    """A publication refused for want of a descriptor (``ulimit -n 12`` and ``--check``) said
    ``write failed (Too many open files)``, as if the output were to blame."""
    from onnxfold.errors import ResourceLimitError
    from onnxfold.io.tempfiles import write_failed

    error = write_failed("o.onnx", OSError(24, "Too many open files"))
    assert isinstance(error, ResourceLimitError)
    assert re.fullmatch(r"o\.onnx: not written: too many open files \(ulimit -n is \d+\)",
                        str(error)), error


def test_the_machine_running_short_is_never_a_bug_on_the_command_line():
    """The check's runner says the machine ran short with MachineShort, which a caller that
    did not catch it (--latency did not) let reach the command line as an internal error,
    exit 3. Wherever it arises it is "could not run": exit 2, one line; so is onnxruntime's
    own word for an allocation that failed."""
    for raised, says in (
            ("MachineShort('m.onnx: running it: out of memory (ulimit -v is 4096 MiB)')",
             "could not run: m.onnx: running it: out of memory (ulimit -v is 4096 MiB)"),
            ("RuntimeError('[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Failed to allocate "
             "memory for requested buffer of size 10000000000')", "out of memory (")):
        result = run_python("-c", textwrap.dedent(f"""
            from onnxfold.app.cli import run_guarded
            from onnxfold.check.running.runner import MachineShort
            def action():
                raise {raised}
            print(run_guarded(action, False, False, []))
        """), timeout=120)
        assert result.stdout.strip() == "2", result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("onnxfold: error: " + says), lines
        assert lines[0].endswith("; nothing was written"), lines
