"""``onnxfold.Session``: an onnxruntime session that folds runtime constants once per set.

The model is folded at compile time, its low-rank branches over the runtime constants merged
into their base weights (``onnxfold.runtime.reassociate``), then split around the inputs named
in ``runtime_constants``. The first ``run`` evaluates ``runtime_fold`` on those feeds with a
backend and opens the ``entry`` session with the results bound as initializers, so onnxruntime
prepacks them (``onnxfold.runtime.entry_session``). Later calls run entry only.

Memory: base weights only the fold reads stay in the model's file, read by each fold from its
mapping (``onnxfold.runtime.file_weights``); a set's folded tensors are loaded by onnxruntime,
which keeps its packed copies, and the Session's arrays dropped. Runtime constants holding an
infinity or a NaN are not merged (``W + s A B`` would compute NaN where the model computes an
infinity), nor those whose merged weights are not finite (``A B`` overflows where ``(x A) B``
need not: an adapter of float32's largest values): their set runs the model unmerged with them
fed each call.

Sets: up to ``max_sets`` folded sets (one per adapter, say) are kept by the content of their
feeds, least recently used out first, within ``max_bytes`` (``onnxfold.runtime.folded_sets``);
switching to a kept set folds and compiles nothing. ``adapter=`` (a path to an onnxruntime
``.onnx_adapter`` file, or a mapping of arrays) gives the runtime-constant feeds once, and
``set_adapter`` switches them; feeds given to ``run`` take precedence.

Cache contract: each call checks the runtime-constant feeds it is given against the active
set's (``onnxfold.runtime.feed_check``): ``check="fingerprint"`` (default) the same array
objects with the same sampled bytes, ``"hash"`` every byte, ``"identity"`` the objects only;
anything else is looked up by content and folded if new. ``"refuse"`` raises
``RuntimeConstantsChanged`` instead of using other feeds than the first. ``refold()`` forces a
new fold, ``invalidate()`` drops every set. With ``cache_dir`` the folded tensors are stored on
disk, each entry authenticated on read as the fold of these feeds by this fold model
(``onnxfold.runtime.fold_store``), so a new process skips the fold; the directory is used only
if ``onnxfold.io.cache_dirs`` trusts it. Feeds of more than 1 MiB used only by the fold are not
kept after it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.analysis.expansion import refuse_onnxruntime_inlining
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.errors import InputError, OnnxfoldError, one_line
from onnxfold.fold.policy import static_nbytes
from onnxfold.host import address_space, heap, interruptible
from onnxfold.host.memory_limits import memory_left
from onnxfold.host.terminal import printable
from onnxfold.io import load_model
from onnxfold.io.cache_dirs import trusted_cache_dir
from onnxfold.io.feeds import runtime_constant
from onnxfold.io.mapped import MappedTensor, drop_resident_pages
from onnxfold.io.reader import model_from_proto
from onnxfold.io.tempfiles import scratch_directory
from onnxfold.pipeline.optimizer import optimize
from onnxfold.pipeline.options import FoldOptions
from onnxfold.runtime import custom_ops, fold_store
from onnxfold.runtime.adapters import AdapterFiles, AdapterSource
from onnxfold.runtime.backends import get_backend
from onnxfold.runtime.entry_session import BoundEntry, EntryModel
from onnxfold.runtime.feed_check import CHECKS, FeedWatch, content_key
from onnxfold.runtime.folded_sets import DEFAULT_SETS, FoldedSet, FoldedSets
from onnxfold.runtime.split import optimize_and_split, weights_as_inputs

# how onnxruntime and IREE say an allocation failed
_WAIT_SLICE = 0.1  # seconds: a thread waiting for a set in the making wakes this often
_OUT_OF_MEMORY = re.compile(r"Failed to allocate memory|bad_alloc|RESOURCE_EXHAUSTED|"
                            r"out of memory", re.IGNORECASE)


@dataclass(frozen=True)
class NodeArg:
    """An input or output description, like onnxruntime's ``NodeArg``."""

    name: str
    type: str
    shape: list


def _node_args(values: Iterable[ir.Value]) -> list[NodeArg]:
    out = []
    for v in values:
        dtype = v.dtype.name.lower() if v.dtype is not None else "undefined"
        dtype = {"float": "float", "double": "double"}.get(dtype, dtype)
        shape = [d if isinstance(d, int) else (d.value if hasattr(d, "value") else None)
                 for d in (v.shape or [])]
        assert v.name is not None  # graph inputs and outputs are named
        out.append(NodeArg(v.name, f"tensor({dtype})", shape))
    return out


def _finite(constants: Mapping[str, np.ndarray]) -> bool:
    """Whether every floating value of ``constants`` is finite (a float64 sum: no mask of
    the arrays' size, and no float32 sum of finite values reaches infinity)."""
    return all(array.dtype.kind != "f" or np.isfinite(array.sum(dtype=np.float64))
               for array in constants.values())


class RuntimeConstantsChanged(OnnxfoldError):
    """Raised with ``check="refuse"`` when runtime-constant feeds differ from the folded ones."""


@dataclass(frozen=True)
class _Adapter:
    """The adapter later calls take their runtime constants from: its arrays and their content
    key, read and replaced together (a set folded from one adapter's arrays is never kept
    under another's key)."""

    arrays: Mapping[str, np.ndarray]
    key: str


@dataclass(frozen=True)
class _Active:
    """The set the last call ran and what its feeds were."""

    folded: FoldedSet
    watch: FeedWatch


class Session:
    """A drop-in for ``onnxruntime.InferenceSession`` that folds runtime constants once.

    ``custom_op_libraries``: shared libraries of custom ops loaded into the entry session (a
    ``sess_options`` cannot carry them: it is copied setting by setting). ``adapter``: the
    runtime-constant feeds as an ``.onnx_adapter`` file or a mapping of arrays (the runtime
    constants default to its names). ``max_sets`` and ``max_bytes``: the folded sets kept.
    ``catalogue``: the rules and op facts of the fold, the split and the backend (None: the
    installed rules, ``load_catalogue()``).
    """

    def __init__(self, model, runtime_constants: Sequence[str] = (), *, backend: str = "ort",
                 providers: Sequence[str] | None = None, sess_options=None,
                 check: str = "fingerprint", cache_dir: str | os.PathLike | None = None,
                 fold_compile_time: bool = True, backend_options: dict | None = None,
                 options: FoldOptions | None = None,
                 custom_op_libraries: Sequence[str | os.PathLike] = (),
                 adapter: AdapterSource | None = None, max_sets: int = DEFAULT_SETS,
                 max_bytes: int | None = None, catalogue: Catalogue | None = None) -> None:
        if check not in CHECKS:
            raise InputError(f"check must be one of {', '.join(CHECKS)}")
        if max_sets < 1:
            raise InputError(f"max_sets={max_sets}: at least one folded set is kept")
        self.custom_op_libraries = custom_ops.checked_libraries(custom_op_libraries)
        self._adapter_files = AdapterFiles()
        self._adapter: _Adapter | None = None
        if adapter is not None:
            self._adapter = _Adapter(*self._adapter_files.feeds(adapter))
        if not runtime_constants and self._adapter is not None:
            runtime_constants = sorted(self._adapter.arrays)
        label = "model" if isinstance(model, onnx.ModelProto | ir.Model) else os.fspath(model)
        if isinstance(model, onnx.ModelProto):
            model = model_from_proto(model)
        elif not isinstance(model, ir.Model):
            model = load_model(model)
        refuse_onnxruntime_inlining(model, label)  # each run would load it in onnxruntime
        self._inputs = _node_args(model.graph.inputs)
        self._outputs = _node_args(model.graph.outputs)
        self._output_names = [o.name for o in self._outputs]
        catalogue = load_catalogue() if catalogue is None else catalogue
        source = model.clone()  # the graph before the merge (its tensors shared, not copied)
        self.parts = optimize_and_split(model, runtime_constants, catalogue, options,
                                        "fold" if fold_compile_time else "keep",
                                        file_weights=True)
        # the model unmerged, for feeds the merge would not compute as the model does
        self._unmerged_source = source if self.parts.low_rank.merged else None
        self._unmerged_model: EntryModel | None = None
        self._unmerged_inputs = frozenset(cast(str, v.name) for v in source.graph.inputs)
        self._options, self._catalogue = options, catalogue
        self.runtime_constants = list(self.parts.manifest["runtime_constants"])
        self._constant_names = frozenset(self.runtime_constants)
        self._probe: object = self.runtime_constants[0] if self.runtime_constants else object()
        self.providers = list(providers or ["CPUExecutionProvider"])
        self.sess_options = sess_options
        self.check = check
        self.cache_dir = self._trusted(cache_dir)
        self.backend = get_backend(backend, catalogue, **(backend_options or {}))
        self._prepare(backend)
        self._tmp = scratch_directory("onnxfold-session-")  # the command line's own files
        self._removal = weakref.finalize(self, shutil.rmtree, self._tmp, True)
        graph = self.parts.entry.graph
        # bound as initializers: the fold's results, and runtime constants entry reads directly
        bound = set(self.parts.fold_outputs) | set(self.runtime_constants)
        bound_values = {cast(str, v.name): v for v in graph.inputs if v.name in bound}
        self._passthrough = [n for n in bound_values if n not in self.parts.fold_outputs]
        self._entry_inputs = frozenset(cast(str, v.name) for v in graph.inputs) - \
            set(bound_values)
        self._entry = EntryModel(self.parts.entry, bound_values,
                                 os.path.join(self._tmp, "entry.onnx"), self.providers,
                                 sess_options, self.custom_op_libraries, self._passthrough)
        self._lock = threading.Lock()  # bookkeeping only: no fold, no wait under it
        # the set in the making: its maker's mark, set when the set is done (_select)
        self._making: threading.Event | None = None
        self._sets = FoldedSets(max_sets, max_bytes)
        self._active: _Active | None = None
        self._set_bytes = 0  # what the last set made costs (the next one will cost as much)
        self._fold_model_key: str | None = None
        self.folds = 0  # sets made (by the backend or from the disk cache)
        self.fold_seconds = 0.0  # the last set's fold
        self.bind_seconds = 0.0  # the last set's entry session
        self.switches = 0  # calls that changed the active set
        self.switch_seconds = 0.0  # the last change, lookup (and fold) included
        self.cache_hits = 0
        self.cache_discarded = 0
        self.cache_events: list[str] = []

    def _trusted(self, cache_dir: str | os.PathLike | None) -> str | None:
        if cache_dir is None:
            return None
        given = os.path.abspath(cache_dir)  # the caller's current directory, now
        if os.path.lexists(given) and not os.path.isdir(given):
            raise InputError(f"{given}: the cache directory is not a directory")
        return trusted_cache_dir(given, "Session cache_dir")

    def _prepare(self, backend: str) -> None:
        self._fold_weights: dict[str, np.ndarray] = {}
        if not self.parts.fold_outputs:  # nothing to fold: entry is the whole model
            return
        model, self._fold_weights = weights_as_inputs(self.parts.runtime_fold)
        initializers = self.parts.runtime_fold.graph.initializers
        # the weights read from the model's file (checked again before each fold: a file
        # truncated since is an InputError, not a bus error in the fold's kernels)
        self._file_weights = [t for n in self._fold_weights
                              if isinstance(t := initializers[n].const_value, MappedTensor)]
        try:
            self.backend.prepare(model)
        except OnnxfoldError:
            raise
        except Exception as e:  # the backend's compiler or runtime refuses the fold model
            raise InputError(f"backend {backend} cannot prepare the runtime fold: "
                             f"{printable(one_line(e, 300))}") from None

    # -- onnxruntime's interface -----------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        return list(self.providers)

    def run(self, output_names, input_feed: Mapping[str, Any], run_options=None):
        """Run the model; a new set of runtime-constant feeds folds first (once)."""
        active = self._active
        # one lookup when the call feeds the constants (the first of them), else few (the
        # call's own feeds): an adapter's hundred names are not walked on every call
        given = self._probe in input_feed or not self._constant_names.isdisjoint(input_feed)
        if active is None or (given and not active.watch.same(input_feed)):
            active = self._select(input_feed)
        feeds = {n: input_feed[n] for n in active.folded.entry_inputs if n in input_feed} \
            if given else input_feed
        try:
            return active.folded.entry.run(output_names or self._output_names, feeds,
                                           run_options)
        except Exception as e:  # onnxruntime's errors for bad feeds (names, types, shapes)
            raise InputError(f"onnxruntime cannot run the model on these inputs: "
                             f"{printable(one_line(e, 300))}") from None

    # -- sets ------------------------------------------------------------------------------
    def set_adapter(self, adapter: AdapterSource | None) -> None:
        """Make ``adapter`` (an ``.onnx_adapter`` file or a mapping of arrays) the runtime
        constants of later calls that do not feed them; its set is made now if new. None: no
        adapter, later calls feed the runtime constants. From several threads, the last
        ``set_adapter`` to take the Session's lock wins."""
        if adapter is None:
            with self._lock:
                self._adapter = None
                self._active = None  # its set may be the adapter's: the next call chooses
            return
        chosen = _Adapter(*self._adapter_files.feeds(adapter))  # read and hashed unlocked
        before = self._adapter
        try:  # taken inside the try that gives it back
            with self._lock:
                before, self._adapter = self._adapter, chosen
            self._select({}, current=False)
        except BaseException:
            with self._lock:  # an adapter that cannot run (or was interrupted) is not taken
                if self._adapter is chosen:
                    self._adapter = before
            raise

    def _constants(self, input_feed: Mapping[str, Any], adapter: _Adapter | None
                   ) -> dict[str, np.ndarray]:
        """The runtime-constant arrays of a call: its own, else ``adapter``'s."""
        found: dict[str, np.ndarray] = {}
        missing = []
        for name in self.runtime_constants:
            if name in input_feed:
                found[name] = runtime_constant(name, input_feed[name])
            elif adapter is not None and name in adapter.arrays:
                found[name] = adapter.arrays[name]
            else:
                missing.append(name)
        if missing:
            held = "" if adapter is None else " (the adapter holds " + ", ".join(
                printable(n) for n in sorted(adapter.arrays)) + ")"
            raise InputError(f"feeds lack the runtime constants "
                             f"{', '.join(map(printable, missing))}{held}")
        return found

    def _select(self, input_feed: Mapping[str, Any], current: bool = True) -> _Active:
        """Make the set of this call's runtime constants the active one (folded if new).

        The Session's lock guards its bookkeeping only: a new set is folded and its entry
        session opened outside it, by one thread at a time (the sets' memory budget counts
        one set in the making); a thread that needs a set while another is made waits for
        that one (bounded by its fold's own limits: ``_fold``), then looks again.
        ``current``: a call whose feeds the active set already serves returns it.

        The mark that a set is in the making (``_making``) is set inside the ``try`` whose
        ``finally`` clears it, first thing: however the making ends (an error, an interrupt
        landing on any line), the mark goes, and a thread waiting for it also stops waiting
        once it is gone (:meth:`_wait_for`), woken or not
        (``tests/backends/test_session_interrupts.py``)."""
        started = time.perf_counter()
        while True:
            making: threading.Event | None = None
            try:
                with self._lock:
                    active = self._active
                    if current and active is not None and active.watch.same(input_feed):
                        return active  # another thread switched meanwhile
                    if not self._removal.alive:
                        raise InputError("the Session is closed")
                    step = self._choose(input_feed, started)
                    if isinstance(step, tuple):  # none kept, none in the making: this thread's
                        making = self._making = threading.Event()
                        self._make_room()
                if isinstance(step, _Active):
                    return step
                if isinstance(step, threading.Event):
                    self._wait_for(step)
                    continue
                return self._made(*step, started)
            finally:  # the release, one line (no point between its test and its store): the
                # mark and ``making`` are set by one statement, and only its maker clears it
                if making is not None: self._making = None  # noqa: E701 - see above
                if making is not None:
                    making.set()  # the threads waiting for it look again

    def _wait_for(self, making: threading.Event) -> None:
        """Wait until the set another thread marked as in the making (``making``) is done, or
        its mark is gone: short waits, a signal is taken between."""
        while not making.wait(_WAIT_SLICE) and self._making is making:
            pass

    def _choose(self, input_feed: Mapping[str, Any], started: float
                ) -> _Active | threading.Event | tuple[dict[str, np.ndarray], str, FeedWatch]:
        """Under the lock: the kept set of the call's constants made active; or, none kept,
        the event of the set another thread is making; or what to make (the constants, their
        key, the call's watch). The adapter, its arrays and its key are read once, together:
        the set made is kept under the key of what it was folded from."""
        adapter = self._adapter
        constants = self._constants(input_feed, adapter)
        given = {n: constants[n] for n in self.runtime_constants if n in input_feed}
        whole = adapter is not None and set(adapter.arrays) == self._constant_names
        key = adapter.key if not given and whole and adapter is not None else \
            content_key(constants)
        active = self._active
        if self.check == "refuse" and active is not None and key != active.folded.key:
            raise RuntimeConstantsChanged(
                "runtime-constant inputs changed since the fold (check='refuse')")
        watch = FeedWatch(given, self.check, key)
        folded = self._sets.get(key)
        if folded is not None:
            return self._activate(folded, watch, started)
        if self._making is not None:
            return self._making
        return constants, key, watch

    def _make_room(self) -> None:
        """Under the lock, for the set this thread is about to make: room in the kept sets'
        budget (the sets of one model are all alike), and the active set let go if that
        evicted it (before the new set is built)."""
        self._sets.room_for(self._set_bytes)
        if self._active is not None and self._active.folded.key not in self._sets:
            self._active = None

    def _activate(self, folded: FoldedSet, watch: FeedWatch, started: float) -> _Active:
        """Under the lock: ``folded`` the active set."""
        chosen = _Active(folded, watch)
        if self._active is None or self._active.folded is not folded:
            self.switches += 1
        self._active = chosen
        self.switch_seconds = time.perf_counter() - started
        return chosen

    def _made(self, constants: dict[str, np.ndarray], key: str, watch: FeedWatch,
              started: float) -> _Active:
        """Make the set of ``constants`` (outside the lock), keep it and make it active."""
        made = self._make(constants, key)
        with self._lock:
            if not self._removal.alive:
                raise InputError("the Session is closed")
            return self._activate(self._keep(made), watch, started)

    def _make(self, constants: dict[str, np.ndarray], key: str) -> FoldedSet:
        """Fold ``constants`` (or read them from the disk cache) and open their entry session
        (outside the lock; older sets were let out first, so the budget holds while it is
        built). Feeds with a value that is not finite run the model unmerged
        (:meth:`_unmerged`)."""
        unmerged = self._unmerged_source is not None
        if unmerged and not _finite(constants):
            return self._as_unmerged(key, constants)
        started = time.perf_counter()
        folded, from_disk = self._folded(constants, key)
        fold_seconds = time.perf_counter() - started
        if unmerged and not _finite(folded):  # W + s A B overflowed: (x A) B may not
            return self._as_unmerged(key, constants)
        folded.update({n: constants[n] for n in self._passthrough})
        drop_resident_pages()  # the file's weights the fold read: read again from the file
        started = time.perf_counter()
        entry = self._entry.open(folded)
        drop_resident_pages()  # the entry's own, written into its model once
        del folded, constants
        heap.trim()  # the fold's arrays, freed
        # onnxruntime holds the tensors it loaded once (packed, or mapped); handed over, the
        # arrays and the packed copies both; and each session the entry's own weights, twice
        held = entry.tensor_bytes if entry.owned else 2 * entry.tensor_bytes
        return FoldedSet(key, entry, held + 2 * self._entry_weight_bytes(),
                         0.0 if from_disk else fold_seconds, time.perf_counter() - started,
                         from_disk, self._entry_inputs)

    def _as_unmerged(self, key: str, constants: dict[str, np.ndarray]) -> FoldedSet:
        """The set of ``constants`` that runs the model unmerged (:meth:`_unmerged`)."""
        return FoldedSet(key, self._unmerged(constants), 0, 0.0, 0.0, False,
                         self._unmerged_inputs)

    def _keep(self, made: FoldedSet) -> FoldedSet:
        """Under the lock: keep ``made`` as the newest set (``room_for`` it first) and count
        it."""
        if made.nbytes:
            self._set_bytes = made.nbytes
        self._sets.room_for(made.nbytes)
        self._sets.add(made)
        self.folds += 1
        self.fold_seconds, self.bind_seconds = made.fold_seconds, made.bind_seconds
        return made

    def _folded(self, constants: dict[str, np.ndarray], key: str
                ) -> tuple[dict[str, np.ndarray], bool]:
        """The folded tensors of ``constants`` (content ``key``): from the disk cache or folded
        (and stored); whether from the cache."""
        purpose = self._purpose(key)
        folded, discarded = (None, None) if purpose is None else fold_store.load(
            cast(str, self.cache_dir), purpose, self.parts.runtime_fold.graph.outputs)
        if discarded is not None:
            self.cache_discarded += 1
            self.cache_events.append(discarded)
        if folded is not None:
            self.cache_hits += 1
            return folded, True
        folded = self._fold(constants)
        if purpose is not None:
            problem = fold_store.store(cast(str, self.cache_dir), purpose, folded)
            if problem is not None:
                self.cache_events.append(problem)
        return folded, False

    def _unmerged(self, constants: dict[str, np.ndarray]) -> BoundEntry:
        """An entry that runs the model with its low-rank branches as they are and
        ``constants`` fed with every call, as onnxruntime runs the model: a merged weight
        ``W + s A B`` computes NaN where the model, summing ``x W`` and ``s (x A) B``, computes
        an infinity (an adapter holding one: a diverged training). The model is folded at
        compile time once, when first needed, and shared by every such set."""
        if self._unmerged_model is None:
            source = cast(ir.Model, self._unmerged_source)
            options = self._options or FoldOptions()
            optimize(source, dataclasses.replace(options, disabled_rules={
                *options.disabled_rules, "merge_low_rank_branches"}), catalogue=self._catalogue)
            self._unmerged_model = EntryModel(source, {}, os.path.join(self._tmp, "unmerged.onnx"),
                                              self.providers, self.sess_options,
                                              self.custom_op_libraries)
        opened = self._unmerged_model.open({})
        run, fixed = opened.run, dict(constants)

        def with_constants(names, feeds, run_options=None):
            return run(names, {**feeds, **fixed}, run_options)

        return BoundEntry(opened.session, with_constants, [fixed], 0, owned=True)

    @property
    def entry_session(self) -> Any:
        """The active set's ``onnxruntime.InferenceSession`` (None before the first call)."""
        active = self._active
        return active.folded.entry.session if active is not None else None

    @property
    def entry_inputs(self) -> frozenset[str]:
        """The inputs the entry session takes (the model's, less the runtime constants)."""
        return self._entry_inputs

    @property
    def folded_keys(self) -> list[str]:
        """The content keys of the kept sets, least recently used first."""
        with self._lock:
            return self._sets.keys()

    @property
    def cached_bytes(self) -> int:
        """What the kept sets cost (as counted by ``onnxfold.runtime.folded_sets``)."""
        with self._lock:
            return self._sets.nbytes

    def _entry_weight_bytes(self) -> int:
        return sum(v.const_value.nbytes for v in self.parts.entry.graph.initializers.values()
                   if v.const_value is not None and not getattr(v.const_value,
                                                                "is_placeholder", False))

    def _fold(self, constants: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The backend's fold of ``constants``, stopped by a signal or the inference time
        limit (``onnxfold.host.interruptible``: a backend that runs onnxruntime stops between
        its kernels, another is left to end in the background), and weighed against the
        memory this process may still use: refused before it runs when the fold's outputs of
        static shape do not fit, run with the address space bounded by what is left
        (``onnxfold.host.address_space``) so that what outgrows it fails to allocate instead
        of the process being killed."""
        if not self.parts.fold_outputs:
            return {}
        for tensor in self._file_weights:
            tensor.numpy()  # its file still holds it (one fstat)
        feeds = {**{n: constants[n] for n in self.parts.fold_inputs}, **self._fold_weights}
        room = memory_left()
        need = sum(n for v in self.parts.runtime_fold.graph.outputs
                   if (n := static_nbytes(v)) is not None)
        if room is not None and need > room:
            raise InputError(f"the runtime fold makes {need >> 20} MiB of tensors and "
                             f"{room >> 20} MiB are left under the memory limit; run it where "
                             "more memory is available")
        try:
            return dict(interruptible.run(
                lambda _options: self.backend.run(feeds), what="folding the runtime constants",
                around=None if room is None else lambda: address_space.bounded(room)))
        except OnnxfoldError:
            raise
        except Exception as e:  # the backend's runtime rejects the feeds, or an allocation
            if isinstance(e, MemoryError) or _OUT_OF_MEMORY.search(str(e)):
                raise InputError(f"folding the runtime constants ran out of memory (about "
                                 f"{(room or 0) >> 20} MiB were left under the memory limit)"
                                 ) from None
            raise InputError(f"folding the runtime constants failed: "
                             f"{printable(one_line(e, 300))}") from None

    def _purpose(self, key: str) -> fold_store.Purpose | None:
        """What the disk cache's entry for the feeds of content ``key`` is for: this fold
        model (its bytes, weights included) run by this backend, and these feeds."""
        if self.cache_dir is None:
            return None
        if self._fold_model_key is None:  # the weights read from the file are references
            digest = hashlib.sha256(f"{self.backend.name}\0".encode())  # in the proto: their
            digest.update(ir.to_proto(self.parts.runtime_fold).SerializeToString())  # bytes too
            digest.update(content_key(self._fold_weights).encode())
            self._fold_model_key = digest.hexdigest()
        return fold_store.Purpose(self._fold_model_key, key)

    # -- control -----------------------------------------------------------------------------
    def refold(self, input_feed: Mapping[str, Any]) -> None:
        """Fold again now from ``input_feed``'s runtime constants (their kept set is dropped)."""
        with self._lock:
            key = content_key(self._constants(input_feed, self._adapter))
            self._sets.drop(key)
            self._active = None  # explicit: even check="refuse" takes the new feeds
        self._select(input_feed, current=False)

    def invalidate(self) -> None:
        """Forget every folded set; the next ``run`` folds again."""
        with self._lock:
            self._active = None
            self._sets.drop()

    def close(self) -> None:
        """Drop every folded set and remove the Session's temporary directory (also done when
        the Session is collected, or at the interpreter's exit); a later ``run`` is an error."""
        with self._lock:
            self._active = None
            self._sets.drop()
            self._removal()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
