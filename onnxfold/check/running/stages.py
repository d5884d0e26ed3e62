"""The check in stages, run: a model whose onnxruntime session does not fit in memory run as
a chain of stages (planned by ``running.stage_plan``), one session at a time, standing where
the check holds a session (a ``runner.Runner`` as ``runner.WholeSession`` is).

Every input set goes through a stage before the next stage's session is built, so each weight
is read once per model, not once per input set. A stage's weights are read once, with
``pread``, into a reused buffer, and the next stage's are read ahead while it runs. The peak is
about one stage plus the values one cut hands on (``memory.stage_bytes``: 3.3x a stage's
float32 weights measured, 4.4x its float16 ones).

**A stage computes as a session over the whole model does.** Its weights are its session's
initializers, handed over from the buffer, which onnxruntime prepacks as it does a whole
model's (fed as inputs, they left the MatMuls unpacked, and onnxruntime's unpacked float
product sums in an order that follows the product's width: the fold's merge of three
projections into one MatMul then differed in the last bits, which 32 float16 layers grew into
a false alarm on a 7B decoder). A value handed on is rounded to its dtype where one session may
keep it in float32 (onnxruntime computes a float16 op without a float16 kernel in float32 and
drops the casts between two such ops), so both chains are cut at the same values and hand back
the same ones (the caller keeps the same values in both). Both chains run end to end, each on
its own values (the errors a model accumulates across stages are in its outputs), and the
values both hand on at a cut are compared there: they show where two chains part; the outputs
decide.
"""


from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxfold.check.running.models import without_constant_weights
from onnxfold.check.running.runner import (
    Fed,
    MachineShort,
    NodesModel,
    RunFailed,
    Wanted,
)
from onnxfold.check.running.stage_plan import Stage
from onnxfold.host import heap
from onnxfold.io.checked import read_range
from onnxfold.io.mapped import MappedTensor, drop_resident_pages, prefetch_ahead

# onnxruntime's names of tensor element types (its NodeArg.type: "tensor(float16)")
_ORT_NAMES = {ir.DataType.FLOAT: "float", ir.DataType.DOUBLE: "double"}


@dataclass(frozen=True)
class Arg:
    """An input or output as onnxruntime's ``NodeArg`` describes it (``name``, ``type``,
    ``shape``), for the feed plan and the interface checks."""

    name: str
    type: str
    shape: list[int | str | None]


def _arg(value: ir.Value) -> Arg:
    shape: list[int | str | None] = [d if isinstance(d, int) else d.value
                                     for d in (value.shape or ())]
    return Arg(str(value.name), _ort_type(value.type), shape)


def _ort_type(type_: ir.TypeProtocol | None) -> str:
    """``type_`` as onnxruntime writes it: ``tensor(float16)``, ``seq(tensor(float))``."""
    if type_ is None:
        return "unknown"
    if isinstance(type_, ir.TensorType):
        dtype = type_.dtype
        return f"tensor({_ORT_NAMES.get(dtype, dtype.name.lower())})"
    if isinstance(type_, ir.SequenceType):
        return f"seq({_ort_type(type_.elem_type)})"
    return str(type_)


class Chain:
    """A model run as its stages: a ``runner.Runner``, standing where a check holds a whole
    session (``get_inputs``, ``get_outputs``; :meth:`run_all` and ``runner.run_model`` run
    it, each stage's run bounded by its own session). ``kept``: values besides the graph's
    outputs handed back (the cut values compared)."""

    in_stages = True

    def __init__(self, model: ir.Model, stages: list[Stage], label: str,
                 libraries: Sequence[str], level: str, kept: Iterable[str] = ()) -> None:
        self.model, self.stages, self.label = model, stages, label
        self.libraries, self.level = tuple(libraries), level
        graph = model.graph
        self._values = {str(v.name): v for n in graph for v in n.outputs if v.name}
        self._inputs = [v for v in graph.inputs if v.name not in graph.initializers]
        self._defaults = {str(v.name): v for v in graph.inputs if v.name in graph.initializers}
        self.kept = set(kept) | {str(v.name) for v in graph.outputs}
        # graph outputs no node makes: initializers (an output the fold made constant)
        made = {str(o.name) for n in graph for o in n.outputs}
        self._constant_outputs = [str(v.name) for v in graph.outputs if str(v.name) not in made
                                  and str(v.name) in graph.initializers]
        self._functions = [ir.serde.serialize_function(f) for f in model.functions.values()]
        # id of a set's feeds -> (the feeds, its kept values or what stopped it)
        self._done: dict[int, tuple[Mapping[str, np.ndarray], dict[str, Any] | Exception]] = {}
        self._later = [{name for w in stages[k + 1:] for name in w.reads}
                       for k in range(len(stages))]
        # what each stage hands back: what it hands on, and the kept values it makes
        self._returned = [[*w.writes, *(name for n in w.nodes for o in n.outputs
                                        if (name := str(o.name)) in self.kept and
                                        name not in w.writes)] for w in stages]
        self.tell: Callable[[str], None] = lambda text: None
        self._weights = _WeightBuffer()
        # the element dtype of each sequence a stage made (an empty one handed on has none)
        self._sequences: dict[str, np.dtype] = {}

    def get_inputs(self) -> list[Arg]:
        return [_arg(v) for v in self._inputs]

    def get_outputs(self) -> list[Arg]:
        return [_arg(v) for v in self.model.graph.outputs]

    def get_overridable_initializers(self) -> list[Arg]:
        return [_arg(v) for v in self._defaults.values()]

    def run_all(self, feed_sets: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Run every input set of ``feed_sets`` through every stage, stage by stage;
        :meth:`results` then gives each set's values (or what stopped it). What an earlier
        call ran is forgotten."""
        self._done.clear()
        states: list[dict[str, Any] | Exception] = [dict(feeds) for feeds in feed_sets]
        total = len(self.stages)
        for k in range(total):
            self.tell(f"stage {k + 1}/{total}")
            if k + 1 < total:  # the next stage's weights read while this one computes
                self._prefetch(self.stages[k + 1])
            self._run_stage(k, states)
            drop_resident_pages()  # its weights are not read again by this chain
            heap.trim()  # what its session freed (a collection per stage costs seconds)
        heap.release()
        for state in states:
            if not isinstance(state, Exception):
                for name in self._constant_outputs:
                    if name not in state:  # (an overridable one fed is the set's value)
                        state[name] = _constant(self.model.graph.initializers[name])
        for feeds, state in zip(feed_sets, states):
            self._done[id(feeds)] = (feeds, state if isinstance(state, Exception) else {
                name: value for name, value in state.items() if name in self.kept})

    def results(self, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """The graph's outputs and kept values for ``feeds`` (the very mapping
        :meth:`run_all` ran; another is run now); raises what stopped its run (RunFailed,
        MachineShort)."""
        entry = self._done.get(id(feeds))
        if entry is None or entry[0] is not feeds:
            self.run_all([feeds])
            entry = self._done[id(feeds)]
        done = entry[1]
        if isinstance(done, Exception):
            raise done
        return done

    def run(self, outputs: Sequence[str], feeds: Mapping[str, np.ndarray], run_options=None
            ) -> list:
        """onnxruntime's ``session.run``: ``outputs`` for ``feeds``."""
        done = self.results(feeds)
        return [done[name] for name in outputs]

    def still_read(self) -> None:
        """Nothing to judge after the runs: a stage's weights are handed to its session as
        arrays read before it is built (``_WeightBuffer``), none left for onnxruntime to read
        in a file."""

    def _run_stage(self, k: int, states: list[dict[str, Any] | Exception]) -> None:
        """Every set of ``states`` (its values so far, or what stopped it) through stage
        ``k``: one session per shape of what it is fed (a session declares its inputs'
        shapes, as onnxruntime's shape inference needs: a Resize fed its sizes fails on an
        input of unknown shape)."""
        stage, later, returned = self.stages[k], self._later[k], self._returned[k]
        if not returned:  # nothing it makes is read after it (a statistic no node reads)
            return
        weights: dict[str, np.ndarray] | None = None
        sessions: dict[tuple, tuple[NodesModel, Any] | Exception] = {}
        for k, state in enumerate(states):
            if isinstance(state, Exception):
                continue
            try:
                inputs = self._inputs_of(stage, state)
                shapes = tuple((name, _shape_of(value)) for name, value in inputs.items())
                if shapes not in sessions:
                    try:
                        if weights is None:
                            weights = self._weights.read(stage, self.model.graph, inputs)
                        built, session = self._session(stage, inputs, returned, weights)
                        self._sequences.update(_sequence_dtypes(session))
                        sessions[shapes] = built, session
                    except (RunFailed, MachineShort) as e:
                        sessions[shapes] = e
                made = sessions[shapes]
                if isinstance(made, Exception):
                    raise made
                arrays = made[0].run(inputs, session=made[1])
            except (RunFailed, MachineShort) as e:
                states[k] = e
                continue
            state.update(zip(returned, arrays))
            for name in [n for n in state if n not in later and n not in self.kept
                         and n in self._values]:
                del state[name]  # no later stage reads it

    def _prefetch(self, stage: Stage) -> None:
        """Have the kernel read ``stage``'s weights ahead (those in a file's mapping)."""
        prefetch_ahead(self.model.graph.initializers[name].const_value
                       for name in stage.constants)

    def _inputs_of(self, stage: Stage, state: dict[str, Any]) -> dict[str, Any]:
        """What ``stage`` is fed: the values it reads (a graph input a set does not feed
        is an initializer's default) and its initializers overridable from outside."""
        inputs: dict[str, Any] = {}
        for name in stage.reads:
            if name in state:
                inputs[name] = state[name]
            elif name in self._defaults:
                inputs[name] = self._defaults[name].const_value.numpy()  # type: ignore[union-attr]
            else:
                raise RunFailed(f"{name}: read by stage nodes and made by none before them")
        for name in stage.constants:
            if name in self._defaults:  # an overridable initializer: the set's value, if fed
                inputs[name] = state.get(name, self._defaults[name].const_value.numpy())  # type: ignore[union-attr]
        return inputs

    def _session(self, stage: Stage, inputs: Mapping[str, Any], returned: list[str],
                 constants: Mapping[str, np.ndarray]) -> tuple[NodesModel, Any]:
        """``stage``'s model (:meth:`_model`) and a session over it: its inputs declared with
        the shapes they are fed, else, where onnxruntime refuses that, with none (a shape
        declared can fail its inference of a branch the run never takes: an ``If`` whose
        other branch squeezes an axis that is 2 here, which one session, knowing only the
        symbolic dim, accepts, as silero-vad's decoder did); what the first refusal said where
        both are refused."""
        built = self._model(stage, inputs, returned, constants)
        try:
            return built, built.session(self.libraries)
        except RunFailed as refused:
            unshaped = self._model(stage, inputs, returned, constants, shaped=False)
            try:
                return unshaped, unshaped.session(self.libraries)
            except RunFailed:
                raise refused from None

    def _model(self, stage: Stage, inputs: Mapping[str, Any], returned: list[str],
               constants: Mapping[str, np.ndarray], shaped: bool = True) -> NodesModel:
        """``stage``'s nodes as a model, its inputs declared as ``inputs`` are (without
        their shapes where not ``shaped``), its ``constants`` as the original's initializers,
        handing back ``returned``."""
        declared = {name: Fed(self._sequences[name], sequence=True)
                    if isinstance(value, list | tuple) and not value and name in self._sequences
                    else Fed.of(name, value) for name, value in inputs.items()}
        if not shaped:
            declared = {name: dataclasses.replace(fed, shape=None)
                        for name, fed in declared.items()}
        wanted = [_wanted(self._values[name]) for name in returned]
        nodes, weights = without_constant_weights(stage.nodes, kept=set(returned))
        handed = {**constants, **{str(v.name): w for v, w in weights.items()}}
        return NodesModel([ir.serde.serialize_node(n) for n in nodes], wanted,
                          constants=handed, inputs=declared,
                          opsets=dict(self.model.opset_imports),
                          ir_version=self.model.ir_version, prepacking=True,
                          functions=self._functions, level=self.level)


class _WeightBuffer:
    """One buffer a stage's weights are read into, with ``pread``, reused stage after
    stage: each weight is read once for every input set (under a tight memory limit the
    file's pages of a stage were evicted between its sets and read again, which doubled
    the time an 8-layer slice of a 7B decoder took in a 2 GiB cgroup), an input truncated
    meanwhile is an InputError rather than a bus error, and each weight starts 64 bytes
    aligned (a kernel may sum in another order at another alignment)."""

    ALIGN = 64

    def __init__(self) -> None:
        self._buffer = np.empty(0, np.uint8)

    def read(self, stage: Stage, graph: ir.Graph, fed: Mapping[str, Any]
             ) -> dict[str, np.ndarray]:
        """``stage``'s constants (those ``fed`` does not override), its weights in a
        file copied into the buffer, the rest as they are."""
        tensors = {name: graph.initializers[name].const_value for name in stage.constants
                   if name not in fed}
        copied = {name: t for name, t in tensors.items()
                  if isinstance(t, MappedTensor) and t.dtype.bitwidth >= 8 and t.size}
        total = sum(-(-t.nbytes // self.ALIGN) * self.ALIGN for t in copied.values())
        if total > self._buffer.nbytes:  # (its pages are touched once)
            raw = np.empty(total + self.ALIGN, np.uint8)  # numpy starts it 16 bytes aligned
            start = -raw.ctypes.data % self.ALIGN
            self._buffer = raw[start:start + total]
        found: dict[str, np.ndarray] = {}
        at = 0
        for name, tensor in tensors.items():
            assert tensor is not None  # (stage constants hold data)
            if name not in copied:
                found[name] = tensor.numpy()
                continue
            assert isinstance(tensor, MappedTensor)
            region = self._buffer[at:at + tensor.nbytes]
            read_range(tensor.path, tensor.identity, tensor.offset or 0, tensor.nbytes, region)
            dtype = np.dtype(tensor.dtype.numpy()).newbyteorder("<")
            found[name] = region.view(dtype).reshape(tensor.shape.numpy())
            at += -(-tensor.nbytes // self.ALIGN) * self.ALIGN
        return found


def _constant(value: ir.Value) -> np.ndarray:
    """An initializer's array, read with ``pread`` where it is in a file (a truncated input
    is an InputError, never a bus error)."""
    tensor = value.const_value
    assert tensor is not None  # (an initializer)
    return tensor.checked_numpy() if isinstance(tensor, MappedTensor) else tensor.numpy()


_SEQUENCE = re.compile(r"^seq\(tensor\((\w+)\)\)$")
_NUMPY_NAMES = {"float": "float32", "double": "float64", "string": "object"}


def _sequence_dtypes(session: Any) -> dict[str, np.dtype]:
    """The element dtype of each sequence of tensors ``session`` hands back, as onnxruntime
    declares it (``seq(tensor(float))``), where numpy has one."""
    found = {}
    for arg in session.get_outputs():
        match = _SEQUENCE.match(str(arg.type))
        if match is not None:
            with contextlib.suppress(TypeError):
                found[str(arg.name)] = np.dtype(_NUMPY_NAMES.get(match[1], match[1]))
    return found


def _shape_of(value: Any) -> tuple:
    """A fed value's shape (a sequence's: its length and its elements')."""
    if isinstance(value, list | tuple):
        return ("sequence", *(tuple(np.shape(v)) for v in value))
    return tuple(np.shape(value))


def _wanted(value: ir.Value) -> Wanted:
    """How a stage hands ``value`` back (its dtype where the graph's types say; a list
    where it may be a sequence)."""
    if value.type is None or isinstance(value.type, ir.SequenceType):
        return Wanted(str(value.name), sequence=True)
    return Wanted(str(value.name), value.dtype.numpy() if value.dtype is not None and
                  value.dtype != ir.DataType.STRING else None)
