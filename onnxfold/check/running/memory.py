"""Whether a check's onnxruntime sessions fit the memory this process may use.

What a session allocates while it runs depends on the inputs (an attention over an image's
pixels grows with their square), so each inference of the check runs with the process's
address space bounded by what is left (:func:`room`, ``onnxfold.host.address_space``): an
allocation beyond it fails in onnxruntime, and the check tries smaller inputs or declines in
one line instead of being killed.

A check holds one model's onnxruntime session at a time (the original, then the optimized one;
both at once where both fit, ``aside.py``), none while the original's cones run; a session
peaks well above the weights it loads: onnxruntime reads the model's protobuf and then copies
each initializer out of it. Measured on a BERT-base export (415 MiB of weights,
onnxruntime 1.32, CPU): a session at the default level with prepacked weights peaks at 1.85x
the weights, one with optimizations and prepacking off at 1.8x (:data:`SESSION_FACTOR` allows
2x). So before the first session opens, the weights are weighed against what is left under the
tightest of the host's RAM and the cgroup's limit (``onnxfold.host.memory_limits``); where they
do not fit the check declines in one line
(:class:`~onnxfold.check.compare.CheckCouldNotRun`) instead of being killed by the kernel.

A check fixes glibc's mmap threshold before its first session and returns freed memory after
each (``onnxfold.host.heap``: a session opened after a fold retained 230 MiB more).
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

from onnxfold.check.running.models import constant_tensor
from onnxfold.host.address_space import address_space_in_use
from onnxfold.host.memory_limits import available_memory, cgroup_dirty_bytes, host_available

SESSION_FACTOR = 2.0  # peak bytes of a session per byte of its weights
CAST_FACTOR = 1.5  # and per byte of its 16-bit float weights, their float32 copies
SESSION_OVERHEAD = 64 * 2**20  # the session's own allocations, the feeds and the outputs
HOST_SHARE = 0.75  # of the host's available memory a check may take, cgroup or not
# of the memory limit kept for what it charges beside this process's resident pages (the page
# cache of files read and written, the kernel's own): a run bounded at the limit less the
# resident pages was killed in a 1 GiB cgroup
HEADROOM_SHARE, HEADROOM_FLOOR = 0.125, 64 * 2**20


def weighed(model: ir.Model) -> tuple[int, int]:
    """The bytes of ``model``'s weights and of those of them that are float16 or bfloat16, in
    one walk of its graph. Its weights are what a session over it loads: its initializers and
    its main graph's Constant nodes' tensors, which onnxruntime makes initializers (counted
    as none, a model of Constant weights was given a session it had no room for, and the
    kernel killed the check in a 640 MiB cgroup). A session holds a float32 copy of the 16-bit
    float ones its CPU kernels cannot read (a float16 MatMul's weight, cast once by its graph
    optimizations): :data:`CAST_FACTOR` more bytes per byte (a session over a 294 MiB float16
    decoder peaked at 1.01 GiB above the process, 3.4x its weights, where ``SESSION_FACTOR``
    alone allowed 652 MiB: the kernel killed the check, and ``--latency``, in a 900 MiB
    cgroup)."""
    weights = cast = 0
    for tensor in _weights(model):
        weights += tensor.nbytes
        if tensor.dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
            cast += tensor.nbytes
    return weights, cast


def _weights(model: ir.Model) -> Iterator[ir.TensorProtocol]:
    """The tensors a session over ``model`` loads: its initializers', its Constant nodes'."""
    yield from (v.const_value for v in model.graph.initializers.values()
                if v.const_value is not None)
    yield from (tensor for node in model.graph if (tensor := constant_tensor(node)) is not None)


def session_bytes(weights: int, cast: int = 0) -> int:
    """About the peak of an onnxruntime session over ``weights`` bytes, ``cast`` of them 16-bit
    floats (:func:`weighed`)."""
    return int(SESSION_FACTOR * weights + CAST_FACTOR * cast) + SESSION_OVERHEAD


BOTH_SESSIONS_SHARE = 2  # both sessions built at once: their peaks at most half the room


def both_sessions_fit(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether sessions over two models (each :func:`weighed`) may be held at once: their
    peaks together at most 1/:data:`BOTH_SESSIONS_SHARE` of the memory left (the rest for the
    check's runs beside them); False where the memory left is unknown."""
    free = room()
    need = session_bytes(*a) + session_bytes(*b)
    return free is not None and need * BOTH_SESSIONS_SHARE <= free


def resident_bytes() -> int | None:
    """This process's resident memory now (None where /proc cannot tell)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    import resource

    return pages * resource.getpagesize()


def room() -> int | None:
    """What this process may still take: what is left under its memory limit (the host's RAM
    or its cgroup's) less a headroom (``HEADROOM_SHARE``) and less the cgroup's dirty page
    cache (``cgroup_dirty_bytes``: the output just written, before the kernel wrote it out),
    and no more than
    :data:`HOST_SHARE` of what the host has available now,
    nor than its address-space limit leaves (``ulimit -v``, ``prlimit --as``: what is mapped
    counts there, the weights' files and threads' stacks too) (None: unknown). Without a
    cgroup the limit is the host's RAM, which other processes share: a check that took all of
    it would have the kernel kill it, or them."""
    limit, used = available_memory(), resident_bytes()
    left = None if limit is None or used is None else max(
        limit - used - cgroup_dirty_bytes() - max(int(limit * HEADROOM_SHARE),
                                                  HEADROOM_FLOOR), 0)
    available = host_available()
    share = None if available is None else int(available * HOST_SHARE)
    known = [m for m in (left, share, _address_space_left()) if m is not None]
    return min(known) if known else None


def _address_space_left() -> int | None:
    """What the soft address-space limit leaves unmapped (None: no limit, or unknown)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    mapped = address_space_in_use()
    if soft == resource.RLIM_INFINITY or mapped is None:
        return None
    return max(soft - mapped, 0)


# A stage holds its weights as a session over the whole model does (initializers, prepacked:
# its products then sum as the user's session sums them): read into the check's buffer, then
# onnxruntime folds what it computes from them (a transpose) and prepacks them, casting a
# float16 weight to float32 first. Measured on the 7B decoder's layers (onnxruntime 1.32, CPU;
# an 8-layer float16 slice and a 2-layer float32 one): a stage peaks at 3.3x its float32
# weights and 4.4x its float16 ones.
STAGE_FACTOR = 3.5  # peak bytes of a stage per byte of its weights
STAGE_HALF_FACTOR = 1.0  # and per byte of its 16-bit float weights (their float32 copies)
STAGE_SHARE = 6  # of the memory left, a stage's weights take at most a sixth


def stage_budget() -> int | None:
    """The bytes of weights one stage of a check in stages may hold (None: the memory left
    is unknown)."""
    free = room()
    return None if free is None else max(free // STAGE_SHARE, 1)


def stage_bytes(weights: int, half: int = 0) -> int:
    """About the peak of a stage over ``weights`` bytes of weights, ``half`` of them 16-bit
    floats."""
    return int(STAGE_FACTOR * weights + STAGE_HALF_FACTOR * half) + SESSION_OVERHEAD


def check_stage(weights: int, half: int = 0) -> None:
    """MemoryError, saying the sizes, when the largest stage (``weights`` bytes: a single
    node's where no cut is smaller; ``half`` of them 16-bit floats) does not fit."""
    free = room()
    need = stage_bytes(weights, half)
    if free is None or need <= free:
        return
    mib = 2**20
    raise MemoryError(f"the check needs about {need // mib} MiB to run its largest stage "
                      f"({weights // mib} MiB of weights: one node's cannot be cut smaller) "
                      f"and {free // mib} MiB are left under the memory limit; run it where "
                      "more memory is available, or without --check")


def check_room(weights: int, cast: int = 0) -> None:
    """MemoryError, saying the sizes, when a session over ``weights`` bytes (``cast`` of them
    16-bit floats) does not fit."""
    free = room()
    need = session_bytes(weights, cast)
    if free is None or need <= free:
        return
    mib = 2**20
    raise MemoryError(f"the check needs about {need // mib} MiB for an "
                      f"onnxruntime session over {weights // mib} MiB of weights and "
                      f"{free // mib} MiB are left under the memory limit; run it where more "
                      "memory is available, or without --check")
