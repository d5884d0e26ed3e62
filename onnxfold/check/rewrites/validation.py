"""Validate every rewrite of an optimization: what it put in computes what it replaced.

The run that folded the model recorded each rewrite as two small graphs (``rewrite.log``): the
*before* window, the nodes that computed the values it replaced, and the *after* window, the
nodes that compute their replacements, both reading *leaves* that the original model computes
(or constants). Here the original's values of those leaves are computed on each of the check's
input sets (every binding of the dims the reference ran: real inputs, never values no input
could give), both windows run in onnxruntime on them (graph optimizations off), and each
replaced value is compared with its replacement: bit for bit where every op of both windows
computes bitwise (data movement, integer arithmetic, IEEE ``+ - * /``), else within the
tolerance of its dtype (``check.tolerance``, as outputs are: a merged MatMul sums in another
order) plus :data:`MAGNITUDE_ULPS` ulps of the output's largest magnitude. A replacement
that onnxruntime cannot run where the window it replaced runs differs.

This samples: a rewrite is validated on the check's input sets, not proved for every input.
What cannot be validated says why (a rewrite in a subgraph, a window too large), counted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.check.inputs.input_reads import InputReads
from onnxfold.check.inputs.sizes import Sizes
from onnxfold.check.judging import exact_ops
from onnxfold.check.judging.bits import same_bits
from onnxfold.check.judging.tolerance import allowed
from onnxfold.check.judging.tolerance import for_dtype as tolerance_for
from onnxfold.check.judging.verdicts import (
    BITWISE,
    DIFFERS,
    SHOWN_NAMES,
    UNVALIDATED,
    WITHIN,
    Verdict,
    Verdicts,
)
from onnxfold.check.rewrites.file_windows import FileRewrites, asks_bits, holds_subgraphs
from onnxfold.check.rewrites.float64_windows import in_float64, rounding_only
from onnxfold.check.rewrites.same_roundings import Roundings
from onnxfold.check.running import memory
from onnxfold.check.running.cones import Cones, WeightStore
from onnxfold.check.running.models import ort_message, read_constant
from onnxfold.check.running.runner import MachineShort, RunFailed, TimedOut, Wanted, run_nodes
from onnxfold.rewrite.log import RewriteLog, RewriteRecord, Window

BATCH_RECORDS = 128  # records run in one session
COMPARED_AT_ONCE = 1 << 22  # elements of a window's outputs compared at a time (32 MiB float64)
LEAVES_SHARE = 4  # the leaves one run computes may take at most this share of the memory left
# where a window sums (a Conv with a factor folded into its weight), an element near zero that
# is the difference of large terms carries their rounding: a replacement may differ there by a
# few ulps of the output's largest magnitude (3-25 measured on PP-OCRv5's fused Convs), far
# below what a wrong rewrite moves
MAGNITUDE_ULPS = 64
CONSTANT_NODE_ELEMENTS = 1024  # a window's constants this small are Constant nodes, not fed


def rewrite_verdict(rule: str, node: str, state: str, reason: str = "") -> Verdict:
    """A verdict on the rewrite of ``rule`` put in at ``node``."""
    return Verdict(f"{rule} at {node}", state, reason, rule=rule, node=node)


@dataclass
class RewriteValidation(Verdicts):
    """Every rewrite of the run, validated on ``sets`` input sets."""

    rewrites: list[Verdict] = field(default_factory=list)
    sets: int = 0
    in_file: bool = False  # the windows found in a file (file_windows), not a run's record
    # a file's values under the original's names compared where they are read instead (in_files)
    opened: list[str] = field(default_factory=list)

    @property
    def verdicts(self) -> list[Verdict]:  # type: ignore[override]
        return self.rewrites

    @property
    def failing(self) -> list[str]:
        return [f"rewrite {r.name}" for r in self.rewrites if r.state == DIFFERS]

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(ok=self.ok, counts={s: self.count(s) for s in STATES},
                    reasons=self.reasons(UNVALIDATED))
        return data

    def summary(self) -> str:
        """One line, then one per rewrite that differs and per reason of the unvalidated."""
        if self.in_file and not self.rewrites:
            return "rewrite validation: the file holds no node the original does not hold"
        validated = self.count(BITWISE) + self.count(WITHIN)
        fewer = self.fewer_sets
        parts = [f"{validated} validated ({self.count(BITWISE)} bitwise"
                 + (f"; {len(fewer)} at fewer input sets: the machine ran short at the others"
                    if fewer else "") + ")"]
        if self.count(UNVALIDATED):
            parts.append(f"{self.count(UNVALIDATED)} not validated")
        parts.append(f"{self.count(DIFFERS)} differ")
        count = len(self.rewrites)
        if self.in_file:
            what = (f"{count} window{'s' if count != 1 else ''} of the file that the original "
                    "does not hold, each run against the original's nodes it replaced")
        else:
            what = f"{count} rewrites, each replaced window run against its replacement"
        lines = [f"rewrite validation: {what} on {self.sets} input set"
                 f"{'s' if self.sets != 1 else ''}: {', '.join(parts)}"]
        lines += [f"  DIFFERS {r.name}: {r.reason}" for r in self.rewrites if r.state == DIFFERS]
        if self.opened:
            more = f" and {len(self.opened) - SHOWN_NAMES} more" if len(self.opened) > \
                SHOWN_NAMES else ""
            lines.append(f"  compared where they are read ({len(self.opened)}): values the file "
                         "holds in another form under the original's name "
                         f"({', '.join(self.opened[:SHOWN_NAMES])}{more})")
        for sets, names in self._unrun_by_sets().items():
            more = f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else ""
            lines.append(f"  not run at input set {', '.join(map(str, sets))} ({len(names)}): "
                         f"the machine ran short ({', '.join(names[:SHOWN_NAMES])}{more})")
        return "\n".join(lines + self.reason_lines(UNVALIDATED))

    def counted(self) -> str:
        """How many were validated, as a verdict line says it."""
        unvalidated, fewer = self.count(UNVALIDATED), len(self.fewer_sets)
        what = "rewritten windows" if self.in_file else "rewrites"
        return (f"{len(self.rewrites) - unvalidated} {what} validated on the input sets"
                + (f" ({fewer} at fewer: the machine ran short at the others)" if fewer else "")
                + (f", {unvalidated} not validated" if unvalidated else ""))

    @property
    def all_validated(self) -> bool:
        """Every rewrite validated, at every input set."""
        return self.ok and not self.count(UNVALIDATED) and not self.fewer_sets

    @property
    def fewer_sets(self) -> list[Verdict]:
        """The rewrites validated at some input sets only (the machine ran short at others)."""
        return [r for r in self.rewrites if r.unrun and r.state in (BITWISE, WITHIN)]

    def _unrun_by_sets(self) -> dict[tuple[int, ...], list[str]]:
        grouped: dict[tuple[int, ...], list[str]] = {}
        for r in self.fewer_sets:
            grouped.setdefault(tuple(r.unrun), []).append(r.name)
        return grouped


STATES = (BITWISE, WITHIN, DIFFERS, UNVALIDATED)
CANNOT_ALONE = "the original cannot compute a value it reads alone"


def validate_rewrites(log: RewriteLog | FileRewrites, cones: Cones,
                      inputs: Sequence[Mapping[str, np.ndarray]],
                      progress: Callable[[str], None] | None = None,
                      rounding: frozenset[str] = frozenset(),
                      known: Sequence[Mapping[str, object]] = (),
                      weights: WeightStore | None = None) -> RewriteValidation:
    """Validate every rewrite of ``log`` (a run's record, or the windows the check found in a
    file: ``file_windows``, which say themselves where bits are asked) on each of ``inputs``
    (the check's input sets),
    the leaves computed by the original's ``cones`` (see module); ``rounding``: the rules
    declared to round differently (``PatternRule.rounds_differently``), not asked for bits
    where the check's own reading of a rewrite's windows finds other roundings
    (``same_roundings``: only there; a window found in a file is asked for bits where that
    reading finds the same); ``known``: per input set, values of the original already
    computed (a check in windows keeps the leaves its chain computed: a cone of a deep leaf is
    most of the model, more than a window may hold); ``weights``: the original's weights the
    check's fold verification kept (read again only where not kept).

    A rewrite whose windows read no input's values computes the same on every input set
    with the same input shapes (one that reads no input at all, on every input set): it runs
    once per distinct shapes (once), not once per set."""
    tell = progress or (lambda text: None)
    result = RewriteValidation(sets=len(inputs), in_file=isinstance(log, FileRewrites))
    runnable: list[RewriteRecord] = []
    verdicts: dict[int, Verdict] = {}
    for record in log.records:
        if record.unresolved or record.before is None or record.after is None:
            verdicts[id(record)] = rewrite_verdict(record.rule, record.node, UNVALIDATED,
                                                  record.unresolved or "not recorded whole")
        else:
            runnable.append(record)
            verdicts[id(record)] = rewrite_verdict(record.rule, record.node, BITWISE)
    reads = _Dependence(cones)
    sizes = Sizes(cones.model)
    ran: dict[int, set[object]] = {id(r): set() for r in runnable}  # what each ran at
    judged: set[int] = set()  # the records judged at some input set
    roundings = Roundings(cones.model.graph)  # (its reading of the original kept for all)
    references = {record.before.originals[name] for record in runnable
                  if record.before is not None for name in _passed_through(record.before)}
    room = memory.room()  # the weights the leaves' cones read, read once for every set
    own = WeightStore(None if room is None else room // LEAVES_SHARE)
    with cones.holding(weights if weights is not None else own):
        # the smallest sets first: a rewrite the machine cannot run at a large set is validated
        # at the smaller ones, and not tried again at larger ones
        for done, k in enumerate(sorted(range(len(inputs)), key=lambda j: sum(
                np.size(a) for a in inputs[j].values()))):
            feeds = inputs[k]
            tell(f"validating rewrites {done + 1}/{len(inputs)}")
            shapes = tuple(sorted((name, np.shape(a)) for name, a in feeds.items()))
            todo = []
            for record in runnable:
                verdict = verdicts[id(record)]
                key = reads.key(record, k, shapes)
                if key in ran[id(record)] or verdict.state not in (BITWISE, WITHIN):
                    continue
                if verdict.unrun:  # short at a smaller set: this one would not fit either
                    verdict.unrun.append(k + 1)
                    continue
                ran[id(record)].add(key)
                todo.append(record)
            leaves = _Leaves(cones, feeds, sizes, known[k] if k < len(known) else {},
                             references)
            windows = _Windows(leaves, cones, rounding, roundings, log.opsets, verdicts, k,
                               judged, isinstance(log, FileRewrites))
            batches = _batches(todo, leaves)
            for done_k, batch in enumerate(batches):
                windows.judge(batch)
                leaves.keep_only(read_by([r for b in batches[done_k + 1:] for r in b]))
    for verdict in verdicts.values():
        verdict.unrun.sort()
    result.rewrites = [verdicts[id(r)] for r in log.records]
    return result


def _batches(records: list[RewriteRecord], leaves: _Leaves) -> list[list[RewriteRecord]]:
    """``records`` in batches of at most :data:`BATCH_RECORDS`, whose leaves together fit
    a quarter of the memory left (a record whose leaves alone do not is a batch of its own):
    the leaves of a batch are held while it runs, and 68 merged projections of a 7B decoder
    read 3.4 GB of transposed weights."""
    room = memory.room()
    budget = None if room is None else room // LEAVES_SHARE
    batches: list[list[RewriteRecord]] = [[]]
    held: set[str] = set()
    total = 0
    for record in records:
        new = read_by([record]) - held
        size = sum(leaves.bytes.get(name, 0) for name in new) + _constant_bytes(record)
        if batches[-1] and (len(batches[-1]) >= BATCH_RECORDS or
                            (budget is not None and total + size > budget)):
            batches.append([])
            held, total = set(), 0
            new = read_by([record])
            size = sum(leaves.bytes.get(name, 0) for name in new) + _constant_bytes(record)
        batches[-1].append(record)
        held |= new
        total += size
    return [batch for batch in batches if batch]


def _constant_bytes(record: RewriteRecord) -> int:
    """The bytes of the constants ``record``'s windows read (a file's merged weight)."""
    return sum(int(getattr(a, "nbytes", 0)) for w in (record.before, record.after)
               if w is not None for a in w.constants.values())


def read_by(records: Sequence[RewriteRecord]) -> set[str]:
    """The original's values the windows of ``records`` read."""
    return {o for r in records for w in (r.before, r.after) if w is not None
            for o in w.originals.values()}


class _Dependence:
    """How a record's windows depend on the check's input sets: on the inputs' values (run on
    every set), on their shapes only (run once per distinct shapes), or on neither (once),
    by the check's own reading of the original (``inputs.input_reads``)."""

    def __init__(self, cones: Cones) -> None:
        self.cones = cones
        self.reads = InputReads(cones.model, sorted(cones.fed, key=lambda v: str(v.name)))

    def key(self, record: RewriteRecord, k: int, shapes: object) -> object:
        """What identifies input set ``k`` (its input ``shapes``) for ``record``."""
        values = shaped = False
        for name in read_by([record]):
            value = self.cones.values.get(name)
            if value is None:  # a value the check cannot place: taken as reading everything
                return k
            found = self.reads.of(value)
            values |= bool(found.values)
            shaped |= bool(found.shapes)
        return k if values else shapes if shaped else None


def _passed_through(window: Window) -> list[str]:
    """The outputs of ``window`` that no node of it computes: values of the original it hands
    on as they are (a window found in a file whose original side is the original's own value,
    ``file_windows``): such a leaf is itself what the other window is judged against."""
    made = {name for node in window.nodes for name in node.output}
    return [name for name in window.outputs if name not in made and name in window.originals]


class _Leaves:
    """The arrays of the leaves the windows read, on one input set: graph inputs as fed,
    initializers as the original holds them, other values as its cones compute them (each
    computed once; None where it cannot be, ``why`` says why): at the check's level, but
    where one is among ``references`` (values a window hands on as they are, the reference
    another window is judged against) all at ``disable``, the original's nodes as they are
    (onnxruntime's own rewrites of the original, a dropped ``+ 0.0``, must not become the
    reference). Leaves are computed in runs whose values fit in a quarter of the memory left
    (sized by ``sizes`` at the set's input shapes); one that alone does not fit is not
    computed."""

    def __init__(self, cones: Cones, feeds: Mapping[str, np.ndarray], sizes: Sizes,
                 known: Mapping[str, object], references: Collection[str] = ()) -> None:
        self.cones, self.feeds, self.known = cones, feeds, known
        self.references = frozenset(references)
        self.arrays: dict[str, np.ndarray | None] = {}
        self.why: dict[str, str] = {}  # a leaf not computed -> why
        self.bytes = sizes.at({n: np.shape(a) for n, a in feeds.items()})

    def constant(self, name: str) -> bool:
        """Whether leaf ``name`` is an initializer of the original no input set feeds."""
        value = self.cones.values.get(name)
        return name not in self.feeds and value is not None and value.producer() is None \
            and value.const_value is not None

    def keep_only(self, names: set[str]) -> None:
        """Forget the arrays of every leaf but ``names`` (what later windows still read)."""
        for name in [n for n in self.arrays if n not in names]:
            del self.arrays[name]

    def prepare(self, names: set[str]) -> None:
        """Compute the original's values of ``names`` not known yet, in as few runs as the
        memory left allows."""
        missing = [n for n in names if n not in self.arrays]
        computed: list[ir.Value] = []
        for name in missing:
            value = self.cones.values.get(name)
            if name in self.feeds:
                self.arrays[name] = np.asarray(self.feeds[name])
            elif name in self.known:  # the original's value, computed by the check's chain
                self.arrays[name] = self.known[name]  # type: ignore[assignment]
            elif self.constant(name):
                assert value is not None and value.const_value is not None
                self.arrays[name] = read_constant(value.const_value)
            elif value is None or value.producer() is None or \
                    self.cones.outside(value) is not None:
                self.arrays[name] = None
                self.why[name] = CANNOT_ALONE
            else:
                computed.append(value)
        # a reference among them: all at disable, in the same runs as the others (which
        # values a run hands back decides where onnxruntime rounds a float16 model's values:
        # leaves computed apart from the reference they are judged with differed from it)
        optimized = not any(str(v.name) in self.references for v in computed)
        for chunk in self._chunks(computed):
            found = self._computed(chunk, optimized)
            for value in chunk:
                self.arrays[str(value.name)] = found.get(value)

    def _chunks(self, values: list[ir.Value]) -> list[list[ir.Value]]:
        """``values`` in runs whose sized bytes fit a quarter of the memory left, in the
        original's order; one that alone does not fit is left out (said in ``why``)."""
        room = memory.room()
        budget = None if room is None else room // LEAVES_SHARE
        chunks: list[list[ir.Value]] = [[]]
        held = 0
        for value in sorted(values, key=self.cones.position):
            size = self.bytes.get(str(value.name), 0)
            if budget is not None and size > budget:
                self.arrays[str(value.name)] = None
                self.why[str(value.name)] = (f"it reads a value of {size >> 20} MiB, more than "
                                             "the memory left lets the check hold")
                continue
            if budget is not None and chunks[-1] and held + size > budget:
                chunks.append([])
                held = 0
            chunks[-1].append(value)
            held += size
        return [chunk for chunk in chunks if chunk]

    def _computed(self, values: list[ir.Value], optimized: bool
                  ) -> dict[ir.Value, np.ndarray]:
        """The original's arrays of ``values`` (at the check's level where ``optimized``):
        in one run, else (onnxruntime failed) each half on its own, so that one that cannot
        be computed spoils no other; where the machine ran short, none (a half is no likelier
        to fit: each runs the cone again)."""
        if not values:
            return {}
        try:
            return self.cones.run(values, self.feeds, exact=False, optimized=optimized)
        except MachineShort as e:
            self.why.update({str(v.name): f"the machine ran short computing it ({e})"
                             for v in values})
            return {}
        except RunFailed:
            if len(values) == 1:
                self.why[str(values[0].name)] = CANNOT_ALONE
                return {}
        half = len(values) // 2
        return {**self._computed(values[:half], optimized),
                **self._computed(values[half:], optimized)}


class _Windows:
    """Runs records' windows on one input set (``k``) and judges them into ``verdicts``."""

    def __init__(self, leaves: _Leaves, cones: Cones, rounding: frozenset[str],
                 roundings: Roundings, opsets: dict[str, int] | None,
                 verdicts: dict[int, Verdict], k: int, judged: set[int],
                 in_file: bool = False) -> None:
        self.leaves, self.verdicts, self.k = leaves, verdicts, k
        self.in_file = in_file  # the windows found in a file: bits asked by file_windows
        self.judged = judged  # the records judged at some input set so far
        self.rounding = rounding
        self.roundings = roundings  # the check's own reading of the windows' roundings
        self.opsets = opsets or dict(cones.model.opset_imports)
        self.ir_version, self.libraries = cones.model.ir_version, cones.libraries

    def judge(self, batch: list[RewriteRecord]) -> None:
        """Run the windows of ``batch`` and judge them (a failing batch is run record by
        record)."""
        if not batch:
            return
        leaves = self.leaves
        leaves.prepare({o for r in batch for w in (r.before, r.after) if w is not None
                        for o in w.originals.values()})
        runnable = []
        for record in batch:
            assert record.before is not None and record.after is not None
            unknown = [o for w in (record.before, record.after) for o in w.originals.values()
                       if leaves.arrays.get(o) is None]
            if unknown:
                why = leaves.why.get(unknown[0], CANNOT_ALONE)
                if why == CANNOT_ALONE or not self._unrun(record):
                    verdict = self.verdicts[id(record)]
                    verdict.state, verdict.reason = UNVALIDATED, why
            else:
                runnable.append(record)
        if not runnable:
            return
        try:
            results = self._pairs(runnable)
        except (RunFailed, MachineShort) as e:
            if len(runnable) > 1:
                for record in runnable:
                    self.judge([record])
            elif isinstance(e, MachineShort):
                self._short(runnable[0], e)
            else:
                self._alone(runnable[0])
            return
        for record, pairs in zip(runnable, results):
            exact = asks_bits(record) or self.roundings.same(record) if self.in_file else \
                _exact(record, self.rounding, self.roundings)
            verdict = self.verdicts[id(record)]
            _judge(record, pairs, exact, verdict, self.k)
            self.judged.add(id(record))
            if verdict.state == DIFFERS and not exact:
                self._arbitrate(record, pairs, verdict)

    def _arbitrate(self, record: RewriteRecord, pairs: list[tuple[np.ndarray, np.ndarray]],
                   verdict: Verdict) -> None:
        """A window that differs beyond its tolerance, judged against its float64 value
        (``float64_windows``): within where the replacement is off by rounding alone."""
        assert record.before is not None
        exact = in_float64(record.before, self.leaves.arrays, self.opsets)
        if exact is None or len(exact) != len(pairs) or not all(
                rounding_only(np.asarray(old), np.asarray(new), truth)
                for (old, new), truth in zip(pairs, exact)):
            return
        verdict.state, verdict.reason = WITHIN, ""
        verdict.max_abs = max(verdict.max_abs, max(
            float(np.nanmax(np.abs(np.asarray(old, np.float64) - np.asarray(new, np.float64)),
                            initial=0.0)) for old, new in pairs))

    def _alone(self, record: RewriteRecord) -> None:
        """A record whose session failed: its replaced window alone, to tell whose failure
        it is (the replacement's, where the window it replaced runs)."""
        verdict = self.verdicts[id(record)]
        assert record.before is not None and record.after is not None
        try:
            self._run([(record.before, "b")])
        except MachineShort as e:
            self._short(record, e)
            return
        except RunFailed as e:
            verdict.state = UNVALIDATED
            verdict.reason = f"onnxruntime cannot run the window it replaced alone: " \
                f"{str(e)[:120]}"
            return
        try:
            self._run([(record.after, "a")])
        except MachineShort as e:
            self._short(record, e)
        except RunFailed as e:
            if self.in_file and holds_subgraphs(record):
                # a file's window holding subgraphs, its inputs' shapes given: onnx's inference
                # of a branch not taken may fail where the whole model's symbolic dims pass
                verdict.state = UNVALIDATED
                verdict.reason = f"onnxruntime cannot run this window of the file alone: " \
                    f"{ort_message(e)[:120]}"
                return
            verdict.state = DIFFERS
            verdict.reason = (f"onnxruntime cannot run the replacement where the window it "
                              f"replaced runs: {ort_message(e)[:120]}")

    def _unrun(self, record: RewriteRecord) -> bool:
        """Whether ``record``, which the machine could not run at this input set, was judged
        at a smaller one: then it stays validated there, this set noted as not run."""
        if id(record) not in self.judged:
            return False
        self.verdicts[id(record)].unrun.append(self.k + 1)
        return True

    def _short(self, record: RewriteRecord, error: MachineShort) -> None:
        """A record the machine could not run: not validated where nothing is known of it,
        else validated at the sets it ran (:meth:`_unrun`)."""
        if self._unrun(record):
            return
        verdict = self.verdicts[id(record)]
        verdict.state = UNVALIDATED
        verdict.reason = f"its windows could not run ({error})" if isinstance(error, TimedOut) \
            else f"the machine ran short running its windows ({error})"

    def _pairs(self, records: list[RewriteRecord]
               ) -> list[list[tuple[np.ndarray, np.ndarray]]]:
        """Both windows of each record in one session: per record, (replaced, replacement)
        per output pair."""
        arrays = self._run([(w, f"r{i}/{side}") for i, r in enumerate(records)
                            for w, side in ((r.before, "b"), (r.after, "a")) if w is not None])
        return [list(zip(arrays[f"r{i}/b"], arrays[f"r{i}/a"])) for i in range(len(records))]

    def _run(self, windows: list[tuple[Window, str]]) -> dict[str, list[np.ndarray]]:
        """Run ``windows`` (each under its prefix) in one session; each prefix's outputs."""
        nodes: list[onnx.NodeProto] = []
        inputs: dict[str, np.ndarray] = {}
        wanted: list[Wanted] = []
        outputs: dict[str, list[str]] = {}
        for window, prefix in windows:
            internal = {o for n in window.nodes for o in n.output if o}
            nodes.extend(_renamed(node, internal, prefix, window) for node in window.nodes)
            for read, original in window.originals.items():
                array = self.leaves.arrays[original]
                assert array is not None
                _held(f"{prefix}:{read}", array, self.leaves.constant(original), nodes, inputs)
            for name, held in window.constants.items():  # a tensor: read as it runs
                _held(f"{prefix}:{name}", held if isinstance(held, np.ndarray) else
                      read_constant(held), True, nodes, inputs)
            names = []
            for j, out in enumerate(window.outputs):
                source = f"{prefix}/{out}" if out in internal else f"{prefix}:{out}"
                target = f"{prefix}#out{j}"
                nodes.append(onnx.helper.make_node("Identity", [source], [target]))
                names.append(target)
                wanted.append(Wanted(target))
            outputs[prefix] = names
        arrays = run_nodes(nodes, wanted, inputs=inputs, opsets=self.opsets,
                           ir_version=self.ir_version, libraries=self.libraries)
        by_name = {w.name: a for w, a in zip(wanted, arrays)}
        return {prefix: [by_name[n] for n in names] for prefix, names in outputs.items()}


def _held(name: str, array: np.ndarray, constant: bool, nodes: list[onnx.NodeProto],
          inputs: dict[str, np.ndarray]) -> None:
    """A window's leaf ``name``: a Constant node where it is a small ``constant`` (known when
    the session is made, as in the model: a Resize's empty ``scales`` fed as an input reads
    as given beside its ``sizes``), else fed."""
    if constant and array.size <= CONSTANT_NODE_ELEMENTS and array.dtype.kind != "O":
        nodes.insert(0, onnx.helper.make_node("Constant", [], [name],
                                              value=onnx.numpy_helper.from_array(array)))
    else:
        inputs[name] = array


def _renamed(node: onnx.NodeProto, internal: set[str], prefix: str, window: Window
             ) -> onnx.NodeProto:
    """``node`` reading and writing the names of one window: its own values under
    ``prefix/``, its leaves under ``prefix:`` (so windows sharing names stay apart)."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)

    def name(old: str) -> str:
        if not old:
            return old
        return f"{prefix}/{old}" if old in internal else f"{prefix}:{old}"

    copy.input[:] = [name(i) for i in copy.input]
    copy.output[:] = [name(o) for o in copy.output]
    copy.name = f"{prefix}/{node.name}" if node.name else ""  # unnamed stay unnamed
    leaves = set(window.originals) | set(window.constants)
    for attr in copy.attribute:
        for graph in [attr.g] if attr.HasField("g") else list(attr.graphs):
            _rename_outer(graph, lambda n: name(n) if n in internal or n in leaves else n)
    return copy


def _rename_outer(graph: onnx.GraphProto, name: Callable[[str], str]) -> None:
    """The names a subgraph reads from outside it, renamed (its own are left alone)."""
    own = {i.name for i in graph.input} | {t.name for t in graph.initializer} | \
        {o for n in graph.node for o in n.output}
    for node in graph.node:
        node.input[:] = [i if i in own else name(i) for i in node.input]
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                _rename_outer(sub, lambda n: n if n in own else name(n))
    for out in graph.output:
        if out.name not in own:
            out.name = name(out.name)


def _exact(record: RewriteRecord, rounding: frozenset[str], roundings: Roundings) -> bool:
    """Whether the replacement must give the replaced window's bits: every op of both windows
    computes bitwise what onnxruntime does (the check's own ``exact_ops``), and either its
    rule keeps the float arithmetic as it was or the check's own reading finds it does
    (``same_roundings``): a rule's word that it rounds differently is taken only where the
    windows show it, so a rule that says so wrongly does not loosen the check on its own
    rewrites."""
    return all(exact_ops.exact(n) for w in (record.before, record.after) if w is not None
               for n in w.nodes) and (record.rule not in rounding or roundings.same(record))


def _judge(record: RewriteRecord, pairs: list[tuple[np.ndarray, np.ndarray]], exact: bool,
           verdict: Verdict, k: int) -> None:
    """Fold input set ``k``'s (replaced, replacement) pairs into ``verdict`` (``exact``:
    bits asked for, :func:`_exact`)."""
    outputs = record.before.outputs if record.before is not None else []
    for name, (old, new) in zip(outputs, pairs):
        old, new = np.asarray(old), np.asarray(new)
        if old.dtype.kind != "O" and same_bits(old, new):  # (the most: nothing to weigh)
            continue
        problem = _mismatch(old, new, exact)
        if problem is None:
            if old.dtype.kind in "fc" and old.shape == new.shape:
                verdict.state = WITHIN
                verdict.max_abs = max(verdict.max_abs, _largest_difference(old, new))
            continue
        verdict.state, verdict.output = DIFFERS, name
        verdict.reason = f"{name} on input set {k + 1}: {problem}"
        return


def _chunks_of(*arrays: np.ndarray) -> Iterator[tuple[np.ndarray, ...]]:
    """The arrays (of one size) flattened, ``COMPARED_AT_ONCE`` elements at a time: a
    window's outputs at a large input set are hundreds of MB, and their float64 copies twice
    that, outside any bound of onnxruntime's (a 1 GiB container was killed comparing them)."""
    flat = [np.ravel(a) for a in arrays]
    for start in range(0, flat[0].size, COMPARED_AT_ONCE):
        yield tuple(f[start:start + COMPARED_AT_ONCE] for f in flat)


def _largest_difference(old: np.ndarray, new: np.ndarray) -> float:
    """The largest finite ``|old - new|``."""
    largest = 0.0
    with np.errstate(all="ignore"):
        for a, b in _chunks_of(old, new):
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            finite = diff[np.isfinite(diff)]
            largest = max(largest, float(finite.max()) if finite.size else 0.0)
    return largest


def _mismatch(old: np.ndarray, new: np.ndarray, exact: bool) -> str | None:
    """How ``new`` differs from ``old`` (None: it does not, as far as ``exact`` asks),
    compared a slice at a time."""
    if old.dtype != new.dtype or old.shape != new.shape:
        return (f"the replacement computes {new.dtype}{list(new.shape)} where the window it "
                f"replaced computes {old.dtype}{list(old.shape)}")
    if old.dtype.kind in "OSU" or not (old.dtype.kind in "fc" or old.dtype.name == "bfloat16"):
        differ = sum(int(np.count_nonzero(a != b)) for a, b in _chunks_of(old, new))
        return f"{differ} of {old.size} elements differ" if differ else None
    if exact:
        differ = 0
        with np.errstate(all="ignore"):
            for a, b in _chunks_of(old, new):
                x, y = a.astype(np.float64), b.astype(np.float64)
                differ += int(np.count_nonzero(~((x == y) | (np.isnan(x) & np.isnan(y)))))
        return f"{differ} of {old.size} elements differ from its bits (every op of " \
            "both windows is bitwise)" if differ else None
    # the dtype's tolerance without the summed terms' magnitude (a window that cancels is
    # run again in float64 instead: float64_windows)
    tolerance = dataclasses.replace(tolerance_for(old.dtype, None, None), summed_units=None)
    magnitude = 0.0
    with np.errstate(all="ignore"):
        for a, b in _chunks_of(old, new):
            y = a.astype(np.float64)  # the window it replaced computes the reference
            finite = np.isfinite(y) & np.isfinite(b.astype(np.float64))
            magnitude = max(magnitude, float(np.abs(y[finite]).max()) if finite.any() else 0.0)
        slack = MAGNITUDE_ULPS * float(np.spacing(np.asarray(magnitude, old.dtype)))
        differ = 0
        for a, b in _chunks_of(old, new):
            y, x = a.astype(np.float64), b.astype(np.float64)
            same = (x == y) | (np.isnan(x) & np.isnan(y))
            finite = np.isfinite(x) & np.isfinite(y)
            close = same | (finite & (np.abs(x - y) <= allowed(
                tolerance, y, old.dtype.name, finite, magnitude) + slack))
            differ += int(np.count_nonzero(~close))
    return (f"{differ} of {old.size} elements outside {tolerance.describe()} + "
            f"{MAGNITUDE_ULPS} ulps of max |x|") if differ else None
