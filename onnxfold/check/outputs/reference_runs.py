"""Run the two models of a check on their input sets: the original (the reference) first, then
the optimized one, each within the memory this process may still use.

The reference decides which bindings of the guessed dims are valid inputs: a binding it cannot
run is dropped (and said in a note), and when no binding of a group runs, larger (or, when it
ran out of memory, smaller) groups are tried
(:class:`~onnxfold.check.inputs.feeds.FeedPlan`). Every binding of the group is run by the
reference at least once, also the ones no compared input set uses, so that the fold
verification re-derives folds at each of them; in stages (each binding a whole run over the
weights read again), where no fold reads the dynamic dims, only the compared sets run.

Random inputs are weighed before they are allocated: a binding whose inputs alone would take
more than a quarter of the memory left is treated as one the reference ran out of memory on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from onnxfold.check.inputs.dim_relations import Bound
from onnxfold.check.inputs.feeds import FeedPlan
from onnxfold.check.outputs.doomed_bindings import Doomed, FailedNodes
from onnxfold.check.running import memory as memory_room
from onnxfold.check.running.runner import MachineShort, Runner, run_model
from onnxfold.errors import InputError, clipped, one_line
from onnxfold.io.checked import InputChanged

SAID = 300  # characters of onnxruntime's error kept before the list of guesses
VALUE_SHARE = 4  # one value a binding makes may take at most this share of the memory left
FEED_SHARE = 4  # one input set's random inputs may take at most this share of the memory left


@dataclass
class Reference:
    """What model A computed: the feeds and outputs of the input sets compared, the input
    shapes of every binding A ran (the fold verification re-derives at each), and notes."""

    feeds: list[dict[str, np.ndarray]]
    outputs: list[list]
    shapes: list[dict[str, tuple[int, ...]]]
    notes: list[str]
    single: list[str] = field(default_factory=list)  # guessed dims that took one value


def run_reference(sess: Runner, label: str, outputs: list[str], feeder: FeedPlan, seed: int, n: int,
                  run_options, progress: Callable[[str], None] = lambda text: None,
                  overrides: Mapping[str, np.ndarray] | None = None,
                  failures: FailedNodes | None = None,
                  every_binding: bool = True) -> Reference:
    """Model A's feeds and outputs for ``n`` input sets (set ``k`` at binding ``k % len``),
    and the shapes of every binding it ran (see module). ``overrides``: the defaults of the
    initializers a caller may override (IR 4 on: also graph inputs), fed from the second
    input set on, each moved a little (:func:`overridden`). ``failures``: the nodes
    onnxruntime failed at, over A (a binding that shape inference shows failing at one of
    them is not run: ``check.doomed_bindings``). ``every_binding=False``: no fold is
    re-derived at the bindings (``verification.reads_dynamic_dims``), so only the ``n``
    compared sets run, the plan's bindings are cut to those and none is added where a guessed
    dim took one value in the group (a whole run each, for nothing; that dim is still said).
    Raises InputError when no binding runs."""
    failed: dict[str, str] = {}  # the guessed dims of each binding dropped -> why
    moved: Callable[[], list[Bound] | None] | None = None  # where the groups went, if they did
    widened = False
    while True:
        bindings = list(feeder.bindings)
        feeds_kept: list[dict[str, np.ndarray]] = []
        results: list[list] = []
        shapes: list[dict[str, tuple[int, ...]]] = []
        bound = bindings[0]
        made: list[tuple[int, Bound, dict[str, np.ndarray]]] = []
        try:
            for k in range(max(n, len(bindings)) if every_binding else n):
                bound = bindings[k % len(bindings)]
                weigh(feeder, bound, label)
                feeds = _feeds(feeder, seed, k, overrides, failures, label)
                if feeder.plan.sizes and failures is not None:  # images' sides guessed
                    forecast(failures.sizes.largest({n: a.shape for n, a in feeds.items()}), label)
                made.append((k, bound, feeds))
                if not sess.in_stages:  # one set at a time: the next one's feeds made after
                    _ran_one(made.pop(), sess, label, outputs, run_options, feeder, n,
                             bindings, progress, (feeds_kept, results, shapes))
                del feeds
            if sess.in_stages:  # a chain of stages runs every set at once
                progress("original, every input set")
                sess.run_all([feeds for _, _, feeds in made])
            for one in made:
                bound = one[1]
                _ran_one(one, sess, label, outputs, run_options, feeder, n, bindings,
                         progress, (feeds_kept, results, shapes))
        except (InputError, MachineShort) as e:
            if not feeder.guessed or isinstance(e, InputChanged):  # (an input file changed:
                raise  # no other binding reads another)
            memory = isinstance(e, MachineShort)  # the machine's: smaller inputs may fit
            failed[feeder.guessed_values(bound)] = f"the machine ran short: {_short(e)}" \
                if memory else one_line(e).removeprefix(f"{label}: ").split("; dims guessed")[0]
            if failures is not None and isinstance(e, InputError):
                failures.record(e, feeder.guessed_values(bound))
            del feeds_kept, results
            feeder.bindings = [b for b in bindings if b is not bound]
            if not feeder.bindings:
                moved = feeder.next_smaller if memory else feeder.next_larger
                feeder.bindings = _next_group(feeder, moved, e, bound)
            continue
        if not every_binding:
            feeder.bindings = bindings[:n]  # those run
        elif _single_valued(feeder, bindings) and not widened:
            # a guessed dim took one value only: the first binding with its batch doubled,
            # and with its lengths doubled (they run where the graph's relations were not
            # read), and after groups that failed, the next group's bindings too
            widened = True
            more = feeder.variants() + ((moved() or []) if moved is not None else [])
            if more:
                feeder.bindings = bindings + more
                continue
        single = _single_valued(feeder, bindings)  # (of the group, run or not)
        return Reference(feeds_kept, results, shapes, _notes(feeder, failed, single), single)


def _notes(feeder: FeedPlan, failed: dict[str, str], single: list[str]) -> list[str]:
    """What the reference says of its bindings: those it could not run (and why), the plan's
    own notes, a length alignment it found, the guessed dims that took one value only."""
    notes = [f"the reference could not run the guessed dims {dims[0]} ({clipped(why, 160)})"
             if len(dims) == 1 else
             f"the reference could not run {len(dims)} bindings of the guessed dims, the first "
             f"{dims[0]} ({clipped(why, 160)})"
             for dims, why in merged(failed)] + feeder.plan.notes
    if feeder.multiple:
        notes.append(f"the reference ran where every guessed length is a multiple of "
                     f"{feeder.multiple} (no other guess ran)")
    if single:
        notes.append(f"dims that took one value only: {', '.join(single)} (a fold that "
                     "baked one of them is not seen by a difference; --dim sets another)")
    return notes


def _ran_one(one: tuple[int, Bound, dict[str, np.ndarray]], sess: Runner, label: str,
             outputs: list[str], run_options, feeder: FeedPlan, n: int, bindings: list[Bound],
             progress: Callable[[str], None],
             kept: tuple[list[dict[str, np.ndarray]], list[list],
                         list[dict[str, tuple[int, ...]]]]) -> None:
    """Input set ``one`` (its index, binding and feeds) run by model A, and kept: its feeds
    and outputs where it is one of the ``n`` compared, its shapes where it is the first set
    of its binding."""
    k, _, feeds = one
    progress(f"original {k + 1}/{n}" if k < n else "original, another binding")
    ran = run_model(sess, label, outputs, feeds, run_options, feeder.guesses())
    feeds_kept, results, shapes = kept
    if k < n:
        feeds_kept.append(feeds)
        results.append(ran)
    if k < len(bindings):
        shapes.append({name: arr.shape for name, arr in feeds.items()})


def _next_group(feeder: FeedPlan, moved: Callable[[], list[Bound] | None],
                error: InputError | MachineShort, bound: Bound) -> list[Bound]:
    """The group to try after every binding of the last failed with ``error`` (at
    ``bound``): ``moved``'s next, else lengths aligned to a number onnxruntime's error names
    or to a block size; raises what says none runs where there is none."""
    group = moved() or (None if isinstance(error, MachineShort) else feeder.next_aligned(
        str(error).split("; dims guessed")[0]))  # onnxruntime's words only
    if group is not None:
        return group
    if isinstance(error, MachineShort):
        raise MachineShort(f"{error} at every binding tried, the smallest "
                           f"{feeder.guessed_values(bound)}") from None
    said = str(error.seen if isinstance(error, Doomed) else error).split("; dims guessed")[0]
    raise InputError(clipped(said, SAID) + feeder.guesses()) from None  # every guess, whole


def _feeds(feeder: FeedPlan, seed: int, k: int, overrides: Mapping[str, np.ndarray] | None,
           failures: FailedNodes | None, label: str) -> dict[str, np.ndarray]:
    """Input set ``k``: the plan's feeds, the overridable initializers moved from the second
    set on; InputError where shape inference shows it failing at a node onnxruntime already
    failed at (``failures``)."""
    feeds = feeder.feeds(seed + k, k)
    if k and overrides:  # (a default --inputs gave stays as given)
        feeds.update({name: arr for name, arr in overridden(overrides, seed + k).items()
                      if name not in feeder.given})
    if failures is not None:
        failures.check({name: arr.shape for name, arr in feeds.items()}, label)
    return feeds


def overridden(defaults: Mapping[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """Each float default moved by about 1% of its size (seeded): a caller's override that
    a second model ignored (it baked the default) shows as a difference, while the values stay
    where the model means them to be (a scale, an epsilon). Other dtypes may be shapes or
    indices: they are not overridden."""
    rng = np.random.default_rng(seed)
    return {name: np.asarray(array * (1 + 0.01 * rng.standard_normal(array.shape)),
                             dtype=array.dtype)
            for name, array in defaults.items() if array.dtype.kind == "f"}


def _single_valued(feeder: FeedPlan, bindings: list[Bound]) -> list[str]:
    """The guessed dims that every binding the reference ran gives the same value."""
    shown = [feeder.shown(b) for b in bindings]
    return [f"{name}={shown[0][name]}" for name in feeder.guessed
            if name in shown[0] and len({b.get(name) for b in shown}) == 1]


def merged(failed: Mapping[str, str]) -> list[tuple[list[str], str]]:
    """Failed bindings that failed for the same reason (up to the sizes it quotes) as one
    entry: the bindings, and the first one's reason (a note counts them and names the
    first: 21 guesses of a model that takes none were a line of 2,366 characters)."""
    by_reason: dict[str, tuple[str, list[str]]] = {}
    for dims, why in failed.items():
        by_reason.setdefault(re.sub(r"\d+", "#", why), (why, []))[1].append(dims)
    return [(dims, why) for why, dims in by_reason.values()]


def weigh(feeder: FeedPlan, bound: Bound, label: str) -> None:
    """MachineShort (so that smaller bindings are tried) when ``bound``'s random inputs
    alone would take more than 1/:data:`FEED_SHARE` of what this process may still
    allocate."""
    room = memory_room.room()
    need = feeder.feed_bytes(bound)
    if room is not None and need > room // FEED_SHARE:
        mib = 2**20
        raise MachineShort(f"{label}: out of memory: the random inputs of one input set "
                           f"would take {need / mib:,.0f} MiB, and {room / mib:,.0f} MiB are "
                           "left under the memory limit")


def forecast(largest: int, label: str) -> None:
    """MachineShort (so that smaller images are tried) when a binding makes a value larger
    than 1/:data:`VALUE_SHARE` of what this process may still allocate: a VAE decoder's
    latent at 224 x 224 makes 1.6 GB activations, and computed them for minutes before an
    allocation failed."""
    room = memory_room.room()
    if room is not None and largest > room // VALUE_SHARE:
        mib = 2**20
        raise MachineShort(f"{label}: out of memory: a value of {largest / mib:,.0f} MiB at "
                           f"these dims (onnx's shape inference), and {room / mib:,.0f} MiB "
                           "are left under the memory limit")


def _short(error: Exception) -> str:
    """What a MachineShort says ran out, without the label it starts with."""
    return str(error).split(": ", 1)[-1]


@dataclass
class Optimized:
    """What model B computed on the reference's input sets: per set its outputs (None where
    it ran out of memory), or the one-line failure where B does not run what A ran."""

    outputs: list[list | None]
    failure: str = ""
    short: str = ""  # what the machine ran short of, where it did
    # what B was fed, per set (what it takes of each reference set): the very mappings a
    # chain of stages ran, whose values at the cuts ``Chain.results`` then gives without
    # running the chain again
    feeds: list[dict] = field(default_factory=list)


def run_optimized(sess: Runner, label: str, outputs: list[str], reference: Reference, run_options,
                  progress: Callable[[str], None] = lambda text: None) -> Optimized:
    """Model B on each of the reference's input sets. Running out of memory where A ran is
    not a wrong model (B runs after A in the same process): that set is marked None, and the
    caller compares the others or tries smaller inputs; so is any other shortage of the
    machine. Any other failure is B's."""
    got: list[list | None] = []
    short = ""
    # what B takes: its inputs and the initializers it lets a caller override (a default A
    # was fed, by --inputs, that B fixed is not B's to take: it computes with what it fixed)
    takes = {arg.name for arg in [*sess.get_inputs(), *sess.get_overridable_initializers()]}
    sets = [{name: arr for name, arr in feeds.items() if name in takes}
            for feeds in reference.feeds]
    sess.run_all(sets)  # (a chain of stages runs every set at once)
    for k, feeds in enumerate(sets):
        progress(f"optimized {k + 1}/{len(reference.feeds)}")
        try:
            got.append(run_model(sess, label, outputs, feeds, run_options))
        except MachineShort as e:
            got.append(None)
            short = str(e)
        except InputError as e:
            return Optimized(got, one_line(e).removesuffix(" (see --dim, --int-range, --inputs)"),
                             feeds=sets)
    return Optimized(got, short=short, feeds=sets)
