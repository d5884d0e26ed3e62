"""The check's own onnxruntime runner: the one place the check builds a session, over a whole
model (:func:`open_session`: a :class:`WholeSession`, run by :func:`run_model`) or over nodes
of the original, a recipe or a rewrite's windows built into one model (:func:`run_nodes`).
A model whose session does not fit runs as a chain of stages (``stages.Chain``), a
:class:`Runner` as a whole session is: the comparison runs either without asking which.

The check computes again what the fold computed, so it must not compute it with the fold's
code: a fault in what runs onnxruntime for the fold (a shifted float, outputs handed back in
another order, a dtype converted wrongly) would be repeated here and certified. This module
builds its model and session itself and imports nothing of ``onnxfold.fold``
(``tests/unit/test_import_layers.py`` holds it).

How the model is built decides the bits. Values the original holds as constants are
initializers here too, handed over without a copy (onnxruntime prepacks a constant operand of
a MatMul, Gemm or Conv and its prepacked kernel sums in another order: a value is constant
where, and only where, the original has it constant); every other value is an input. Graph
optimizations are off, the session computing what the nodes say, but where a caller asks for
a level (values the check only feeds on, ``cones.Cones.run(exact=False)``). onnxruntime's Python API
hands no bfloat16, float8 or 4-bit array over: such an input is fed as float32 (int8) and
cast in, such an output cast out and back (every one of these casts is exact).

A session is built outside any bound (onnxruntime loads libraries as it builds one, and a
library that cannot map its thread-local data ends the process); a run then holds the process's
address space to the memory left (``memory.room``, ``onnxfold.host.address_space``) and
stops at a signal or the inference time limit (``onnxfold.host.interruptible``). What goes
wrong is one of two things, never confused: :class:`RunFailed` (onnxruntime refused the nodes
or failed on them: the nodes' fault) or :class:`MachineShort` (memory, a thread, a descriptor
ran out: the machine's, and a check says it could not run that part, never that it failed).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import ml_dtypes
import numpy as np
import onnx
from onnx import helper

from onnxfold.check.running import file_refs, memory
from onnxfold.check.running.handed import CARRIED, aligned, handable, onnx_type, placeholder
from onnxfold.check.running.held import HeldModel
from onnxfold.check.running.levels import DEFAULT_LEVEL, LEVELS
from onnxfold.check.running.models import ModelRef, ort_message
from onnxfold.errors import InputError
from onnxfold.host import address_space, interruptible, limits
from onnxfold.host.ort_sessions import register_libraries
from onnxfold.io.opener import check_regular


class RunFailed(Exception):
    """onnxruntime refused the nodes or failed running them (the message: its first line)."""


class MachineShort(Exception):
    """The machine ran short while running them (memory, a thread, a descriptor): nothing is
    known of the nodes (the message says what ran out)."""


class TimedOut(MachineShort):
    """The run outlasted the inference time limit and was stopped: nothing is known of the
    nodes either."""


@dataclass(frozen=True)
class Wanted:
    """An output to hand back: its name, its dtype where the caller knows it (None:
    onnxruntime's; one onnxruntime cannot hand over must be known), and whether it is a
    sequence of tensors (handed back as a list; any other output must be a tensor)."""

    name: str
    dtype: np.dtype | None = None
    sequence: bool = False


def run_nodes(nodes: Sequence[onnx.NodeProto], outputs: Sequence[Wanted], *,
              constants: Mapping[str, np.ndarray] | None = None,
              inputs: Mapping[str, np.ndarray | list[np.ndarray]] | None = None,
              opsets: Mapping[str, int], ir_version: int, libraries: Sequence[str] = (),
              prepacking: bool = True, aligned: bool = True) -> list[np.ndarray]:
    """The arrays of ``outputs`` that ``nodes`` compute from ``constants`` (initializers, as
    the original holds them) and ``inputs`` (fed; a list: a sequence of tensors). Raises
    RunFailed or MachineShort. ``prepacking=False`` where the bits need not be the
    original's (values a window reads: both windows read the same ones): the large constants
    are then fed, and onnxruntime reads them where they are (the file's pages) instead of
    copying and prepacking them; ``aligned=False`` where no bit depends on where an array
    starts (see :meth:`NodesModel.run`)."""
    given = dict(inputs or {})
    built = NodesModel(nodes, outputs, constants=constants,
                       inputs={name: Fed.of(name, array) for name, array in given.items()},
                       opsets=opsets, ir_version=ir_version, prepacking=prepacking)
    return built.run(given, libraries, aligned=aligned)


@dataclass(frozen=True)
class Fed:
    """How an input of a :class:`NodesModel` is declared: its dtype (a sequence's elements'),
    whether it is a sequence of tensors, and its shape (a sequence's: none)."""

    dtype: np.dtype
    sequence: bool = False
    shape: tuple[int, ...] | None = None

    @classmethod
    def of(cls, name: str, given: np.ndarray | list[np.ndarray]) -> Fed:
        """The declaration of ``given``, fed as ``name``."""
        if isinstance(given, list | tuple):
            if not given:
                raise RunFailed(f"{name}: an empty sequence, whose element type is unknown")
            return cls(np.dtype(given[0].dtype), sequence=True)
        return cls(np.dtype(given.dtype), shape=tuple(given.shape))


class NodesModel:
    """``nodes`` built into one model, run on as many feeds of the declared shapes as a
    caller has (each run builds the session anew unless a caller keeps one:
    :meth:`session`). ``constants`` are the original's initializers (see :func:`run_nodes`
    for ``prepacking``); ``inputs`` how each fed value is declared; ``functions``: the
    model-local functions the nodes call; ``level``: onnxruntime's graph optimization level
    (``disable``: what the nodes say)."""

    def __init__(self, nodes: Sequence[onnx.NodeProto], outputs: Sequence[Wanted], *,
                 constants: Mapping[str, np.ndarray] | None = None,
                 inputs: Mapping[str, Fed], opsets: Mapping[str, int], ir_version: int,
                 prepacking: bool = True, functions: Sequence[onnx.FunctionProto] = (),
                 level: str = "disable") -> None:
        self.outputs, self.prepacking, self.level = list(outputs), prepacking, level
        graph = onnx.GraphProto(name="onnxfold_check")
        graph.node.extend(nodes)
        self.handed: dict[str, np.ndarray] = {}
        self.constant_feeds: dict[str, np.ndarray] = {}  # large constants fed (no prepacking)
        declared = dict(inputs)
        for name, array in (constants or {}).items():
            large = handable(array)
            if large and not prepacking:  # fed: onnxruntime reads it where it is, no copy
                self.constant_feeds[name] = array
                declared[name] = Fed.of(name, array)
            elif large:  # handed over as an initializer (onnxruntime copies, and prepacks it)
                self.handed[name] = aligned(array)
                graph.initializer.append(placeholder(name, array))
            else:
                graph.initializer.append(_tensor(name, array))
        self.carried: dict[str, np.dtype] = {}  # fed name -> the dtype it is carried in
        self.fed_names: dict[str, str] = {}
        for name, fed in declared.items():
            if fed.sequence:
                graph.input.append(helper.make_tensor_sequence_value_info(
                    name, onnx_type(fed.dtype), None))
                self.fed_names[name] = name
                continue
            carrier = CARRIED.get(fed.dtype)
            fed_name = name if carrier is None else f"{name}#fed"
            shape = list(fed.shape) if fed.shape is not None else None
            graph.input.append(helper.make_tensor_value_info(
                fed_name, onnx_type(carrier or fed.dtype), shape))
            if carrier is not None:
                graph.node.insert(0, helper.make_node("Cast", [fed_name], [name],
                                                      to=onnx_type(fed.dtype)))
                self.carried[name] = carrier
            self.fed_names[name] = fed_name
        self.returned = []
        for want in self.outputs:
            carrier = CARRIED.get(want.dtype) if want.dtype is not None else None
            if carrier is None:
                self.returned.append(want.name)
                continue
            graph.node.append(helper.make_node("Cast", [want.name], [f"{want.name}#out"],
                                               to=onnx_type(carrier)))
            self.returned.append(f"{want.name}#out")
        graph.output.extend(onnx.ValueInfoProto(name=name) for name in self.returned)
        self.model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                             for d, v in opsets.items()])
        self.model.ir_version = max(ir_version, 7)
        self.model.functions.extend(functions)

    def session(self, libraries: Sequence[str]):
        """A session over the model (built outside any bound: see the module). Raises
        RunFailed or MachineShort."""
        import onnxruntime as ort

        try:
            options = session_options(self.level, libraries, self.prepacking)
            values = [ort.OrtValue.ortvalue_from_numpy(a) for a in self.handed.values()]
            if self.handed:
                options.add_external_initializers(list(self.handed), values)
            return new_session(self.model.SerializeToString(), options)
        except Exception as e:
            raise _told(e) from None

    def run(self, inputs: Mapping[str, np.ndarray | list[np.ndarray]],
            libraries: Sequence[str] = (), session=None, aligned: bool = True) -> list:
        """The arrays of the outputs, fed ``inputs`` (in ``session`` where the caller keeps
        one, else in a session built for this run). Every array fed starts at 64 bytes
        (``handed.aligned``: a copy of one that does not), but where not ``aligned``: a run
        whose nodes only move data, or whose values both windows read alike, feeds a weight
        where it lies (a view of its file's mapping: no copy of it). Raises RunFailed or
        MachineShort."""
        feeds: dict[str, object] = {}
        for name, given in {**inputs, **self.constant_feeds}.items():
            fed_name = self.fed_names.get(name)
            if fed_name is None:
                continue  # not read by these nodes
            if isinstance(given, list | tuple):
                feeds[fed_name] = [_fed(a, None) for a in given]
            else:
                feeds[fed_name] = _fed(given, self.carried.get(name), aligned)
        if session is None:
            session = self.session(libraries)
        try:
            arrays = bounded_run(lambda run_options: session.run(self.returned, feeds,
                                                                 run_options),
                                 "a check's run of the original's nodes")
        except interruptible.InferenceTimeout as e:
            raise TimedOut(f"exceeded the inference time limit ({e.seconds or 0:g} s)") \
                from None
        except Exception as e:
            raise _told(e) from None
        for want, array in zip(self.outputs, arrays):
            if not isinstance(array, np.ndarray) and not (want.sequence and
                                                          isinstance(array, list)):
                raise RunFailed(f"{want.name} is no tensor (a {type(array).__name__})")
        return [array if want.dtype is None or want.dtype not in CARRIED else
                np.asarray(array).astype(want.dtype) for want, array in zip(self.outputs, arrays)]


def session_options(level: str = DEFAULT_LEVEL, libraries: Sequence[str] = (),
                    prepacking: bool = True, threads: int | None = None):
    """onnxruntime's options for a check's session: CPU at ``level`` (:data:`LEVELS`), the
    custom-op ``libraries`` registered, failures raised as one line, no memory arena (what a
    run frees goes back to the system, so that the address-space bound of the next run counts
    only live memory: an arena kept 1.2 GB reserved that a later run then filled within its
    bound, and the kernel killed it in a 1 GiB cgroup); ``prepacking=False`` saves the
    prepacked copies of weights; ``threads``: intra-op threads (one inter-op thread)."""
    import onnxruntime as ort

    if level not in LEVELS:
        raise InputError(f"--ort-level {level}: expected one of {', '.join(LEVELS)}")
    options = ort.SessionOptions()
    register_libraries(options, libraries)  # loading a library is no run: shared
    options.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
    options.log_severity_level = 4
    options.enable_cpu_mem_arena = False
    if not prepacking:
        options.add_session_config_entry("session.disable_prepacking", "1")
    if threads is not None:
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return options


def new_session(source: bytes | str, options):
    """The check's one constructor of onnxruntime sessions (CPU): over a model's bytes or
    path with :func:`session_options`. The product builds its own
    (``host/ort_sessions.py``): the check shares no session code with what it checks."""
    import onnxruntime as ort

    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def open_session(model: ModelRef, label: str, libraries: Sequence[str] = (),
                 level: str = DEFAULT_LEVEL, prepacking: bool = True, threads: int | None = None,
                 referenced: bool = True) -> WholeSession:
    """A CPU session over ``model`` (see :func:`session_parts`). InputError where
    onnxruntime cannot load it, MachineShort where the machine ran short loading it."""
    return built_session(session_parts(model, libraries, level, prepacking, threads,
                                       referenced), label)


@dataclass
class SessionParts:
    """What a session over a whole model is built from: its bytes or path, the options, and
    the arrays handed over (kept alive with the session: onnxruntime may read them where
    they are)."""

    source: bytes | str
    options: object
    handed: list
    # a file handed over with its weights referenced in it (``file_refs``): its path and its
    # identity when it was read, checked again once the session is built and after its runs
    read_as: tuple[str, file_refs.Identity] | None = None


def session_parts(model: ModelRef, libraries: Sequence[str] = (), level: str = DEFAULT_LEVEL,
                  prepacking: bool = True, threads: int | None = None,
                  referenced: bool = True) -> SessionParts:
    """The parts of a CPU session over ``model`` (:func:`built_session` builds it): cheap,
    and done in the calling thread (a proto is serialized here, a path judged here). A file
    whose large weights are embedded is handed over with them referenced in it
    (``file_refs``: onnxruntime maps them instead of parsing them, the same session) unless
    not ``referenced`` (``--latency`` times a session as a user's is created, from the
    path)."""
    options = session_options(level, libraries, prepacking, threads)
    source: bytes | str
    handed: list = []
    if isinstance(model, HeldModel):
        source, arrays = model.session_source()
        if arrays:
            import onnxruntime as ort

            handed = [ort.OrtValue.ortvalue_from_numpy(a) for a in arrays.values()]
            options.add_external_initializers(list(arrays), handed)
    elif isinstance(model, onnx.ModelProto):
        source = model.SerializeToString()
    else:
        check_regular(model, what="model")  # onnxruntime opens the path: never a FIFO
        source = os.fspath(model)
        try:
            refs = file_refs.referenced(source) if referenced else None
        except OSError:  # (onnxruntime, opening the path, says what is wrong with it)
            refs = None
        if refs is not None:
            try:
                options.add_session_config_entry(FOLDER_KEY, refs.folder)
            except Exception:  # (a folder onnxruntime takes no option of: the path, as before)
                return SessionParts(source, options, handed)
            return SessionParts(refs.proto, options, handed, (source, refs.identity))
    return SessionParts(source, options, handed)


# where onnxruntime finds the external data of a model given as bytes
FOLDER_KEY = "session.model_external_initializers_file_folder_path"


def built_session(parts: SessionParts, label: str) -> WholeSession:
    """The session over ``parts`` (any thread may build it: onnxruntime releases the GIL
    while it does). InputError where onnxruntime cannot load it, MachineShort where the
    machine ran short loading it."""
    try:
        session = new_session(parts.source, parts.options)
    except Exception as e:
        short = limits.shortage(e)
        if short is not None:
            raise MachineShort(f"{label}: loading it: {short}") from None
        # a file truncated under its references: onnxruntime's error is of the bytes it found
        if _changed(parts.read_as):
            raise InputError(f"{label}: {CHANGED}") from None
        # a proto's scratch copy is said by its label, as the proto
        said_as = parts.source if isinstance(parts.source, str) and parts.source != label \
            else None
        message = ort_message(e, said_as, label)
        hint = " (--custom-op-library PATH loads the library that implements it)" if \
            _UNREGISTERED_OP.search(message) else ""
        raise InputError(f"{label}: onnxruntime cannot load it: {message}{hint}") from None
    whole = WholeSession(session, parts, label)
    whole.still_read()
    return whole


class Runner(Protocol):
    """What the check runs a model with: a :class:`WholeSession` or a chain of stages
    (``stages.Chain``). Its interface is onnxruntime's (``get_inputs``, ``get_outputs``,
    ``get_overridable_initializers``); :func:`run_model` runs it, each run bounded."""

    label: str
    # whether it runs every input set at once (:meth:`run_all`) and hands back its values at
    # the cuts between stages (``Chain.results``), where a whole session runs a set when asked
    in_stages: bool

    def get_inputs(self) -> list[Any]: ...

    def get_outputs(self) -> list[Any]: ...

    def get_overridable_initializers(self) -> list[Any]: ...

    def run_all(self, feed_sets: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Run every input set ahead of :meth:`run` asking for each (a chain of stages builds
        each stage's session once for all of them)."""

    def run(self, outputs: Sequence[str], feeds: Mapping[str, Any], run_options=None) -> list:
        """onnxruntime's ``session.run``, bounded (:func:`bounded_run`)."""

    def results(self, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """What it kept of the set ``feeds`` (the mapping :meth:`run_all` ran): a chain's
        outputs and its values at the cuts; a whole session keeps nothing."""

    def still_read(self) -> None:
        """InputError where a file it reads its weights from is no longer the one read."""


class WholeSession:
    """A :class:`Runner` over a whole model: its onnxruntime ``session`` (the arrays handed
    over to it kept alive with it), run an input set at a time; the file it reads its large
    weights in (``file_refs``, where it does) judged unchanged by :meth:`still_read`."""

    in_stages = False

    def __init__(self, session: Any, parts: SessionParts, label: str) -> None:
        self.session, self.label = session, label
        self._handed, self._read_as = parts.handed, parts.read_as

    def get_inputs(self) -> list[Any]:
        return self.session.get_inputs()

    def get_outputs(self) -> list[Any]:
        return self.session.get_outputs()

    def get_overridable_initializers(self) -> list[Any]:
        return self.session.get_overridable_initializers()

    def run_all(self, feed_sets: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Nothing ahead: a set runs when :meth:`run` asks for it."""

    def run(self, outputs: Sequence[str] | None, feeds: Mapping[str, Any], run_options=None
            ) -> list:
        return bounded_run(lambda options: self.session.run(outputs, feeds, options),
                           self.label, run_options)

    def results(self, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        return {}

    def still_read(self) -> None:
        """InputError where the session reads its weights from a file (``file_refs``) that is
        no longer the one read: at the offsets of the file as it was, or rewritten under its
        mapping. Checked once the session is built and after its last run."""
        if _changed(self._read_as):
            raise InputError(f"{self.label}: {CHANGED}")


CHANGED = "the file changed while onnxruntime read it"


def _changed(read_as: tuple[str, file_refs.Identity] | None) -> bool:
    """Whether the file a session was handed with its weights referenced in it (``read_as``:
    its path and identity then; None: none) is no longer that file."""
    return read_as is not None and not file_refs.unchanged(*read_as)


_UNREGISTERED_OP = re.compile(r"is not a registered function/op|No Op registered for")


def run_model(runner: Runner, label: str, outputs: list[str], feeds: dict, run_options,
              hint: str = "") -> list:
    """``runner.run``, bounded as every run of the check is (see the module). InputError
    where onnxruntime fails to run it (``hint``: the flags that change the inputs),
    MachineShort where the machine ran short."""
    hint = hint or " (see --dim, --int-range, --inputs)"
    try:
        return runner.run(outputs, feeds, run_options)
    except interruptible.InferenceTimeout:
        raise
    except MachineShort as e:
        raise MachineShort(f"{label}: running it: {e}") from None
    except RunFailed as e:
        raise InputError(f"{label}: onnxruntime failed to run it: {e}{hint}") from None
    except Exception as e:
        short = limits.shortage(e)
        if short is not None:
            raise MachineShort(f"{label}: running it: {short}") from None
        raise InputError(f"{label}: onnxruntime failed to run it: {ort_message(e)}{hint}"
                         ) from None


def bounded_run(call, what: str, run_options=None):
    """``call(run_options)`` under the address-space bound of the memory left, stopped by a
    signal or the inference time limit."""
    room = memory.room()
    return interruptible.run(call, run_options, what=what, around=None if room is None else
                             lambda: address_space.bounded(room))


def _told(error: Exception) -> RunFailed | MachineShort:
    """``error`` as the machine's or the nodes'."""
    short = limits.shortage(error)
    if short is not None:
        return MachineShort(short)
    text = str(error).strip()
    return RunFailed(text.splitlines()[0][:300] if text else type(error).__name__)


def _tensor(name: str, array: np.ndarray) -> onnx.TensorProto:
    """``array`` written into the model (strings as UTF-8 text, other dtypes as their bytes)."""
    if array.dtype.kind in "OSU":
        tensor = onnx.TensorProto(name=name, data_type=onnx.TensorProto.STRING,
                                  dims=array.shape)
        tensor.string_data.extend(_utf8(x).encode("utf-8") for x in array.reshape(-1).tolist())
        return tensor
    tensor = onnx.TensorProto(name=name, data_type=onnx_type(array.dtype), dims=array.shape)
    if array.dtype in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)):
        flat = aligned(array).reshape(-1).view(np.uint8) & 0x0F
        flat = np.append(flat, np.uint8(0)) if flat.size % 2 else flat
        tensor.raw_data = (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()
    else:
        tensor.raw_data = array.tobytes()  # C order; little-endian hosts
    return tensor


def _fed(array: np.ndarray, carrier: np.dtype | None, start_aligned: bool = True
         ) -> np.ndarray:
    """``array`` as onnxruntime's Python API takes it (strings as ``str`` objects), starting
    at 64 bytes where ``start_aligned``."""
    if carrier is not None:
        return array.astype(carrier)
    if array.dtype.kind in "OSU":
        return np.array([_utf8(x) for x in array.reshape(-1).tolist()],
                        dtype=object).reshape(array.shape)
    return aligned(array) if start_aligned else np.ascontiguousarray(array)


def _utf8(item: object) -> str:
    """A string element as ``str`` (bytes as UTF-8: onnxruntime's encoding of its strings)."""
    if isinstance(item, bytes | bytearray | np.bytes_):
        try:
            return bytes(item).decode("utf-8")
        except UnicodeDecodeError:
            raise RunFailed("a string that is not UTF-8, which onnxruntime's Python binding "
                            "cannot feed") from None
    return str(item)
