"""The process's resource limits, named in errors: a run that hits one says which.

An ``OSError`` of ``EMFILE`` (too many open files), ``ENFILE`` (the system's file table is
full) or ``ENOMEM`` (no address space or memory for a mapping), a ``MemoryError`` and a
shared library the loader could not map, a thread that could not start, or a native library's
``SystemError`` without an exception under an address-space limit (all seen under a low
``ulimit -v``), say
nothing about the input: they become a :class:`ResourceLimitError` whose message gives the
limit and its value, e.g. ``too many open files (ulimit -n is 256)``.
"""

from __future__ import annotations

import errno
import re
import resource

from onnxfold.errors import ResourceLimitError

LIMIT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})
_NO_THREAD = "can't start new thread"  # threading's error when the kernel refuses a thread
_NO_ADDRESS_SPACE = "failed to map segment from shared object"  # the dynamic loader's ENOMEM
# a C extension whose allocation failed and that returned without raising (seen under a low
# ulimit -v, from a parse in protobuf's C++ when the worker's arenas left it no room)
_SILENT_FAILURE = "error return without exception set"


def _soft_limit(which: int) -> int | None:
    """The soft limit ``which`` (``resource.RLIMIT_*``), None when unlimited or unreadable."""
    try:
        soft, _hard = resource.getrlimit(which)
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):.0f} MiB"


def memory_limit_text() -> str:
    """What bounds this process's memory, for a message: the address-space limit if set."""
    address_space = _soft_limit(resource.RLIMIT_AS)
    if address_space is not None:
        return f"ulimit -v is {_mib(address_space)}"
    return "no ulimit -v; the machine's or the container's memory"


def out_of_memory(doing: str) -> ResourceLimitError:
    """A :class:`ResourceLimitError` for a ``MemoryError`` while ``doing``."""
    return ResourceLimitError(f"{doing}: out of memory ({memory_limit_text()})")


def describe(error: BaseException) -> str | None:
    """One line naming the resource limit ``error`` reports, or None if it is not one."""
    if isinstance(error, MemoryError):
        return f"out of memory ({memory_limit_text()})"
    if isinstance(error, RuntimeError) and _NO_THREAD in str(error):
        threads = _soft_limit(resource.RLIMIT_NPROC)
        return "cannot start a thread (" + memory_limit_text() + \
            (f", ulimit -u is {threads})" if threads is not None else ")")
    if isinstance(error, SystemError) and _SILENT_FAILURE in str(error) and \
            _soft_limit(resource.RLIMIT_AS) is not None:
        return f"out of memory ({memory_limit_text()}; a native library failed to allocate)"
    if isinstance(error, ImportError) and _NO_ADDRESS_SPACE in str(error):
        return f"cannot load a shared library: out of address space ({memory_limit_text()})"
    if not isinstance(error, OSError) or error.errno not in LIMIT_ERRNOS:
        return None
    if error.errno == errno.EMFILE:
        files = _soft_limit(resource.RLIMIT_NOFILE)
        return "too many open files (" + \
            (f"ulimit -n is {files})" if files is not None else "the process's limit)")
    if error.errno == errno.ENFILE:
        return "too many open files in the system (the kernel's file table is full)"
    return f"cannot allocate memory ({memory_limit_text()})"


def limit_error(error: BaseException, doing: str) -> ResourceLimitError | None:
    """``error``, or the error it was raised from (onnx-ir wraps what a deserializer raises in
    its own error), as a :class:`ResourceLimitError` saying what was being done; None when no
    resource limit is behind it."""
    what = describe_cause(error)
    return None if what is None else ResourceLimitError(f"{doing}: {what}")


# how onnxruntime (C++) says the machine ran short: an allocation failed, a thread of its pool
# could not start (``std::system_error``: EAGAIN), no descriptor was left
_NATIVE_SHORTAGE = re.compile(
    r"(?P<memory>Failed to allocate memory|bad_alloc|bad allocation|Available memory of \d+ is "
    r"smaller than requested|out of memory|Cannot allocate memory)|"
    r"(?P<thread>can't start new thread|thread constructor failed|Resource temporarily "
    r"unavailable|pthread_create)|(?P<files>Too many open files)", re.IGNORECASE)


def shortage(error: BaseException) -> str | None:
    """What the machine ran short of, where ``error`` (Python's or onnxruntime's, or one in its
    chain of causes) says it did: one line, None where it says nothing of the machine. Such a
    failure says nothing of the model that was running."""
    what = describe_cause(error)
    if what is not None:
        return what
    found = _NATIVE_SHORTAGE.search(str(error))
    if found is None:
        return None
    if found.group("memory"):
        return f"out of memory ({memory_limit_text()})"
    if found.group("thread"):
        return f"cannot start a thread ({memory_limit_text()})"
    files = _soft_limit(resource.RLIMIT_NOFILE)
    return "too many open files (" + (f"ulimit -n is {files})" if files is not None else
                                      "the process's limit)")


def describe_cause(error: BaseException) -> str | None:
    """:func:`describe` of ``error`` or of the first error in its chain of causes that is a
    resource limit."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        what = describe(cause)
        if what is not None:
            return what
        cause = cause.__cause__ or cause.__context__
    return None
