"""The models a check runs, and their onnxruntime sessions.

A check reads each model twice: as a graph (weights memory-mapped, for the feed plan and the
fold verification) and as an onnxruntime CPU session. Both turn what a user can get wrong (an
unreadable file, an op onnxruntime does not know, feeds it rejects) into one-line
:class:`~onnxfold.errors.InputError` messages.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.analysis.expansion import refuse_onnxruntime_inlining
from onnxfold.check.running import memory as memory_room
from onnxfold.check.running.levels import DEFAULT_LEVEL, LEVELS
from onnxfold.errors import InputError, clipped
from onnxfold.host import address_space, interruptible
from onnxfold.io import load_model
from onnxfold.io.reader import model_from_proto
from onnxfold.runtime import custom_ops

ModelRef = str | os.PathLike | onnx.ModelProto

_ORT_TYPES = {
    "float": np.float32, "float16": np.float16, "double": np.float64, "bool": np.bool_,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "string": np.object_,
}


def label_of(model: ModelRef, default: str) -> str:
    return default if isinstance(model, onnx.ModelProto) else os.fspath(model)


def graph_of(model: ModelRef, label: str) -> ir.Model:
    """The model's graph (weights memory-mapped); also turns unreadable files into InputError,
    and refuses a model whose local functions onnxruntime would inline into too many nodes
    (``expansion.refuse_onnxruntime_inlining``)."""
    loaded = model_from_proto(model) if isinstance(model, onnx.ModelProto) else \
        load_model(model, check=False)
    refuse_onnxruntime_inlining(loaded, label)
    return loaded


def ort_message(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if text.startswith("[ONNXRuntimeError]"):
        text = text.split(" : ", 3)[-1]
    # drop C++ source locations and signatures: "/src/x.cc:256 ns::f(args) message"
    text = re.sub(r"/\S*\.(?:cc|cpp|h):\d+ (?:[^()\s]+\([^()]*\) )?", " ", text)
    text = _CPP_SIGNATURE.sub("", text)
    return clipped(" ".join(text.split()), ORT_MESSAGE_LIMIT)


ORT_MESSAGE_LIMIT = 300
# a C++ function's signature onnxruntime quotes before an ENFORCE's condition: "static
# onnxruntime::TensorShapeVector onnxruntime::SqueezeBase::ComputeOutputShape(const ...&) "
_CPP_SIGNATURE = re.compile(r"(?:(?:static|virtual|inline) )*(?:[\w:<>,*&]+ )?"
                            r"(?:\w+(?:<[^<>()]*>)?::)+~?\w+\([^()]*\)(?: const)? ")


def open_session(model: ModelRef, label: str, libraries: Sequence[str] = (),
                 level: str = DEFAULT_LEVEL, prepacking: bool = True, threads: int | None = None):
    """A CPU session over ``model`` at onnxruntime's optimization ``level`` (:data:`LEVELS`);
    ``prepacking=False`` saves the prepacked copies of weights where memory is tight;
    ``threads``: intra-op threads (one inter-op thread), else onnxruntime's default."""
    import onnxruntime as ort

    if level not in LEVELS:
        raise InputError(f"--ort-level {level}: expected one of {', '.join(LEVELS)}")
    options = ort.SessionOptions()
    custom_ops.register(options, libraries)
    options.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
    options.log_severity_level = 4  # failures are raised (and reported) as one line each
    # no arena: what a run frees goes back to the system, so that after a run that ran out of
    # memory the address-space bound of the next one (run_session) still counts only live
    # memory (an arena kept 1.2 GB reserved and untouched, which a later run then filled
    # within its bound: the kernel killed it in a 1 GiB cgroup)
    options.enable_cpu_mem_arena = False
    if not prepacking:
        options.add_session_config_entry("session.disable_prepacking", "1")
    if threads is not None:
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else \
        os.fspath(model)
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as e:
        message = ort_message(e)
        hint = " (--custom-op-library PATH loads the library that implements it)" if \
            _UNREGISTERED_OP.search(message) else ""
        raise InputError(f"{label}: onnxruntime cannot load it: {message}{hint}") from None


_UNREGISTERED_OP = re.compile(r"is not a registered function/op|No Op registered for")


def numpy_type(ort_type: str, label: str, name: str) -> np.dtype:
    inner = ort_type[len("tensor("):-1] if ort_type.startswith("tensor(") else None
    if inner not in _ORT_TYPES:
        raise InputError(f"{label}: input {name} has type {ort_type}, which compare cannot "
                         "feed")
    return np.dtype(_ORT_TYPES[inner])


_OUT_OF_MEMORY = re.compile(r"Failed to allocate memory|bad_alloc|Available memory of \d+ is "
                            r"smaller than requested|out of memory", re.IGNORECASE)


def out_of_memory(message: str) -> bool:
    """Whether onnxruntime's ``message`` says an allocation failed."""
    return bool(_OUT_OF_MEMORY.search(message))


def run_session(sess, label: str, outputs: list[str], feeds: dict, run_options,
                hint: str = "") -> list:
    """``sess.run`` with the process's address space bounded by the memory left
    (``memory_room.run_room``): a run that needs more fails in onnxruntime, an InputError
    that says so, rather than the kernel killing the process. A signal or the inference time
    limit stops it (``onnxfold.host.interruptible``)."""
    room = memory_room.run_room()
    try:
        return interruptible.run(lambda options: sess.run(outputs, feeds, options), run_options,
                                 what=label, around=None if room is None else
                                 lambda: address_space.bounded(room))
    except interruptible.InferenceTimeout:
        raise
    except MemoryError:
        raise InputError(f"{label}: onnxruntime ran out of memory running it (about "
                         f"{room // 2**20 if room else '?'} MiB were left){hint}") from None
    except Exception as e:
        raise InputError(f"{label}: onnxruntime failed to run it: {ort_message(e)}"
                         f"{hint or ' (see --dim, --int-range, --inputs)'}") from None
