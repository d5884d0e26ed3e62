"""Compare two models' outputs in onnxruntime on the same inputs.

Folding must not change what a model computes. This runs the original and the rewritten model
side by side (CPU, onnxruntime's own graph optimizations off, so only the rewrite is compared) on
seeded random or user-supplied inputs, and reports per output how far apart they are.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.analysis import dim_relations
from onnxfold.analysis.dim_relations import is_named
from onnxfold.analysis.expansion import refuse_onnxruntime_inlining
from onnxfold.app.tolerance import allowed, ulp
from onnxfold.app.tolerance import for_dtype as tolerance_for
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.errors import InputError, one_line
from onnxfold.host.terminal import printable
from onnxfold.io import load_model
from onnxfold.io.feeds import load_arrays
from onnxfold.io.reader import model_from_proto
from onnxfold.ir.graph import PASSES_ELEMENTS, is_default_op
from onnxfold.numbers import flag_value
from onnxfold.runtime import custom_ops

ModelRef = str | os.PathLike | onnx.ModelProto

TOKEN_ID_HIGH = 1000
# the random inputs of one larger guess of dims stay below this (a 1024-long guess of two dims
# of a wide input would otherwise allocate gigabytes)
LARGER_INPUT_BYTES = 256 * 2**20
_ORT_TYPES = {
    "float": np.float32, "float16": np.float16, "double": np.float64, "bool": np.bool_,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "string": np.object_,
}


@dataclass
class OutputDiff:
    """How one output of model A differs from model B over all input sets."""

    name: str
    dtype_a: str
    dtype_b: str
    shape_a: list[int]
    shape_b: list[int]
    elements: int = 0
    max_abs_diff: float = 0.0
    max_rel_diff: float = 0.0
    max_ulps: float | None = None  # float outputs: the largest |a-b| in ulps of b's dtype at b
    tolerance: str = ""  # what "within tolerance" meant for this output (tolerance.describe)
    mismatches: int = 0
    bitwise_equal: bool = True
    shapes_equal: bool = True
    dtypes_equal: bool = True
    ok: bool = True


@dataclass
class InputInfo:
    """What was fed to an input (so a report says which values the verdict holds for)."""

    name: str
    dtype: str
    shape: list[int]
    source: str


@dataclass
class CompareResult:
    """Per-output differences; truthy when every output is within tolerance."""

    model_a: str
    model_b: str
    rows: list[OutputDiff]
    inputs: list[InputInfo]
    n: int
    seed: int
    rtol: float | None  # None: chosen per output from its dtype (onnxfold.app.tolerance)
    atol: float | None
    dims: dict[str, int] = field(default_factory=dict)  # the first binding of the named dims
    defaulted_dims: list[str] = field(default_factory=list)  # guessed: not given, not derived
    bindings: list[dict[str, int]] = field(default_factory=list)  # input set k uses k % len
    derived_dims: dict[str, str] = field(default_factory=dict)  # dim -> its relation
    notes: list[str] = field(default_factory=list)  # e.g. a binding the reference cannot run

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.rows)

    def __bool__(self) -> bool:
        return self.ok

    @property
    def failing(self) -> list[str]:
        return [row.name for row in self.rows if not row.ok]

    def to_dict(self) -> dict:
        data = asdict(self)
        data["ok"] = self.ok
        data["failing"] = self.failing
        return data

    def summary(self) -> str:
        seeds = f"seed {self.seed}" if self.n == 1 else \
            f"seeds {self.seed}..{self.seed + self.n - 1}"
        tolerance = "tolerance by dtype" if self.rtol is None and self.atol is None else \
            tolerance_for(np.dtype(np.float32), self.rtol, self.atol).describe()
        lines = [f"compared {self.model_a} vs {self.model_b}: {self.n} input set"
                 f"{'s' if self.n != 1 else ''} ({seeds}), {tolerance}"]
        lines.extend(f"  input {info.name}: {info.dtype}{_shape(info.shape)} {info.source}"
                     for info in self.inputs)
        if len(self.bindings) > 1:
            lines.append("  input sets alternate the dims " + " and ".join(
                "{" + ", ".join(f"{k}={v}" for k, v in b.items()) + "}" for b in self.bindings))
        if self.derived_dims:
            lines.append("  dims related by the graph: " + "; ".join(
                f"{k} = {v}" for k, v in self.derived_dims.items()))
        if self.defaulted_dims:
            guessed = [d + "=" + "/".join(dict.fromkeys(str(b[d]) for b in self.bindings))
                       if self.bindings and d in self.bindings[0] else d
                       for d in self.defaulted_dims]
            lines.append(f"  dims guessed (--dim NAME=VALUE sets one): {', '.join(guessed)}")
        lines += [f"  {note}" for note in self.notes]
        table = [["output", "dtype", "shape", "max abs", "max rel", "max ulps", "mismatches",
                  "bitwise", "tolerance", "ok"]]
        for r in self.rows:
            dtype = r.dtype_a if r.dtypes_equal else f"{r.dtype_a}/{r.dtype_b}"
            shape = _shape(r.shape_a) if r.shapes_equal else \
                f"{_shape(r.shape_a)}/{_shape(r.shape_b)}"
            ulps = "-" if r.max_ulps is None else f"{r.max_ulps:.3g}"
            table.append([printable(r.name), dtype, shape, f"{r.max_abs_diff:.3g}",
                          f"{r.max_rel_diff:.3g}", ulps, f"{r.mismatches}/{r.elements}",
                          "yes" if r.bitwise_equal else "no", r.tolerance,
                          "yes" if r.ok else "NO"])
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
        lines.append("all outputs within tolerance" if self.ok else
                     f"outside tolerance: {', '.join(self.failing)}")
        return "\n".join(lines)


def _text(item: str | bytes) -> str:
    """A string input's element: onnxruntime takes str; ``S`` arrays hold UTF-8 bytes."""
    return item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)


def _shape(shape: Sequence[int]) -> str:
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


def _label(model: ModelRef, default: str) -> str:
    return default if isinstance(model, onnx.ModelProto) else os.fspath(model)


def _graph(model: ModelRef, label: str) -> ir.Model:
    """The model's graph (weights memory-mapped); also turns unreadable files into InputError,
    and refuses a model whose local functions onnxruntime would inline into too many nodes
    (``expansion.refuse_onnxruntime_inlining``)."""
    loaded = model_from_proto(model) if isinstance(model, onnx.ModelProto) else \
        load_model(model, check=False)
    refuse_onnxruntime_inlining(loaded, label)
    return loaded


def _ort_message(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if text.startswith("[ONNXRuntimeError]"):
        text = text.split(" : ", 3)[-1]
    # drop C++ source locations and signatures: "/src/x.cc:256 ns::f(args) message"
    text = re.sub(r"/\S*\.(?:cc|cpp|h):\d+ (?:[^()\s]+\([^()]*\) )?", " ", text)
    return text[:300]


def _session(model: ModelRef, label: str, libraries: Sequence[str] = ()):
    import onnxruntime as ort

    options = ort.SessionOptions()
    custom_ops.register(options, libraries)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4  # failures are raised (and reported) as one line each
    # no prepacked weight copies: a comparison runs once, and large models must fit
    options.add_session_config_entry("session.disable_prepacking", "1")
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else \
        os.fspath(model)
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as e:
        message = _ort_message(e)
        hint = " (--custom-op-library PATH loads the library that implements it)" if \
            _UNREGISTERED_OP.search(message) else ""
        raise InputError(f"{label}: onnxruntime cannot load it: {message}{hint}") from None


_UNREGISTERED_OP = re.compile(r"is not a registered function/op|No Op registered for")


def _numpy_type(ort_type: str, label: str, name: str) -> np.dtype:
    inner = ort_type[len("tensor("):-1] if ort_type.startswith("tensor(") else None
    if inner not in _ORT_TYPES:
        raise InputError(f"{label}: input {name} has type {ort_type}, which compare cannot "
                         "feed")
    return np.dtype(_ORT_TYPES[inner])


def _names_differ(what: str, a: Sequence[str], b: Sequence[str]) -> str | None:
    only_a, only_b = [x for x in a if x not in b], [x for x in b if x not in a]
    if not only_a and not only_b:
        return None
    parts = [f"only in A: {', '.join(only_a)}" if only_a else "",
             f"only in B: {', '.join(only_b)}" if only_b else ""]
    return f"the models' {what} differ ({'; '.join(p for p in parts if p)})"


def _id_table_sizes(model: ir.Model) -> dict[str, int]:
    """Per graph input, the smallest constant Gather table it indexes (its valid id range)."""
    sizes: dict[str, int] = {}
    for value in model.graph.inputs:
        frontier, seen = [value], set()
        while frontier:
            current = frontier.pop()
            seen.add(current)
            for use in current.uses():
                node = use.node
                if node.op_type in PASSES_ELEMENTS and use.idx == 0 and node.outputs:
                    if node.outputs[0] not in seen:
                        frontier.append(node.outputs[0])
                elif is_default_op(node, "Gather") and use.idx == 1:
                    table = node.inputs[0]
                    axis = node.attributes.get_int("axis", 0)
                    const = table.const_value if table is not None else None
                    if const is not None and len(const.shape) > 0:
                        dim = const.shape[axis]
                        if isinstance(dim, int) and dim > 0:
                            assert value.name is not None  # a graph input read from a proto
                            sizes[value.name] = min(dim, sizes.get(value.name, dim))
    return sizes


class _Inputs:
    """Builds feeds for the graph inputs of model A: supplied arrays, else seeded random data."""

    def __init__(self, session, label: str, graph: ir.Model, given: Mapping[str, np.ndarray],
                 dims: Mapping[str, int], int_ranges: Mapping[str, tuple[int, int]]) -> None:
        self.specs = [(i.name, _numpy_type(i.type, label, i.name), list(i.shape))
                      for i in session.get_inputs()]
        names = {name: dtype for name, dtype, _ in self.specs}
        for name in given:
            if name not in names:
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
        self.given = {name: self._cast(name, names[name], arr) for name, arr in given.items()}
        self.int_ranges = dict(int_ranges)
        self.table_sizes = _id_table_sizes(graph)
        bound, unnamed = self._bind(dims, label)
        self.plan = dim_relations.plan(graph, [shape for _, _, shape in self.specs], bound,
                                       load_catalogue().shape_steps)
        self.bindings = list(self.plan.bindings)  # a binding model A cannot run is dropped
        self.tried = list(self.plan.bindings)  # every binding tried, for the message
        # unnamed dims are guessed too where ``--dim ?=V`` does not set them: the larger
        # bindings carry their length off axis 0 under the name "?"
        self.guessed = self.plan.guessed + (["?"] if unnamed and "?" not in dims else [])
        self._larger = [dict(b) for b in self.plan.larger]
        if "?" in self.guessed:
            self._larger = [{**(self._larger[i] if self._larger else self.plan.bindings[0]),
                             "?": width} for i, width in enumerate(dim_relations.LARGER)]
        self.defaulted = self.plan.guessed + (["?"] if unnamed else [])  # "?": unnamed dims

    @property
    def dims(self) -> dict[str, int]:
        return self.bindings[0]

    def guesses(self) -> str:
        """The guessed dims of every binding tried and the flag that sets them (a message)."""
        if not self.guessed:
            return ""
        values = " or ".join(self.guessed_values(b) for b in self.tried)
        return f"; dims guessed: {values} (set them with --dim NAME=VALUE)"

    def guessed_values(self, binding: Mapping[str, int]) -> str:
        """``binding``'s values of the guessed dims, as ``name=value, ...`` (``?``: unnamed)."""
        return ", ".join(f"{n}={binding.get(n, self.unnamed_value)}" for n in self.guessed)

    def next_larger(self) -> dict[str, int] | None:
        """The next binding of guessed dims at a larger size whose random inputs stay within
        :data:`LARGER_INPUT_BYTES` (None: no more)."""
        while self._larger:
            binding = self._larger.pop(0)
            nbytes = sum(int(np.prod(self._shape_in(shape, binding), dtype=np.int64)) *
                         max(dtype.itemsize, 1) for name, dtype, shape in self.specs
                         if name not in self.given)
            if nbytes <= LARGER_INPUT_BYTES:
                self.tried.append(binding)
                return binding
        return None

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

    def _bind(self, dims: Mapping[str, int], label: str) -> tuple[dict[str, int], bool]:
        """The dims ``dims`` and the given arrays bind, and whether an input has unnamed dims
        (``?`` or none: each one independent; ``--dim ?=V`` sets the ones fed at random)."""
        symbolic = {d if is_named(d) else "?" for _, _, shape in self.specs for d in shape
                    if not isinstance(d, int)}
        self.unnamed_value = dims.get("?", 1)
        for name in dims:
            if name not in symbolic:
                known = ", ".join(sorted(symbolic)) or "none"
                raise InputError(f"--dim {name}: no input of {label} has a dimension of that "
                                 f"name (symbolic dimensions: {known})")
        bound = {name: value for name, value in dims.items() if name != "?"}
        for name, _, shape in self.specs:
            if name not in self.given:
                continue
            actual = self.given[name].shape
            if len(actual) != len(shape):
                raise InputError(f"--inputs: {name} has shape {_shape(actual)}, the model "
                                 f"wants rank {len(shape)}")
            for want, got in zip(shape, actual):
                if is_named(want) and bound.setdefault(want, got) != got:
                    raise InputError(f"--inputs: {name} has {want}={got} but {want} is "
                                     f"{bound[want]}")
        unnamed = any(not isinstance(d, int) and not is_named(d)
                      for name, _, shape in self.specs if name not in self.given for d in shape)
        return bound, unnamed

    def shape(self, shape: list, k: int = 0) -> tuple[int, ...]:
        """Input set ``k``'s shape for a declared ``shape`` (binding ``k % len(bindings)``)."""
        return self._shape_in(shape, self.bindings[k % len(self.bindings)])

    def _shape_in(self, shape: list, binding: Mapping[str, int]) -> tuple[int, ...]:
        """``shape`` with ``binding``'s dims; an unnamed dim (``?`` or none) is ``--dim ?=V``
        (default 1), or the larger guess ``binding["?"]`` where it ends the shape off axis 0
        (a sequence, an image's height and width; not a recurrent state's batch in the
        middle)."""
        trailing = len(shape)
        while trailing > 1 and not isinstance(shape[trailing - 1], int) and \
                not is_named(shape[trailing - 1]):
            trailing -= 1
        return tuple(d if isinstance(d, int) and d >= 0 else
                     binding.get(d, 1) if is_named(d) else
                     binding.get("?", self.unnamed_value) if axis >= trailing else
                     self.unnamed_value for axis, d in enumerate(shape))

    def _int_source(self, name: str, dtype: np.dtype) -> tuple[str, tuple[int, int] | None]:
        """How an integer input is filled: a description and a [lo, hi) range (None: fixed)."""
        lower = name.lower()
        info = np.iinfo(dtype)
        if name in self.int_ranges:
            lo, hi = self.int_ranges[name]
            span = (max(lo, info.min), min(hi, info.max + 1))
            return f"random [{span[0]}, {span[1]}) (--int-range)", span
        if "mask" in lower:
            return "ones (mask)", None
        if "token_type" in lower or "segment" in lower:
            return "zeros (token types)", None
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
            elif dtype.kind == "b":
                source = "true (mask)" if "mask" in name.lower() else "random true/false"
            elif dtype.kind == "O":
                source = "random words (text)"
            else:
                source = "standard normal"
            real = self.given[name].shape if name in self.given else self.shape(shape, 0)
            infos.append(InputInfo(name, _dtype_name(dtype), list(real), source))
        return infos

    def feeds(self, seed: int, k: int = 0) -> dict[str, np.ndarray]:
        """Input set ``k`` (seeded with ``seed``), shaped by binding ``k % len(bindings)``."""
        rng = np.random.default_rng(seed)
        feeds = {}
        for name, dtype, shape in self.specs:
            if name in self.given:
                feeds[name] = self.given[name]
                continue
            dims = self.shape(shape, k)
            if dtype.kind in "iu":
                _, span = self._int_source(name, dtype)
                lower = name.lower()
                if span is not None:
                    arr = rng.integers(span[0], span[1], dims, dtype=dtype)
                elif "mask" in lower:
                    arr = np.ones(dims, dtype)
                elif "position" in lower and dims:
                    start = self.plan.offset(shape[-1], self.bindings[k % len(self.bindings)])
                    arr = np.broadcast_to(np.arange(start, start + dims[-1], dtype=dtype),
                                          dims).copy()
                else:
                    arr = np.zeros(dims, dtype)
            elif dtype.kind == "b":
                arr = np.ones(dims, bool) if "mask" in name.lower() else \
                    rng.integers(0, 2, dims).astype(bool)
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


def _dtype_name(dtype: np.dtype) -> str:
    """A dtype as ONNX names it where numpy differs: ``string`` for numpy's object arrays."""
    return "string" if dtype.kind == "O" else str(dtype)


# words of random text inputs (a tokenizer's input): a few scripts, so that UTF-8 is exercised
_WORDS = ("the", "model", "folds", "once", "and", "runs", "fast", "check", "Zürich", "naïve",
          "東京", "42", "onnx", "text", "input", "a")


def _random_text(rng: np.random.Generator, dims: tuple[int, ...]) -> np.ndarray:
    """An object array of ``dims`` holding 1 to 8 random words each."""
    arr = np.empty(dims, dtype=object)
    for index in np.ndindex(*dims):
        arr[index] = " ".join(rng.choice(_WORDS, int(rng.integers(1, 9))))
    return arr


def synthetic_feeds(model: ModelRef, seed: int = 0, dims: Mapping[str, int] | None = None,
                    int_ranges: Mapping[str, tuple[int, int]] | None = None
                    ) -> tuple[dict[str, np.ndarray], list[InputInfo]]:
    """Seeded inputs for every input of ``model``, and what each one is, by the rules
    :func:`compare` uses (floats standard normal; token ids below the size of the table they
    index; masks ones; token types zeros; positions 0, 1, 2...; ``dims`` binds symbolic dims,
    the rest are 1). The one feed generator of compare, the tests and ``bench/``."""
    label = _label(model, "model")
    graph = _graph(model, label)
    feeder = _Inputs(_session(model, label), label, graph, {}, dims or {},
                     int_ranges or {})
    return feeder.feeds(seed), feeder.describe()


def _load_given(inputs: Mapping[str, np.ndarray] | str | os.PathLike | None
                ) -> dict[str, np.ndarray]:
    if inputs is None:
        return {}
    if isinstance(inputs, Mapping):
        return dict(inputs)

    return load_arrays(inputs)


def _as_array(value) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(value)
    except ValueError:  # ragged sequences
        arr = np.empty(1, object)
        arr[0] = value
        return arr


def _accumulate(row: OutputDiff, a, b, rtol: float | None, atol: float | None) -> None:
    """Fold one input set's outputs ``a`` (model A) and ``b`` (model B) into ``row``, with the
    tolerance of ``a``'s dtype unless ``rtol``/``atol`` override it."""
    a, b = _as_array(a), _as_array(b)
    tolerance = tolerance_for(a.dtype, rtol, atol)
    row.tolerance = tolerance.describe()
    row.elements += max(a.size, b.size)
    row.dtypes_equal &= a.dtype == b.dtype
    if a.shape != b.shape:
        row.shapes_equal = row.bitwise_equal = False
        row.mismatches += max(a.size, b.size)
        return
    row.bitwise_equal &= a.dtype == b.dtype and (
        a.tobytes() == b.tobytes() if a.dtype.kind != "O" else bool(np.all(a == b)))
    if a.dtype.kind in "OSU" or b.dtype.kind in "OSU":
        row.mismatches += int(np.sum(a != b))
        return
    with np.errstate(all="ignore"):
        x = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
        y = b.astype(np.complex128 if b.dtype.kind == "c" else np.float64)
        same = (a == b) if a.dtype == b.dtype else (x == y)
        same |= np.isnan(x) & np.isnan(y)
        finite = np.isfinite(x) & np.isfinite(y)
        diff = np.abs(x - y)
        close = same | (finite & (diff <= allowed(tolerance, y, a.dtype.name, finite)))
        differ = finite & ~same
        spacing = ulp(y, a.dtype.name) if a.dtype == b.dtype else None
        if spacing is not None:
            worst = float((diff[differ] / spacing[differ]).max()) if differ.any() else 0.0
            row.max_ulps = max(row.max_ulps or 0.0, worst)
        if differ.any():
            row.max_abs_diff = max(row.max_abs_diff, float(diff[differ].max()))
            nonzero = differ & (y != 0)
            if nonzero.any():
                rel = float((diff[nonzero] / np.abs(y[nonzero])).max())
                row.max_rel_diff = max(row.max_rel_diff, rel)
    row.mismatches += int((~close).sum())


def _run(sess, label: str, outputs: list[str], feeds: dict, run_options, hint: str = "") -> list:
    try:
        return sess.run(outputs, feeds, run_options)
    except Exception as e:
        raise InputError(f"{label}: onnxruntime failed to run it: {_ort_message(e)}"
                         f"{hint or ' (see --dim, --int-range, --inputs)'}") from None


def _run_reference(sess, label: str, outputs: list[str], feeder: _Inputs, seed: int, n: int,
                   run_options, progress: Callable[[str], None] = lambda text: None
                   ) -> tuple[list[dict], list[list], list[str]]:
    """Model A's feeds and outputs for ``n`` input sets. A binding of guessed dims that A
    itself cannot run is dropped (and said in a note) while another one remains."""
    failed: list[str] = []  # the guessed dims of each binding A could not run
    while True:
        all_feeds = [feeder.feeds(seed + k, k) for k in range(n)]
        try:
            results = []
            for k, feeds in enumerate(all_feeds):
                progress(f"original {k + 1}/{n}")
                results.append(_run(sess, label, outputs, feeds, run_options, feeder.guesses()))
        except InputError as e:
            if not feeder.guessed:
                raise
            if len(feeder.bindings) > 1:
                dropped = feeder.bindings.pop(0)
            elif (larger := feeder.next_larger()) is not None:
                dropped, feeder.bindings = feeder.bindings[0], [larger]
            else:
                raise
            failed.append(feeder.guessed_values(dropped))
            reason = one_line(e).removeprefix(f"{label}: ").split("; dims guessed")[0]
            continue
        notes = [f"the reference could not run the guessed dims {' or '.join(failed)} "
                 f"({reason[:160]})"] if failed else []
        return all_feeds, results, notes


def compare(a: ModelRef, b: ModelRef, *,
            inputs: Mapping[str, np.ndarray] | str | os.PathLike | None = None, n: int = 1,
            seed: int = 0, dims: Mapping[str, int] | None = None,
            int_ranges: Mapping[str, tuple[int, int]] | None = None,
            rtol: float | None = None, atol: float | None = None,
            custom_op_libraries: Sequence[str | os.PathLike] = (),
            progress: Callable[[str], None] | None = None) -> CompareResult:
    """Run models ``a`` and ``b`` (paths or ``onnx.ModelProto``) on the same inputs.

    Inputs are ``inputs`` (a dict or an .npz path) where given, else seeded random data shaped
    from model A's inputs (``dims`` binds symbolic dimensions, the rest are 1). ``n`` input sets
    use seeds ``seed .. seed+n-1``. An element matches when it is within the tolerance of its
    output's dtype (:mod:`onnxfold.app.tolerance`: float16/bfloat16 in ulps, float32 by rtol 1e-4
    and atol 1e-5, the rest exactly), or within ``atol + rtol*|b|`` when ``rtol`` or ``atol`` is
    given, or both are NaN. Raises InputError when a model cannot be read or run, or the I/O
    names differ. ``custom_op_libraries``: shared libraries of custom ops onnxruntime loads
    for both models (:mod:`onnxfold.runtime.custom_ops`). ``progress(text)`` is told what runs
    (``loading original``, ``original 2/3``, ``loading optimized``, ``optimized 1/3``), for
    the progress line.
    """
    tell = progress or (lambda text: None)
    if n < 1:
        raise InputError(f"the number of input sets must be at least 1, not {n}")
    if any(t is not None and not t >= 0 for t in (rtol, atol)):
        raise InputError("rtol and atol must be non-negative")
    libraries = custom_ops.checked_libraries(custom_op_libraries)
    label_a, label_b = _label(a, "model A"), _label(b, "model B")
    graph_a = _graph(a, label_a)
    _graph(b, label_b)
    import onnxruntime as ort

    run_options = ort.RunOptions()
    run_options.log_severity_level = 4
    # one model in memory at a time: A runs every input set, then B (large models fit twice)
    tell("loading original")
    sess_a = _session(a, label_a, libraries)
    feeder = _Inputs(sess_a, label_a, graph_a, _load_given(inputs), dims or {}, int_ranges or {})
    io_a = {get: [(v.name, v.type) for v in getattr(sess_a, get)()]
            for get in ("get_inputs", "get_outputs")}
    outputs = [name for name, _ in io_a["get_outputs"]]
    all_feeds, results_a, notes = _run_reference(sess_a, label_a, outputs, feeder, seed, n,
                                                 run_options, tell)
    del sess_a
    tell("loading optimized")
    sess_b = _session(b, label_b, libraries)
    for what, get in (("inputs", "get_inputs"), ("outputs", "get_outputs")):
        problem = _names_differ(what, [name for name, _ in io_a[get]],
                                [v.name for v in getattr(sess_b, get)()])
        if problem:
            raise InputError(f"{label_a} vs {label_b}: {problem}")
    types_b = {i.name: i.type for i in sess_b.get_inputs()}
    for name, type_a in io_a["get_inputs"]:
        if types_b[name] != type_a:
            raise InputError(f"{label_a} vs {label_b}: input {name} is {type_a} in A but "
                             f"{types_b[name]} in B")
    rows: dict[str, OutputDiff] = {}
    for k, (feeds, result_a) in enumerate(zip(all_feeds, results_a)):
        tell(f"optimized {k + 1}/{n}")
        result_b = _run(sess_b, label_b, outputs, feeds, run_options, feeder.guesses())
        for name, va, vb in zip(outputs, result_a, result_b):
            va, vb = _as_array(va), _as_array(vb)
            row = rows.setdefault(name, OutputDiff(
                name, _dtype_name(va.dtype), _dtype_name(vb.dtype), list(va.shape),
                list(vb.shape)))
            _accumulate(row, va, vb, rtol, atol)
    for row in rows.values():
        row.ok = row.shapes_equal and row.dtypes_equal and row.mismatches == 0
    return CompareResult(label_a, label_b, [rows[name] for name in outputs], feeder.describe(),
                         n, seed, rtol, atol, feeder.dims, feeder.defaulted,
                         feeder.bindings, feeder.plan.derived, notes)


def check_dict(result: CompareResult) -> dict[str, Any]:
    """A ``--check`` comparison for the report: verdict, settings and one entry per output
    (max abs/rel error; ``max_ulps`` where the comparison measures it, else null)."""
    return {
        "ok": result.ok, "n": result.n, "seed": result.seed, "rtol": result.rtol,
        "atol": result.atol, "dims": dict(result.dims),
        "defaulted_dims": list(result.defaulted_dims),
        "outputs": [{"name": row.name, "dtype": row.dtype_a, "shape": list(row.shape_a),
                     "elements": row.elements, "max_abs": row.max_abs_diff,
                     "max_rel": row.max_rel_diff,
                     "max_ulps": getattr(row, "max_ulps", None),
                     "mismatches": row.mismatches, "bitwise_equal": row.bitwise_equal,
                     "ok": row.ok} for row in result.rows],
    }
