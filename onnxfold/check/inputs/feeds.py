"""What a check feeds a model: given arrays, else seeded random data shaped and ranged so that
the original model runs at sizes it was made for.

Symbolic dims follow the relations the graph states (:mod:`onnxfold.check.inputs.dim_relations`),
integer ids stay below the size of the table they index, masks are ones, positions count on
from the past; every guess is listed so that a message can name the flag that sets it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.check.inputs import dim_relations
from onnxfold.check.inputs.dim_relations import Bound, is_named
from onnxfold.check.running.models import ModelRef, graph_of, label_of, numpy_type
from onnxfold.check.running.runner import Runner, open_session
from onnxfold.errors import InputError
from onnxfold.io.feeds import load_arrays
from onnxfold.ir.graph import PASSES_ELEMENTS, is_default_op, is_static_dim
from onnxfold.numbers import flag_value

TOKEN_ID_HIGH = 1000
# the random inputs of one larger guess of dims stay below this (a 1024-long guess of two dims
# of a wide input would otherwise allocate gigabytes)
LARGER_INPUT_BYTES = 256 * 2**20
# the multiples of lengths tried where no guess runs, after the numbers the error names (up to
# ALIGNED_MAX): the blocks models split a length into
ALIGNMENTS = (8, 16, 32, 64)
ALIGNED_MAX = 512
MASK_SOURCE = "ones, rows after the first with as many positions off as their index (mask)"
# a boolean of one element (optimum's use_cache_branch, an If's condition): each value in turn,
# so that two input sets or more run both branches it chooses
FLAG_SOURCE = "true, then false, in turn (a flag)"
@dataclass
class InputInfo:
    """What was fed to an input (so a report says which values the verdict holds for)."""

    name: str
    dtype: str
    shape: list[int]  # in the first input set
    source: str
    shapes: list[list[int]] = field(default_factory=list)  # in each binding of the dims


def _text(item: str | bytes) -> str:
    """A string input's element: onnxruntime takes str; ``S`` arrays hold UTF-8 bytes."""
    return item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)


def shape_text(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def parse_dims(items: Sequence[str]) -> dict[str, int]:
    """``["batch=2", ...]`` (the CLI's ``--dim``) to ``{"batch": 2}``."""
    dims = {}
    for item in items:
        name, eq, value = item.rpartition("=")
        if not eq or not name:
            raise InputError(f"--dim {item}: expected NAME=VALUE with VALUE a positive integer")
        dims[name] = flag_value(f"--dim {name}", value, minimum=1)
    return dims


def parse_int_ranges(items: Sequence[str]) -> dict[str, tuple[int, int]]:
    """``["input_ids=0:30522"]`` (the CLI's ``--int-range``) to ``{"input_ids": (0, 30522)}``."""
    ranges = {}
    for item in items:
        name, eq, span = item.rpartition("=")
        lo, colon, hi = span.partition(":")
        if not eq or not colon or not name:
            raise InputError(f"--int-range {item}: expected NAME=LO:HI with integers LO < HI")
        bounds = (flag_value(f"--int-range {name}", lo), flag_value(f"--int-range {name}", hi))
        if bounds[0] >= bounds[1]:
            raise InputError(f"--int-range {item}: expected NAME=LO:HI with integers LO < HI")
        ranges[name] = bounds
    return ranges


# Ops that carry an input's values on unchanged (input index -> they reach the output): ids
# reach their embedding table through reshapes, slices, concatenations and casts.
_CARRIES_VALUES = {**dict.fromkeys(PASSES_ELEMENTS, (0,)),
                   "Slice": (0,), "Expand": (0,), "Tile": (0,), "Transpose": (0,),
                   "Gather": (0,), "GatherElements": (0,), "GatherND": (0,), "Pad": (0,),
                   "Concat": None, "Where": (1, 2), "Max": None, "Min": None}
# Arithmetic an exporter wraps ids in, where every other operand comes from constants and the
# ids themselves: tf2onnx's negative-index fix-up ``ids + n * (ids < 0)`` keeps the ids the
# table's rows index; ``Clip``, ``Mod`` and ``Abs`` keep them in its range.
_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Mod", "Clip", "Abs", "Neg"})
_OWN_DEPTH = 6  # how far back an operand is followed to show it is the ids' own


def _id_table_sizes(model: ir.Model) -> dict[str, int]:
    """Per graph input, the fewest rows of a table it indexes (its valid id range): a Gather
    it reaches as indices, through ops that carry its values (:data:`_CARRIES_VALUES`), whose
    table has a static length on the gathered axis (a constant, or one computed from constants
    such as a DequantizeLinear or a Cast of a weight, its length known from shape inference)."""
    sizes: dict[str, int] = {}
    for value in model.graph.inputs:
        frontier, seen = [value], set()
        while frontier:
            current = frontier.pop()
            seen.add(current)
            for use in current.uses():
                node = use.node
                carried = _CARRIES_VALUES.get(node.op_type, ()) if is_default_op(node) else ()
                if is_default_op(node) and node.op_type in _ARITHMETIC and all(
                        v is None or v is current or _own(v, value, _OWN_DEPTH)
                        for v in node.inputs):
                    carried = None
                if is_default_op(node, "Gather") and use.idx == 1:
                    dim = _rows(node)
                    if dim is not None:
                        assert value.name is not None  # a graph input read from a proto
                        sizes[value.name] = min(dim, sizes.get(value.name, dim))
                elif (carried is None or use.idx in carried) and node.outputs and \
                        node.outputs[0] not in seen:
                    frontier.append(node.outputs[0])
    return sizes


def _own(value: ir.Value, source: ir.Value, depth: int) -> bool:
    """Whether ``value`` is computed from constants and ``source`` alone (within ``depth``
    producers): an operand of the ids' own, not another input's."""
    if value is source or value.const_value is not None:
        return True
    producer = value.producer()
    if producer is None or depth == 0:
        return False
    return all(v is None or _own(v, source, depth - 1) for v in producer.inputs)


def _rows(gather: ir.Node) -> int | None:
    """The length of a Gather's table on the axis it gathers, where it is static."""
    table = gather.inputs[0]
    if table is None:
        return None
    shape = table.const_value.shape if table.const_value is not None else table.shape
    if shape is None or len(shape) == 0:
        return None
    axis = gather.attributes.get_int("axis", 0)
    if not -len(shape) <= axis < len(shape):
        return None
    dim = shape[axis]
    return dim if isinstance(dim, int) and dim > 0 else None


def anonymous_dims(specs: Sequence[tuple[str, Sequence[object]]]) -> dict[tuple[str, int], str]:
    """A name for every dim the model leaves anonymous (unnamed, ``?``, or a negative size
    such as Paddle's -1: onnxruntime accepts any size there), by input and axis: ``x[0]``.
    Each is its own dim, guessed, varied and reported as a named one is (a name the model
    uses already is not taken)."""
    taken = {d for _, shape in specs for d in shape if is_named(d)}
    names: dict[tuple[str, int], str] = {}
    for input_name, shape in specs:
        for axis, d in enumerate(shape):
            if is_static_dim(d) or is_named(d):
                continue
            name = f"{input_name}[{axis}]"
            while name in taken:
                name += "'"
            taken.add(name)
            names[(input_name, axis)] = name
    return names


class FeedPlan:
    """Builds feeds for the graph inputs of model A: supplied arrays, else seeded random data.
    ``pinned``: anonymous dims fixed by input and axis (the second model's static ones,
    ``onnxfold.check.inputs.pinned``); ``light``: ``graph`` serialized without its large
    weights, where the caller has it (``dim_relations.plan``); ``analysed``: ``graph``'s
    values already carry their inferred types (a model a run just optimized: the plan
    infers nothing again).

    Every anonymous dim gets a name of its own (:func:`anonymous_dims`) and is bound like a
    named one: on axis 0 or inside a shape (a recurrent state's batch) it is a batch, ending a
    shape a length, an image's height and width its side."""

    def __init__(self, session: Runner, label: str, graph: ir.Model,
                 given: Mapping[str, np.ndarray], dims: Mapping[str, int],
                 int_ranges: Mapping[str, tuple[int, int]],
                 pinned: Mapping[str, Mapping[int, int]] | None = None,
                 light: onnx.ModelProto | None = None, analysed: bool = False) -> None:
        pinned = pinned or {}
        declared = [(i.name, numpy_type(i.type, label, i.name), list(i.shape))
                    for i in session.get_inputs()]
        self.anonymous = anonymous_dims([(name, shape) for name, _, shape in declared])
        fixed = {self.anonymous[(name, axis)]: value for name, axes in pinned.items()
                 for axis, value in axes.items() if (name, axis) in self.anonymous}
        self.specs = [(name, dtype, [pinned.get(name, {}).get(axis, d)
                                     if (name, axis) not in self.anonymous else
                                     self.anonymous[(name, axis)]
                                     for axis, d in enumerate(shape)])
                      for name, dtype, shape in declared]
        names = {name: dtype for name, dtype, _ in self.specs}
        # initializers a caller may override (IR >= 4: also graph inputs): --inputs may give
        # them, as a caller feeds them; the rest of the plan leaves them at their defaults
        self.defaults = {str(arg.name): numpy_type(arg.type, label, arg.name) for arg in
                         session.get_overridable_initializers()}
        for name in given:
            if name not in names and name not in self.defaults:
                raise InputError(f"--inputs: {name} is not an input of {label} "
                                 f"(inputs: {', '.join(names)})")
        for name, (lo, hi) in int_ranges.items():
            if name not in names:
                raise InputError(f"--int-range {name}: not an input of {label} "
                                 f"(inputs: {', '.join(names)})")
            if names[name].kind not in "iu":
                raise InputError(f"--int-range {name}: the input is {names[name]}, not an "
                                 "integer")
            if lo >= hi:
                raise InputError(f"--int-range {name}={lo}:{hi}: LO must be below HI")
        self.given = {name: self._cast(name, {**self.defaults, **names}[name], arr)
                      for name, arr in given.items()}
        self.int_ranges = dict(int_ranges)
        bound = self._bind(dims, fixed, label)
        caches = dim_relations.attention_caches(graph)
        self.images = {name for name, dtype, shape in self.specs
                       if _is_image(dtype, shape) and name not in caches}
        self.plan = dim_relations.plan(
            graph, [shape for _, _, shape in self.specs], bound,
            sizes={d: dim_relations.IMAGE_SIZE for name, _, shape in self.specs
                   if name in self.images for d in shape[2:] if is_named(d)},
            held=_cache_lengths(self.specs, self.images) - set(self.anonymous.values()),
            anonymous=self.anonymous, batches=_inner(self.specs, self.anonymous, self.images),
            light=light,
            analysed=analysed)
        self.table_sizes = _id_table_sizes(graph)  # after the plan's shape inference
        # a binding model A cannot run is dropped; every binding tried is kept for messages
        self.bindings: list[Bound] = list(self.plan.bindings)
        self.tried: list[Bound] = list(self.plan.bindings)
        self.guessed = self.plan.guessed
        self.defaulted = self.plan.guessed
        self._larger = [list(g) for g in self.plan.larger]
        self._aligned: list[int] | None = None  # the multiples next_aligned tries, in order
        self.multiple = 0  # the multiple the lengths of the bindings run are aligned to
        self._smaller = [list(g) for g in self.plan.smaller]

    @property
    def dims(self) -> dict[str, int]:
        """The first binding's dims."""
        return self.bindings[0].dims

    def shown(self, bound: Bound) -> dict[str, int]:
        """``bound``'s dims as a report lists them."""
        return dict(bound.dims)

    def guesses(self) -> str:
        """Every value each guessed dim was tried at, and the flag that sets them (a
        message: each dim once, so that nothing is cut)."""
        if not self.guessed:
            return ""
        values = "; ".join(f"{name}=" + ",".join(dict.fromkeys(
            str(b.dims.get(name, 1)) for b in self.tried)) for name in self.guessed)
        return f"; dims guessed: {values} (--dim NAME=VALUE sets one the model runs at)"

    def next_aligned(self, error: str) -> list[Bound] | None:
        """Where no guess runs: the next group whose lengths are multiples of a number the
        error names (onnxruntime's "cannot reshape {3,1281} to {3,-1,24}") or of 8, 16, 32
        (a model that splits a length into blocks), each tried once (None: no more)."""
        if self._aligned is None:
            named = [int(n) for n in re.findall(r"\d+", error) if 2 <= int(n) <= ALIGNED_MAX]
            self._aligned = list(dict.fromkeys([*sorted(set(named)), *ALIGNMENTS]))
        while self._aligned:
            multiple = self._aligned.pop(0)
            group = [b for b in self.plan.aligned(multiple)
                     if self.feed_bytes(b) <= LARGER_INPUT_BYTES and
                     all(b.dims != seen.dims for seen in self.tried)]
            if group:
                self.tried.extend(group)
                self.multiple = multiple
                return group
        return None

    def guessed_values(self, bound: Bound) -> str:
        """``bound``'s values of the guessed dims, as ``name=value, ...``."""
        return ", ".join(f"{n}={bound.dims.get(n, 1)}" for n in self.guessed)

    def feed_bytes(self, bound: Bound) -> int:
        """The bytes of the random inputs ``bound`` needs (the given arrays are not counted:
        they exist already)."""
        return sum(int(np.prod(self._shape_in(shape, bound), dtype=np.int64)) *
                   element_bytes(dtype)
                   for name, dtype, shape in self.specs if name not in self.given)

    def next_larger(self) -> list[Bound] | None:
        """The next group of bindings at a larger size whose random inputs stay within
        :data:`LARGER_INPUT_BYTES` (None: no more)."""
        while self._larger:
            group = [b for b in self._larger.pop(0)
                     if self.feed_bytes(b) <= LARGER_INPUT_BYTES]
            if group:
                self.tried.extend(group)
                return group
        return None

    def variants(self) -> list[Bound]:
        """The first binding's batch doubled, and its lengths doubled
        (``DimPlan.variants``), where a guessed dim took one value only; they count as
        tried."""
        found = [b for b in self.plan.variants(self.bindings[0])
                 if all(b.dims != other.dims or b.profile != other.profile
                        for other in self.bindings)]
        self.tried.extend(found)
        return found

    @property
    def has_smaller(self) -> bool:
        """Whether :meth:`next_smaller` has a group left."""
        return bool(self._smaller)

    def next_smaller(self) -> list[Bound] | None:
        """After the reference ran out of memory: the next group with the images' guessed
        height and width smaller (112, 64, then 32; None: no more)."""
        if not self._smaller:
            return None
        group = self._smaller.pop(0)
        self.tried.extend(group)
        return group

    @staticmethod
    def _cast(name: str, dtype: np.dtype, arr) -> np.ndarray:
        arr = np.asarray(arr)
        if arr.dtype == dtype:
            return arr
        if dtype.kind == "O" and arr.dtype.kind in "US":  # an .npz holds strings as <U or S
            return np.vectorize(_text, otypes=[object])(arr) if arr.size else arr.astype(object)
        if dtype.kind == "O" or not np.can_cast(arr.dtype, dtype, casting="same_kind"):
            raise InputError(f"--inputs: {name} is {arr.dtype}, the model wants {dtype}")
        return arr.astype(dtype)

    def _bind(self, dims: Mapping[str, int], fixed: Mapping[str, int], label: str
              ) -> dict[str, int]:
        """The dims that ``dims`` (``--dim``; ``?=V`` sets every anonymous dim), ``fixed``
        (anonymous dims the second model fixes: they win) and the given arrays bind."""
        symbolic = {d for _, _, shape in self.specs for d in shape if is_named(d)}
        anonymous = set(self.anonymous.values())
        for name in dims:
            if name not in symbolic and not (name == "?" and anonymous):
                known = ", ".join(sorted(symbolic | ({"?"} if anonymous else set()))) or "none"
                raise InputError(f"--dim {name}: no input of {label} has a dimension of that "
                                 f"name (symbolic dimensions: {known})")
        bound = {name: value for name, value in dims.items() if name != "?"}
        if "?" in dims:
            bound.update({name: dims["?"] for name in anonymous if name not in bound})
        bound.update(fixed)
        for name, _, shape in self.specs:
            if name not in self.given:
                continue
            actual = self.given[name].shape
            if len(actual) != len(shape):
                raise InputError(f"--inputs: {name} has shape {shape_text(actual)}, the model "
                                 f"wants rank {len(shape)}")
            for want, got in zip(shape, actual):
                if is_named(want) and bound.setdefault(want, got) != got:
                    raise InputError(f"--inputs: {name} has {want}={got} but {want} is "
                                     f"{bound[want]}")
        return bound

    def shape(self, shape: list, k: int = 0) -> tuple[int, ...]:
        """Input set ``k``'s shape for a declared ``shape`` (binding ``k % len(bindings)``)."""
        return self._shape_in(shape, self.bindings[k % len(self.bindings)])

    @staticmethod
    def _shape_in(shape: list, bound: Bound) -> tuple[int, ...]:
        """``shape`` with ``bound``'s dims (every dynamic dim is named: :func:`anonymous_dims`)."""
        return tuple(d if is_static_dim(d) else bound.dims.get(d, 1) for d in shape)

    def _int_source(self, name: str, dtype: np.dtype) -> tuple[str, tuple[int, int] | None]:
        """How an integer input is filled: a description and a [lo, hi) range (None: fixed)."""
        lower = name.lower()
        info = np.iinfo(dtype)
        if name in self.int_ranges:
            lo, hi = self.int_ranges[name]
            span = (max(lo, info.min), min(hi, info.max + 1))
            return f"random [{span[0]}, {span[1]}) (--int-range)", span
        if "mask" in lower:
            return MASK_SOURCE, None
        if "token_type" in lower or "segment" in lower:
            rows = self.table_sizes.get(name)
            if rows is not None and rows > 1:  # every type the table holds
                return f"random [0, {rows}) (token types, size of the table they index)", \
                    (0, rows)
            return "zeros (token types; no table of theirs found)", None
        if "position" in lower:
            return "arange along the last axis, after the past the graph relates to it " \
                "(positions)", None
        high = min(TOKEN_ID_HIGH, info.max + 1)
        if name in self.table_sizes and self.table_sizes[name] < high:
            high = self.table_sizes[name]
            return f"random [0, {high}) (token ids, size of the table they index)", (0, high)
        return f"random [0, {high}) (token ids)", (0, high)

    def describe(self) -> list[InputInfo]:
        infos = []
        for name, dtype, shape in self.specs:
            if name in self.given:
                source = "from --inputs"
            elif dtype.kind in "iu":
                source = self._int_source(name, dtype)[0]
            elif "mask" in name.lower() and dtype.kind in "bf":
                source = MASK_SOURCE
            elif dtype.kind == "b" and all(d == 1 for d in shape):
                source = FLAG_SOURCE
            elif dtype.kind == "b":
                source = "random true/false"
            elif dtype.kind == "O":
                source = "random words (text)"
            else:
                source = "standard normal"
            shapes = [list(self.given[name].shape) if name in self.given else
                      list(self.shape(shape, k))
                      for k in range(len(self.bindings))]
            infos.append(InputInfo(name, dtype_name(dtype), shapes[0], source,
                                   [list(t) for t in dict.fromkeys(map(tuple, shapes))]))
        return infos

    def feeds(self, seed: int, k: int = 0) -> dict[str, np.ndarray]:
        """Input set ``k`` (seeded with ``seed``), shaped by binding ``k % len(bindings)``."""
        rng = np.random.default_rng(seed)
        bound = self.bindings[k % len(self.bindings)]
        feeds = {name: arr for name, arr in self.given.items() if name in self.defaults}
        for name, dtype, shape in self.specs:
            if name in self.given:
                feeds[name] = self.given[name]
                continue
            dims = self.shape(shape, k)
            lower = name.lower()
            if "mask" in lower and dtype.kind in "iubf":
                arr = self._mask(dims, dtype, shape)
            elif dtype.kind in "iu":
                _, span = self._int_source(name, dtype)
                if span is not None:
                    arr = rng.integers(span[0], span[1], dims, dtype=dtype)
                elif "position" in lower and dims:
                    start = self.plan.offset(shape[-1], bound.dims)
                    arr = np.broadcast_to(np.arange(start, start + dims[-1], dtype=dtype),
                                          dims).copy()
                else:
                    arr = np.zeros(dims, dtype)
            elif dtype.kind == "b" and all(d == 1 for d in shape):  # a flag: both values
                arr = np.full(dims, k % 2 == 0)
            elif dtype.kind == "b":
                arr = rng.integers(0, 2, dims).astype(bool)
            elif dtype.kind == "f":
                arr = rng.standard_normal(dims).astype(dtype)
            elif dtype.kind == "O":
                arr = _random_text(rng, dims)
            else:
                kind = f"{dtype} input"
                raise InputError(f"input {name} cannot be random: supply it with --inputs, a "
                                 f"{kind}")
            feeds[name] = arr
        return feeds

    def _mask(self, dims: tuple[int, ...], dtype: np.dtype, declared: list) -> np.ndarray:
        """A mask of ones in which row ``r`` of axis 0 has its first ``r`` positions of the
        last axis off (left padding) where the graph relates the mask's length to a sum (a
        decoder's past + sequence), else its last ``r`` (right padding); at least one
        position of each row stays on."""
        arr = np.ones(dims, dtype)
        if len(dims) < 2 or dims[-1] < 2:
            return arr
        length = declared[-1]
        form = self.plan.forms.get(length) if isinstance(length, str) else None
        left = form is not None and len([k for k in form if k]) > 1
        for row in range(1, dims[0]):
            off = min(row, dims[-1] - 1)
            arr[row, ..., :off] = 0 if left else 1
            if not left:
                arr[row, ..., dims[-1] - off:] = 0
        return arr


def _is_image(dtype: np.dtype, shape: list) -> bool:
    """A float ``[N, C, H, W]`` input with 1 to 4 channels and a dynamic width (an OCR line
    is 48 high and as wide as its text), or height and width. Not a KV cache
    ``[N, heads, past, head_dim]``: its dynamic side is the third, its last one static."""
    return dtype.kind == "f" and len(shape) == 4 and isinstance(shape[1], int) and \
        1 <= shape[1] <= 4 and not isinstance(shape[3], int)


def _inner(specs: list[tuple[str, np.dtype, list]], anonymous: Mapping[tuple[str, int], str],
           images: Collection[str]) -> set[str]:
    """The anonymous dims inside a shape, neither on axis 0 nor among the dims ending it nor
    an image's sides: a recurrent state ``[layers, batch, hidden]``'s batch, which must
    equal the batch of the input it runs with (so it follows each binding's batch)."""
    inner = set()
    for name, _, shape in specs:
        trailing = len(shape)
        while trailing > 1 and (name, trailing - 1) in anonymous:
            trailing -= 1
        image = name in images
        inner |= {anonymous[(name, axis)] for axis in range(1, trailing)
                  if (name, axis) in anonymous and not (image and axis >= 2)}
    return inner


def _cache_lengths(specs: list[tuple[str, np.dtype, list]], images: Collection[str]
                   ) -> set[str]:
    """Named dims off axis 0 of float inputs of rank 3 or more, not ``images``, that no
    integer input has: a KV cache's past length, which a decode step keeps (one new token
    after a past)."""
    integer = {d for _, dtype, shape in specs if dtype.kind in "iub" for d in shape}
    return {d for name, dtype, shape in specs if dtype.kind == "f" and len(shape) >= 3
            and name not in images for d in shape[1:] if is_named(d)} - integer


def dtype_name(dtype: np.dtype) -> str:
    """A dtype as ONNX names it where numpy differs: ``string`` for numpy's object arrays."""
    return "string" if dtype.kind == "O" else str(dtype)


# words of random text inputs (a tokenizer's input): a few scripts, so that UTF-8 is exercised
_WORDS = ("the", "model", "folds", "once", "and", "runs", "fast", "check", "Zürich", "naïve",
          "東京", "42", "onnx", "text", "input", "a")


MAX_TEXT_WORDS = 8  # words of one random text element, at most


def _random_text(rng: np.random.Generator, dims: tuple[int, ...]) -> np.ndarray:
    """An object array of ``dims`` holding 1 to :data:`MAX_TEXT_WORDS` random words each."""
    arr = np.empty(dims, dtype=object)
    for index in np.ndindex(*dims):
        arr[index] = " ".join(rng.choice(_WORDS, int(rng.integers(1, MAX_TEXT_WORDS + 1))))
    return arr


STD_STRING_BYTES = 32  # sizeof(std::string) in libstdc++, onnxruntime's copy of each element
MALLOC_OVERHEAD = 16  # a heap block's header and rounding, for a string past the inline 15


def _text_element_bytes() -> int:
    """What one random text element can take at most, fed: its pointer in the object array,
    the Python ``str`` (the longest words, as wide as the widest character of any word), and
    onnxruntime's copy (a ``std::string`` and its heap block: an input is copied into a
    string tensor before the model runs)."""
    longest = sorted(_WORDS, key=len)[-MAX_TEXT_WORDS:]
    chars = sum(map(len, longest)) + MAX_TEXT_WORDS - 1
    utf8 = sum(len(w.encode()) for w in sorted(_WORDS, key=lambda w: len(w.encode()))
               [-MAX_TEXT_WORDS:]) + MAX_TEXT_WORDS - 1
    widest = max(max(map(ord, w)) for w in _WORDS)
    python = sys.getsizeof(chr(widest) * chars)
    return 8 + python + STD_STRING_BYTES + utf8 + 1 + MALLOC_OVERHEAD


TEXT_ELEMENT_BYTES = _text_element_bytes()


def element_bytes(dtype: np.dtype) -> int:
    """What one element of a random input of ``dtype`` takes: its item size; for text, an
    upper bound of the object, its string and onnxruntime's copy (:func:`_text_element_bytes`;
    the array's 8-byte pointers alone undercount it tenfold)."""
    return TEXT_ELEMENT_BYTES if dtype.kind == "O" else max(dtype.itemsize, 1)


def synthetic_feeds(model: ModelRef, seed: int = 0, dims: Mapping[str, int] | None = None,
                    int_ranges: Mapping[str, tuple[int, int]] | None = None
                    ) -> tuple[dict[str, np.ndarray], list[InputInfo]]:
    """Seeded inputs for every input of ``model``, and what each one is, by the rules
    :func:`compare` uses (floats standard normal; token ids below the size of the table they
    index; masks ones; token types zeros; positions 0, 1, 2...; ``dims`` binds symbolic dims,
    the rest are 1). The one feed generator of compare, the tests and ``bench/``."""
    label = label_of(model, "model")
    graph = graph_of(model, label)
    feeder = FeedPlan(open_session(model, label), label, graph, {}, dims or {},
                     int_ranges or {})
    return feeder.feeds(seed), feeder.describe()


def load_given(inputs: Mapping[str, np.ndarray] | str | os.PathLike | None
                ) -> dict[str, np.ndarray]:
    if inputs is None:
        return {}
    if isinstance(inputs, Mapping):
        return dict(inputs)

    return load_arrays(inputs)

