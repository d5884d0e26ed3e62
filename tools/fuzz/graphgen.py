"""Seeded generator of random, valid ONNX models for the differential fuzzer.

``generate(seed, config)`` returns a :class:`Case`: an ``onnx.ModelProto`` mixing constant
parts (initializers, ``Constant`` nodes, weights shared by several readers, views of weights)
and dynamic parts (graph inputs, some with symbolic dims ``N``/``M``), plus two assignments of
the symbolic dims and a seeded feed for each. The same seed and config always give the same
model and feeds (numpy's ``default_rng``; nothing else is random).

The generator tracks every value's dtype, shape (ints, or symbol names whose concrete value is
known under each assignment), whether it is computed from constants only, and a bound on its
magnitude (``inf`` when it may be NaN/inf), so it only emits what is well defined in
onnxruntime: no out-of-range gather indices, no integer division by zero or by negative
numbers, no float -> int casts of values that may be NaN, inf or out of range, tensors under
4 KiB. Everything else (NaN, inf, -0.0, integer wrap-around, empty tensors) is fair game.

Constructs the originals never contain, because onnx.checker refuses them or onnxruntime 1.32
computes them wrongly (a folder must not create them either: ``fuzzcheck.ort_hazards``): a
body output that is an outer-scope value (only through an Identity); a Scan body returning one
of its inputs as is, or one value twice (the Identity forms only: ``state = v``, ``scan =
Identity(v)``); an If branch returning one value twice; a Loop returning its iteration number
as is; empty tensors around Scan (SIGFPE); an int32 ``INT_MAX`` Slice end with a negative step
(onnxruntime reads it as "to the beginning"); integer Pow that could overflow (computed through
double); a Loop with zero iterations and scan outputs (their shape is unknowable).

Knobs (:class:`Config`) shrink or steer it: op budget, nesting depth, dtypes, opsets, which
op generators may run (``ops``), probabilities of symbolic dims and special values.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

ELEM = {"float32": TP.FLOAT, "float16": TP.FLOAT16, "int64": TP.INT64, "int32": TP.INT32,
        "bool": TP.BOOL}
NP = {"float32": np.float32, "float16": np.float16, "int64": np.int64, "int32": np.int32,
      "bool": np.bool_}
ITEM = {"float32": 4, "float16": 2, "int64": 8, "int32": 4, "bool": 1}
FLOATS = ("float32", "float16")
INTS = ("int64", "int32")
NUMERIC = FLOATS + INTS
ALL = (*NUMERIC, "bool")
FMAX = {"float32": 3.0e38, "float16": 65000.0}
IMAX = {"int64": 2**63 - 1, "int32": 2**31 - 1}
IR_FOR_OPSET = {13: 7, 15: 8, 17: 8, 18: 8, 19: 9, 21: 10}
MAX_BYTES = 4096
INF = math.inf
BIG = 2**62  # "clamped" slice bound that fits int64 (and means the same as INT64_MAX)

# elementwise unary ops per dtype class, with (min opset, dtypes) restrictions
FLOAT_UNARY = ["Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal",
               "Floor", "Ceil", "Round", "Sin", "Cos", "Erf", "Sign", "Softplus", "LeakyRelu",
               "Elu", "HardSigmoid", "Selu", "Softmax", "Identity", "IsNaN", "IsInf",
               "HardSwish", "Gelu"]
INT_UNARY = ["Neg", "Abs", "Sign", "Identity"]
BOOL_UNARY = ["Not", "Identity"]
UNARY_MIN_OPSET = {"HardSwish": 14, "Gelu": 20}
# magnitude bound of f(x) given |x| <= m (inf: may be NaN/inf)
UNARY_MAG = {
    "Neg": lambda m: m, "Abs": lambda m: m, "Relu": lambda m: m, "Identity": lambda m: m,
    "Floor": lambda m: m + 1, "Ceil": lambda m: m + 1, "Round": lambda m: m + 1,
    "Sigmoid": lambda m: 1, "Tanh": lambda m: 1, "Sin": lambda m: 1, "Cos": lambda m: 1,
    "Erf": lambda m: 1, "Sign": lambda m: 1, "HardSigmoid": lambda m: 1,
    "Softplus": lambda m: m + 1, "LeakyRelu": lambda m: m, "Elu": lambda m: m + 1,
    "Selu": lambda m: 1.8 * m + 2, "HardSwish": lambda m: m, "Gelu": lambda m: m,
    "Softmax": lambda m: 1, "Exp": lambda m: math.exp(m) if m < 40 else INF,
    "Log": lambda m: INF, "Sqrt": lambda m: INF, "Reciprocal": lambda m: INF,
    "IsNaN": lambda m: 1, "IsInf": lambda m: 1, "Not": lambda m: 1,
}
SAFE_UNARY = ["Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Floor", "Ceil", "Sin", "Cos", "Erf",
              "Softplus", "LeakyRelu", "HardSigmoid", "Identity"]
COMPARE = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]
REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
          "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"]


def slice_len(start: int, end: int, step: int, dim: int) -> int:
    """Length of an ONNX Slice along one axis (the spec's clamping, not Python's)."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return len(range(start, end, step))


def prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


@dataclass
class Config:
    """Knobs of the generator (the defaults are what the fuzzer runs)."""

    opsets: tuple = (13, 17, 18, 21)
    dtypes: tuple = ALL
    min_ops: int = 3
    max_ops: int = 16
    max_depth: int = 2          # nesting depth of If/Loop/Scan bodies
    body_ops: tuple = (0, 3)    # extra random ops per body
    p_symbolic: float = 0.5     # a dim of a graph input is symbolic
    p_special: float = 0.04     # a float constant holds NaN/inf/-0.0/large values
    p_zero_dim: float = 0.015   # a static dim is 0 (empty tensors)
    max_outputs: int = 4
    ops: tuple | None = None    # restrict the op generators (names in WEIGHTS)
    weights: dict = field(default_factory=dict)  # override WEIGHTS entries


WEIGHTS = {
    "unary": 8, "binary": 12, "reduce": 5, "cumsum": 1, "argmax": 1, "matmul": 4, "gemm": 2,
    "transpose": 4, "reshape": 5, "shape_reshape": 3, "shape_data": 2, "flatten": 1,
    "squeeze": 2, "unsqueeze": 3, "concat": 4, "slice": 4, "gather": 4, "cast": 4, "where": 3,
    "expand": 3, "tile": 2, "constant_of_shape": 2, "range": 2, "pad": 1, "split": 1,
    "clip": 1, "if": 4, "loop": 3, "scan": 3,
}
BODY_WEIGHTS = {"unary": 4, "binary": 6, "reduce": 2, "matmul": 1, "transpose": 1,
                "reshape": 2, "shape_reshape": 1, "slice": 1, "gather": 1, "cast": 1,
                "concat": 1, "where": 1, "expand": 1, "if": 2, "loop": 1, "scan": 1}
CONTROL_FLOW = ("if", "loop", "scan")


class Skip(Exception):
    """An op generator cannot apply here (the caller tries another)."""


class Val:
    """A value of the model being generated: its name, dtype, shape and what is known."""

    __slots__ = ("const", "dtype", "kind", "mag", "name", "scope", "shape", "uses")

    def __init__(self, name, dtype, shape, const, mag, scope, kind="node"):
        self.name, self.dtype, self.shape = name, dtype, tuple(shape)
        self.const, self.mag, self.scope, self.kind = const, mag, scope, kind
        self.uses = 0

    def __repr__(self):
        return f"Val({self.name}, {self.dtype}, {self.shape}, const={self.const})"


class Scope:
    """A graph under construction: the main graph or a subgraph body."""

    def __init__(self, parent: Scope | None = None):
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.nodes: list = []
        self.inits: list = []
        self.vals: list[Val] = []
        self.inputs: list[Val] = []

    def visible(self) -> list[Val]:
        out, s = [], self
        while s is not None:
            out.extend(s.vals)
            s = s.parent
        return out


@dataclass
class InputSpec:
    name: str
    dtype: str
    shape: tuple
    lo: float
    hi: float


@dataclass
class Case:
    """A generated model with its symbolic-dim assignments and feeds."""

    seed: int
    model: onnx.ModelProto
    assignments: list          # two dicts: symbol -> int (graph-input symbols only)
    inputs: list               # InputSpec per fed graph input
    expected: dict             # output name -> (dtype, [shape under assignment 0, 1])
    ops: dict                  # op type -> count (all graphs)
    config: Config

    def feeds(self, which: int) -> dict:
        return make_feeds(self.seed, self.inputs, self.assignments[which], which)


def make_feeds(seed: int, inputs: list, assignment: dict, which: int) -> dict:
    rng = np.random.default_rng([seed, 7919, which])
    feeds = {}
    for spec in inputs:
        shape = tuple(assignment[d] if isinstance(d, str) else d for d in spec.shape)
        if spec.dtype == "bool":
            arr = rng.random(shape) < 0.5
        elif spec.dtype in INTS:
            arr = rng.integers(int(spec.lo), int(spec.hi), size=shape)
        else:
            arr = rng.uniform(spec.lo, spec.hi, size=shape)
        feeds[spec.name] = np.asarray(arr).astype(NP[spec.dtype])
    return feeds


class Gen:
    """One model: ``Gen(seed, config).build()`` returns a :class:`Case`."""

    def __init__(self, seed: int, config: Config | None = None):
        self.seed = seed
        self.cfg = config or Config()
        self.r = np.random.default_rng(seed)
        self.k = 0
        self.opset = int(self.choice(self.cfg.opsets))
        self.syms: dict[str, tuple[int, int]] = {}
        self.base_syms: list[str] = []
        self.specs: list[InputSpec] = []
        self.root = Scope()
        self.graph_inputs: list = []   # value infos of the main graph, in order
        weights = dict(WEIGHTS)
        weights.update(self.cfg.weights)
        if self.cfg.ops is not None:
            weights = {k: v for k, v in weights.items() if k in self.cfg.ops}
        self.weights = weights

    # -- randomness ------------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return bool(self.r.random() < p)

    def choice(self, seq):
        seq = list(seq)
        return seq[int(self.r.integers(len(seq)))]

    def randint(self, lo: int, hi: int) -> int:
        """Uniform in [lo, hi] (inclusive)."""
        return int(self.r.integers(lo, hi + 1))

    def weighted(self, table: dict):
        keys = list(table)
        w = np.array([table[k] for k in keys], float)
        return keys[int(self.r.choice(len(keys), p=w / w.sum()))]

    def name(self, prefix: str) -> str:
        self.k += 1
        return f"{prefix}{self.k}"

    # -- shapes ----------------------------------------------------------------------------
    def conc(self, shape, a: int) -> tuple:
        return tuple(self.syms[d][a] if isinstance(d, str) else d for d in shape)

    def dval(self, d, a: int) -> int:
        return self.syms[d][a] if isinstance(d, str) else d

    def dmin(self, d) -> int:
        return min(self.syms[d]) if isinstance(d, str) else d

    def dim_of(self, pair):
        a, b = int(pair[0]), int(pair[1])
        if a == b:
            return a
        name = f"d{len(self.syms)}"
        self.syms[name] = (a, b)
        return name

    def dims_combine(self, dims, fn):
        """A dim whose concrete value under each assignment is fn(concrete dims)."""
        return self.dim_of(tuple(fn([self.dval(d, a) for d in dims]) for a in (0, 1)))

    def count(self, shape) -> int:
        return max(prod(self.conc(shape, a)) for a in (0, 1))

    def fits(self, shape, dtype) -> bool:
        return len(shape) <= 5 and self.count(shape) * ITEM[dtype] <= MAX_BYTES

    def maybe_empty(self, shape) -> bool:
        return any(min(self.conc(shape, a)) == 0 for a in (0, 1)) if shape else False

    def static(self, shape) -> bool:
        return all(isinstance(d, int) for d in shape)

    def rand_dim(self) -> int:
        if self.chance(self.cfg.p_zero_dim):
            return 0
        return int(self.r.choice([1, 1, 2, 2, 3, 3, 4, 5]))

    def rand_rank(self) -> int:
        return int(self.r.choice([0, 1, 1, 2, 2, 2, 3, 3, 4]))

    def rand_shape(self, rank=None, sym=False) -> tuple:
        rank = self.rand_rank() if rank is None else rank
        dims = []
        for _ in range(rank):
            if sym and self.base_syms and self.chance(self.cfg.p_symbolic):
                dims.append(self.choice(self.base_syms))
            else:
                dims.append(self.rand_dim())
        return tuple(dims)

    def bcast(self, *shapes):
        rank = max(len(s) for s in shapes)
        out = []
        for i in range(rank):
            ds = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
            ds = [d for d in ds if d != 1] or [1]
            if any(d != ds[0] for d in ds):
                return None
            out.append(ds[0])
        return tuple(out)

    def into(self, shape) -> tuple:
        """A random shape that broadcasts into ``shape`` without changing it (static dims)."""
        k = self.randint(0, len(shape))
        sub = shape[len(shape) - k:]
        return tuple(1 if isinstance(d, str) or self.chance(0.3) else d for d in sub)

    # -- emitting --------------------------------------------------------------------------
    def node(self, sc, op, ins, outs, const=None, mag=None, **attrs):
        """Append a node; ``outs`` is a list of (dtype, shape[, mag]); returns its values."""
        names = []
        for v in ins:
            if v is None:
                names.append("")
            else:
                names.append(v.name)
                v.uses += 1
        if const is None:
            const = all(v.const for v in ins if v is not None)
        vals = []
        for spec in outs:
            dtype, shape = spec[0], spec[1]
            m = spec[2] if len(spec) > 2 else (mag if mag is not None else INF)
            if dtype in FLOATS and m > FMAX[dtype]:
                m = INF
            if dtype == "bool":
                m = 1
            vals.append(Val(self.name("v"), dtype, shape, const, m, sc))
        attrs = {k: v for k, v in attrs.items() if v is not None}
        sc.nodes.append(helper.make_node(op, names, [v.name for v in vals],
                                         name=self.name(f"{op}_"), **attrs))
        sc.vals.extend(vals)
        return vals

    def node1(self, sc, op, ins, dtype, shape, mag=INF, const=None, **attrs) -> Val:
        return self.node(sc, op, ins, [(dtype, shape, mag)], const=const, **attrs)[0]

    def data(self, dtype, shape, lo=-3.0, hi=3.0, special=True):
        n = prod(shape)
        if dtype == "bool":
            arr = self.r.random(n) < 0.5
        elif dtype in INTS:
            arr = self.r.integers(int(lo), int(hi) + 1, size=n)
        else:
            arr = self.r.uniform(lo, hi, size=n).astype(np.float32)
        arr = arr.astype(NP[dtype])
        if special and n and self.chance(self.cfg.p_special):
            k = self.randint(1, min(n, 3))
            idx = self.r.choice(n, size=k, replace=False)
            if dtype in FLOATS:
                pool = [np.nan, np.inf, -np.inf, -0.0, 1e4, -1e4, 1e-7]
            elif dtype in INTS:
                pool = [IMAX[dtype], -IMAX[dtype] - 1, 1 << 20, -(1 << 20)]
            else:
                pool = [True]
            for i in idx:
                arr[i] = self.choice(pool)
        arr = arr.reshape(shape)
        return arr

    @staticmethod
    def mag_of(arr) -> float:
        if arr.dtype == np.bool_:
            return 1
        if arr.size == 0:
            return 0
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            return INF
        return float(np.abs(arr.astype(np.float64)).max())

    def tensor(self, name, arr):
        dtype = str(arr.dtype) if arr.dtype != np.bool_ else "bool"
        if self.chance(0.2) and arr.size:
            return helper.make_tensor(name, ELEM[dtype], arr.shape, arr.flatten().tolist())
        return numpy_helper.from_array(arr, name)

    def const(self, sc, arr, how=None) -> Val:
        """A constant holding ``arr``: an initializer (here or in the main graph) or a node."""
        arr = np.asarray(arr)
        dtype = "bool" if arr.dtype == np.bool_ else str(arr.dtype)
        how = how or self.weighted({"init": 6, "node": 3, "outer": 2 if sc.parent else 0})
        mag = self.mag_of(arr)
        if how in ("init", "outer"):
            target = self.root if how == "outer" else sc
            name = self.name("w")
            target.inits.append(self.tensor(name, arr))
            v = Val(name, dtype, arr.shape, True, mag, target, kind="init")
            target.vals.append(v)
            return v
        attrs = {"value": self.tensor(self.name("t"), arr)}
        if dtype == "float32" and arr.ndim <= 1 and arr.size and self.chance(0.4):
            key = "value_float" if arr.ndim == 0 else "value_floats"
            attrs = {key: arr.item() if arr.ndim == 0 else [float(x) for x in arr]}
        elif dtype == "int64" and arr.ndim <= 1 and arr.size and self.chance(0.4):
            key = "value_int" if arr.ndim == 0 else "value_ints"
            attrs = {key: arr.item() if arr.ndim == 0 else [int(x) for x in arr]}
        return self.node1(sc, "Constant", [], dtype, arr.shape, mag=mag, const=True, **attrs)

    def i64(self, sc, values, dtype="int64", scalar=False, how=None) -> Val:
        arr = np.array(values, dtype=NP[dtype])
        if scalar:
            arr = arr.reshape(())
        return self.const(sc, arr, how=how)

    def input(self, dtype, shape, lo=None, hi=None) -> Val:
        if any(isinstance(d, str) and d not in self.base_syms for d in shape):
            raise Skip("a graph input cannot have a derived dim")
        if lo is None:
            lo, hi = {"float32": (-3, 3), "float16": (-3, 3), "int64": (-5, 6),
                      "int32": (-5, 6), "bool": (0, 1)}[dtype]
        name = self.name("in")
        self.specs.append(InputSpec(name, dtype, tuple(shape), lo, hi))
        self.graph_inputs.append(helper.make_tensor_value_info(name, ELEM[dtype], list(shape)))
        mag = 1 if dtype == "bool" else max(abs(lo), abs(hi))
        v = Val(name, dtype, shape, False, mag, self.root, kind="input")
        self.root.vals.append(v)
        return v

    def fresh(self, sc, dtype, shape, allow_input=True) -> Val:
        """A new constant (static shape) or graph input with this dtype and shape."""
        if not self.static(shape) or (allow_input and self.chance(0.25)):
            return self.input(dtype, shape)
        if self.chance(0.25) and len(shape) >= 1:
            return self.const_view(sc, dtype, shape)
        return self.const(sc, self.data(dtype, shape))

    def const_view(self, sc, dtype, shape) -> Val:
        """A constant of ``shape`` that is a view of a (maybe shared) weight."""
        shape = tuple(shape)
        kind = self.choice(["transpose", "reshape", "slice", "share"])
        if kind == "share":
            same = [v for v in sc.visible() if v.const and v.dtype == dtype and v.shape == shape]
            if same:
                return self.choice(same)
            kind = "transpose"
        if kind == "transpose" and len(shape) >= 2:
            perm = list(self.r.permutation(len(shape)))
            inv = list(np.argsort(perm))
            src_shape = tuple(shape[i] for i in inv)
            src = self.shared_const(sc, dtype, src_shape)
            return self.node1(sc, "Transpose", [src], dtype, shape, mag=src.mag,
                              perm=[int(p) for p in perm])
        if kind == "slice" or len(shape) < 2:
            extra = [self.randint(0, 2) for _ in shape]
            src = self.shared_const(sc, dtype, tuple(d + e for d, e in zip(shape, extra)))
            starts = [self.randint(0, e) for e in extra]
            ends = [s + d for s, d in zip(starts, shape)]
            return self.node1(sc, "Slice", [src, self.i64(sc, starts), self.i64(sc, ends)],
                              dtype, shape, mag=src.mag)
        if prod(shape) == 0:  # a 0 in a Reshape target copies the input's dim
            return self.const(sc, self.data(dtype, shape))
        src = self.shared_const(sc, dtype, (prod(shape),))
        return self.node1(sc, "Reshape", [src, self.i64(sc, list(shape))], dtype, shape,
                          mag=src.mag)

    def shared_const(self, sc, dtype, shape) -> Val:
        same = [v for v in sc.visible()
                if v.const and v.kind == "init" and v.dtype == dtype and v.shape == shape]
        if same and self.chance(0.6):
            return self.choice(same)
        return self.const(sc, self.data(dtype, shape), how="init")

    # -- picking operands ------------------------------------------------------------------
    def pick(self, sc, pred=None, dtypes=ALL) -> Val | None:
        vis = [v for v in sc.visible() if v.dtype in dtypes and v.dtype in self.cfg.dtypes
               and (pred is None or pred(v))]
        if not vis:
            return None
        if self.chance(0.5):
            own = [v for v in vis if v.scope is sc][-5:]
            if own:
                return self.choice(own)
        return self.choice(vis[-12:] if self.chance(0.5) else vis)

    def operand(self, sc, dtypes=ALL, pred=None, rank=None) -> Val:
        dtypes = [d for d in dtypes if d in self.cfg.dtypes]
        if not dtypes:
            raise Skip("no dtype")
        v = self.pick(sc, pred, dtypes) if self.chance(0.85) else None
        if v is not None:
            return v
        for _ in range(4):
            shape = self.rand_shape(rank, sym=True)
            dtype = self.choice(dtypes)
            if not self.fits(shape, dtype):
                continue
            v = self.fresh(sc, dtype, shape)
            if pred is None or pred(v):
                return v
        raise Skip("no operand")

    def partner(self, sc, x: Val, dtype=None, grow=True, values=None) -> Val:
        """A value of ``dtype`` whose shape broadcasts with ``x``'s (result fits).

        ``values=(lo, hi)``: a new constant with integers in [lo, hi] (divisors, exponents).
        """
        dtype = dtype or x.dtype
        if values is not None:
            shape = self.into(x.shape)
            return self.const(sc, np.asarray(
                self.r.integers(values[0], values[1] + 1, size=shape)).astype(NP[dtype]))
        mode = self.weighted({"visible": 4, "const": 4, "self": 1 if dtype == x.dtype else 0,
                              "input": 1})
        if mode == "self":
            return x
        if mode == "visible":
            cands = [v for v in sc.visible() if v.dtype == dtype and v is not x
                     and (b := self.bcast(x.shape, v.shape)) is not None
                     and self.fits(b, dtype) and (grow or b == x.shape)]
            if cands:
                return self.choice(cands[-10:])
        if mode == "input":
            k = self.randint(0, len(x.shape))
            shape = tuple(d if self.chance(0.7) and (not isinstance(d, str) or d in
                                                     self.base_syms) else 1
                          for d in x.shape[len(x.shape) - k:])
            return self.input(dtype, shape)
        shape = self.into(x.shape)
        if grow and self.chance(0.15):
            shape = (self.randint(1, 3), *(1 if isinstance(d, str) else d for d in x.shape))
            if not self.fits(self.bcast(x.shape, shape), dtype):
                shape = ()
        return self.fresh(sc, dtype, shape, allow_input=False)

    # -- shape tensors ---------------------------------------------------------------------
    def shape_tensor(self, sc, target, sources, force=False) -> Val:
        """An int64 1-D tensor equal to ``target`` at runtime.

        Static dims become literals; symbolic dims are read from a source value that has them
        with Shape -> Gather (or Shape(start, end)) -> Concat. ``force`` uses Shape even for
        static dims found in a source (foldable scaffolding).
        """
        need_shape = force or any(isinstance(d, str) for d in target)
        if not need_shape or not target:
            return self.i64(sc, list(target))
        pieces, lits = [], []
        shapes = {}

        def flush():
            if lits:
                pieces.append(self.i64(sc, list(lits)))
                lits.clear()

        for d in target:
            src = None
            for s in sources:
                if d in s.shape and (isinstance(d, str) or self.chance(0.6)):
                    src = s
                    break
            if src is None:
                if isinstance(d, str):
                    raise Skip("symbol without a source")
                lits.append(d)
                continue
            flush()
            i = src.shape.index(d)
            if self.opset >= 15 and self.chance(0.3):
                piece = self.node1(sc, "Shape", [src], "int64", (1,), mag=BIG,
                                   start=i, end=i + 1)
            else:
                if src.name not in shapes:
                    shapes[src.name] = self.node1(sc, "Shape", [src], "int64",
                                                  (len(src.shape),), mag=BIG)
                full = shapes[src.name]
                if self.chance(0.5):
                    piece = self.node1(sc, "Gather", [full, self.i64(sc, [i])], "int64", (1,),
                                       mag=BIG, axis=0)
                else:
                    g = self.node1(sc, "Gather", [full, self.i64(sc, i, scalar=True)], "int64",
                                   (), mag=BIG, axis=0)
                    piece = self.node1(sc, "Unsqueeze", [g, self.i64(sc, [0])], "int64", (1,),
                                       mag=BIG)
            pieces.append(piece)
        flush()
        if len(pieces) == 1:
            return pieces[0]
        return self.node1(sc, "Concat", pieces, "int64", (len(target),), mag=BIG, axis=0)

    # -- op generators ---------------------------------------------------------------------
    def g_unary(self, sc):
        x = self.operand(sc)
        if x.dtype in FLOATS:
            ops = [o for o in FLOAT_UNARY if self.opset >= UNARY_MIN_OPSET.get(o, 0)]
            if x.dtype == "float16" and self.opset < 21:
                ops.remove("IsInf")
            if not x.shape:
                ops.remove("Softmax")
        elif x.dtype in INTS:
            ops = INT_UNARY
        else:
            ops = BOOL_UNARY
        op = self.choice(ops)
        attrs = {}
        if op == "LeakyRelu" and self.chance(0.5):
            attrs["alpha"] = float(self.choice([0.1, 0.3, 2.0]))
        if op == "Elu" and self.chance(0.5):
            attrs["alpha"] = float(self.choice([0.5, 2.0]))
        if op == "HardSigmoid" and self.chance(0.5):
            attrs.update(alpha=0.3, beta=0.4)
        if op == "Softmax":
            attrs["axis"] = self.randint(-len(x.shape), len(x.shape) - 1)
        if op == "Gelu" and self.chance(0.5):
            attrs["approximate"] = "tanh"
        dtype = "bool" if op in ("IsNaN", "IsInf") else x.dtype
        mag = INF if x.mag == INF and dtype != "bool" else UNARY_MAG[op](x.mag)
        if x.dtype in INTS and mag > IMAX[x.dtype]:
            mag = IMAX[x.dtype]
        return self.node1(sc, op, [x], dtype, x.shape, mag=mag, **attrs)

    def g_binary(self, sc):
        x = self.operand(sc)
        if x.dtype == "bool":
            op = self.choice(["And", "Or", "Xor", "Equal"])
            y = self.partner(sc, x)
            return self.node1(sc, op, [x, y], "bool", self._bshape(x, y), mag=1)
        floats = x.dtype in FLOATS
        ops = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", *COMPARE]
        if floats:
            ops += ["Sum", "Mean"]
        op = self.choice([*ops, "Add", "Mul", "Sub"])
        attrs = {}
        if not floats and op in ("Div", "Mod"):
            y = self.partner(sc, x, values=(1, 5))
        elif not floats and op == "Pow":
            # onnxruntime computes integer Pow through double: an overflow is undefined
            if not x.mag ** 3 < IMAX[x.dtype]:
                raise Skip("integer Pow could overflow")
            y = self.partner(sc, x, values=(0, 3))
        else:
            y = self.partner(sc, x)
        ins = [x, y]
        if op in ("Max", "Min", "Sum", "Mean") and self.chance(0.3):
            ins.append(self.partner(sc, x))
        shape = self._bshape(*ins)
        if op == "Mod" and floats:
            attrs["fmod"] = 1
        mx, my = x.mag, max(v.mag for v in ins[1:])
        if op in COMPARE:
            return self.node1(sc, op, ins, "bool", shape, mag=1)
        mag = {"Add": mx + my, "Sub": mx + my, "Sum": mx + len(ins) * my, "Mul": mx * my,
               "Max": max(mx, my), "Min": max(mx, my), "Mean": max(mx, my)}.get(op)
        if mag is None:
            if floats:
                mag = INF
            elif op == "Div":
                mag = mx
            elif op == "Mod":
                mag = my
            else:  # Pow
                mag = mx ** 3 if mx < 1e6 else INF
        if not floats:
            mag = min(mag, IMAX[x.dtype])
        return self.node1(sc, op, ins, x.dtype, shape, mag=mag, **attrs)

    def _bshape(self, *vals):
        shape = self.bcast(*[v.shape for v in vals])
        if shape is None or not self.fits(shape, vals[0].dtype):
            raise Skip("broadcast")
        return shape

    def g_reduce(self, sc):
        x = self.operand(sc, NUMERIC)
        op = self.choice(REDUCE)
        r = len(x.shape)
        axes = [i for i in range(r) if self.chance(0.5)]
        all_axes = not axes
        reduced = range(r) if all_axes else axes
        noop = False
        if op in ("ReduceMax", "ReduceMin", "ReduceLogSumExp", "ReduceProd") and any(
                self.dmin(x.shape[i]) == 0 for i in reduced):
            raise Skip("empty reduction")
        keep = self.chance(0.5)
        attrs = {"keepdims": 0} if not keep else ({"keepdims": 1} if self.chance(0.5) else {})
        spelled = [a - r if self.chance(0.3) else a for a in axes]
        ins = [x]
        input_axes = op == "ReduceSum" or self.opset >= 18
        if axes:
            if input_axes:
                ins.append(self.i64(sc, spelled))
            else:
                attrs["axes"] = spelled
        elif input_axes and self.chance(0.3):
            if self.chance(0.5):
                noop = True
                attrs["noop_with_empty_axes"] = 1
                if self.chance(0.5):
                    ins.append(self.i64(sc, np.zeros(0, np.int64)))
            else:
                ins.append(self.i64(sc, np.zeros(0, np.int64)))
        if noop:
            shape = x.shape
            cnt = 1
        else:
            red = set(reduced)
            shape = tuple((1 if i in red else d) for i, d in enumerate(x.shape)
                          if keep or i not in red)
            cnt = self.count([x.shape[i] for i in red])
        mx = x.mag
        mag = {"ReduceSum": mx * cnt, "ReduceL1": mx * cnt, "ReduceMean": mx, "ReduceMax": mx,
               "ReduceMin": mx, "ReduceL2": mx * math.sqrt(cnt) + 1,
               "ReduceSumSquare": mx * mx * cnt,
               "ReduceProd": mx ** cnt if mx < 1e3 and cnt < 64 else INF,
               "ReduceLogSumExp": INF}[op]
        if x.dtype in INTS:
            if op == "ReduceLogSumExp":
                raise Skip("int logsumexp")
            mag = min(mag, IMAX[x.dtype]) if mag != INF else IMAX[x.dtype]
        return self.node1(sc, op, ins, x.dtype, shape, mag=mag, **attrs)

    def g_cumsum(self, sc):
        x = self.operand(sc, NUMERIC if self.opset >= 17 else ("float32", *INTS),
                         pred=lambda v: len(v.shape) >= 1)
        r = len(x.shape)
        axis = self.randint(-r, r - 1)
        ax = self.i64(sc, axis, dtype=self.choice(INTS), scalar=True)
        attrs = {}
        if self.chance(0.3):
            attrs["exclusive"] = 1
        if self.chance(0.3):
            attrs["reverse"] = 1
        mag = x.mag * self.count(x.shape)
        if x.dtype in INTS:
            mag = min(mag, IMAX[x.dtype])
        return self.node1(sc, "CumSum", [x, ax], x.dtype, x.shape, mag=mag, **attrs)

    def g_argmax(self, sc):
        x = self.operand(sc, NUMERIC, pred=lambda v: len(v.shape) >= 1)
        r = len(x.shape)
        axis = self.randint(-r, r - 1)
        if self.dmin(x.shape[axis]) == 0:
            raise Skip("empty argmax")
        keep = self.chance(0.5)
        shape = tuple(1 if i == axis % r else d for i, d in enumerate(x.shape)
                      if keep or i != axis % r)
        op = self.choice(["ArgMax", "ArgMin"])
        return self.node1(sc, op, [x], "int64", shape, mag=max(self.dmin(d) for d in x.shape)
                          + 64, axis=axis, keepdims=int(keep),
                          select_last_index=1 if self.chance(0.3) else None)

    def g_matmul(self, sc):
        x = self.operand(sc, NUMERIC, pred=lambda v: len(v.shape) >= 1)
        K = x.shape[-1]
        wr = self.choice([1, 2, 2, 2, 3])
        n = self.randint(1, 4)
        if wr == 1:
            wshape = (K,)
        elif wr == 2:
            wshape = (K, n)
        else:
            b = x.shape[-3] if len(x.shape) >= 3 and self.chance(0.5) else self.randint(1, 2)
            wshape = (b, K, n)
        if self.chance(0.4):
            w = self.pick(sc, lambda v: v.shape == wshape, dtypes=(x.dtype,))
        else:
            w = None
        if w is None:
            w = self.fresh(sc, x.dtype, wshape)
        shape = self._mmshape(x.shape, w.shape)
        if shape is None or not self.fits(shape, x.dtype):
            raise Skip("matmul shape")
        kmax = max(self.dval(K, a) for a in (0, 1))
        mag = x.mag * w.mag * max(kmax, 1)
        if x.dtype in INTS:
            mag = min(mag, IMAX[x.dtype])
        return self.node1(sc, "MatMul", [x, w], x.dtype, shape, mag=mag)

    def _mmshape(self, a, b):
        if len(a) == 1 and len(b) == 1:
            return ()
        if len(b) == 1:
            return tuple(a[:-1])
        if len(a) == 1:
            return (*b[:-2], b[-1])
        batch = self.bcast(a[:-2], b[:-2])
        if batch is None:
            return None
        return (*batch, a[-2], b[-1])

    def g_gemm(self, sc):
        a = self.operand(sc, FLOATS, pred=lambda v: len(v.shape) == 2, rank=2)
        ta = self.chance(0.3)
        M, K = (a.shape[1], a.shape[0]) if ta else a.shape
        N = self.randint(1, 4)
        tb = self.chance(0.4)
        bshape = (N, K) if tb else (K, N)
        b = self.pick(sc, lambda v: v.shape == bshape, dtypes=(a.dtype,)) \
            if self.chance(0.3) else None
        b = b or self.fresh(sc, a.dtype, bshape)
        ins = [a, b]
        cm = 0
        if self.chance(0.7):
            cshape = self.choice([(), (N,), (1, N), (M, N), (M, 1)])
            if not self.static(cshape):
                cshape = (1, N)
            c = self.fresh(sc, a.dtype, cshape)
            ins.append(c)
            cm = c.mag
        attrs = {"transA": int(ta) if ta or self.chance(0.3) else None,
                 "transB": int(tb) if tb or self.chance(0.3) else None}
        alpha = float(self.choice([1.0, 0.5, 2.0])) if self.chance(0.4) else None
        beta = float(self.choice([1.0, 0.5, -1.0])) if self.chance(0.4) else None
        kmax = max(self.dval(K, i) for i in (0, 1))
        mag = a.mag * b.mag * max(kmax, 1) * 2 + 2 * cm
        shape = (M, N)
        if not self.fits(shape, a.dtype):
            raise Skip("gemm")
        return self.node1(sc, "Gemm", ins, a.dtype, shape, mag=mag, alpha=alpha, beta=beta,
                          **attrs)

    def g_transpose(self, sc):
        x = self.operand(sc, pred=lambda v: len(v.shape) >= 1)
        r = len(x.shape)
        if self.chance(0.2):
            return self.node1(sc, "Transpose", [x], x.dtype, x.shape[::-1], mag=x.mag)
        perm = [int(p) for p in self.r.permutation(r)]
        return self.node1(sc, "Transpose", [x], x.dtype, tuple(x.shape[p] for p in perm),
                          mag=x.mag, perm=perm)

    def _factor(self, n: int, k: int) -> list:
        """``n`` as a product of ``k`` random factors (some may be 1)."""
        out = [1] * k
        f = 2
        m = n
        primes = []
        while m > 1:
            while m % f == 0:
                primes.append(f)
                m //= f
            f += 1
        for p in primes:
            out[self.randint(0, k - 1)] *= p
        return out

    def g_reshape(self, sc, scaffold=False):
        x = self.operand(sc, pred=lambda v: not self.maybe_empty(v.shape))
        if self.maybe_empty(x.shape):
            raise Skip("empty reshape")
        syms = [d for d in x.shape if isinstance(d, str)]
        static = prod(d for d in x.shape if isinstance(d, int))
        k = self.randint(0, 3)
        lits = self._factor(static, k) if k else ([] if static == 1 else [static])
        items = [["sym", s] for s in syms] + [["lit", d] for d in lits]
        items = [items[i] for i in self.r.permutation(len(items))]
        if syms and lits and self.chance(0.3):
            # a symbol absorbs a literal factor: that dim can only be spelled -1
            si = next(i for i, it in enumerate(items) if it[0] == "sym")
            li = next(i for i, it in enumerate(items) if it[0] == "lit")
            f = items[li][1]
            s = items[si][1]
            items[si] = ["merged", self.dims_combine([s], lambda v, f=f: v[0] * f)]
            del items[li]
        shape = tuple(it[1] for it in items)
        if not self.fits(shape, x.dtype):
            raise Skip("reshape")
        spelled = [None] * len(items)
        neg_used = False
        for i, (kind, d) in enumerate(items):
            if kind == "merged":
                if isinstance(d, int):  # f == 1 or the symbol's values coincide
                    kind = "lit"
                else:
                    spelled[i] = -1
                    neg_used = True
        if sum(1 for s in spelled if s == -1) > 1:
            raise Skip("two -1")
        for i, (kind, d) in enumerate(items):
            if spelled[i] is not None:
                continue
            if i < len(x.shape) and x.shape[i] == d and self.chance(0.4):
                spelled[i] = 0
            elif not neg_used and self.chance(0.3 if kind == "sym" else 0.1):
                spelled[i] = -1
                neg_used = True
            elif isinstance(d, int) and not (scaffold and d in x.shape and self.chance(0.6)):
                spelled[i] = d
        if any(s is None for s in spelled):
            st = self._scaffold(sc, shape, x, spelled)
        else:
            st = self.i64(sc, spelled if spelled else np.zeros(0, np.int64))
        return self.node1(sc, "Reshape", [x, st], x.dtype, shape, mag=x.mag)

    def _scaffold(self, sc, target, x, spelled):
        """Shape tensor: ``None`` entries of ``spelled`` come from Shape(x), others literal."""
        if not target:
            return self.i64(sc, np.zeros(0, np.int64))
        shp = self.node1(sc, "Shape", [x], "int64", (len(x.shape),), mag=BIG)
        pieces, lits = [], []
        for s, d in zip(spelled, target):
            if s is None:
                if lits:
                    pieces.append(self.i64(sc, lits))
                    lits = []
                i = x.shape.index(d)
                if self.chance(0.5):
                    pieces.append(self.node1(sc, "Gather", [shp, self.i64(sc, [i])], "int64",
                                             (1,), mag=BIG, axis=0))
                else:
                    g = self.node1(sc, "Gather", [shp, self.i64(sc, i, scalar=True)], "int64",
                                   (), mag=BIG, axis=0)
                    pieces.append(self.node1(sc, "Unsqueeze", [g, self.i64(sc, [0])], "int64",
                                             (1,), mag=BIG))
            else:
                lits.append(int(s))
        if lits:
            pieces.append(self.i64(sc, lits))
        if len(pieces) == 1:
            return pieces[0]
        return self.node1(sc, "Concat", pieces, "int64", (len(target),), mag=BIG, axis=0)

    def g_shape_reshape(self, sc):
        if self.chance(0.3):
            # flatten through Size: Reshape(x, Unsqueeze(Size(x), 0))
            x = self.operand(sc, pred=lambda v: len(v.shape) >= 1)
            size = self.node1(sc, "Size", [x], "int64", (), mag=BIG)
            st = self.node1(sc, "Unsqueeze", [size, self.i64(sc, [0])], "int64", (1,), mag=BIG)
            n = self.dims_combine(x.shape, prod)
            # a size of 0 would read as "copy the dim" unless allowzero
            allowzero = 1 if self.maybe_empty(x.shape) else None
            if allowzero and self.opset < 14:
                raise Skip("empty flatten")
            return self.node1(sc, "Reshape", [x, st], x.dtype, (n,), mag=x.mag,
                              allowzero=allowzero)
        return self.g_reshape(sc, scaffold=True)

    def g_shape_data(self, sc):
        """Shape (or Size) values used as data: Shape -> [Gather] -> Cast -> arithmetic."""
        x = self.operand(sc)
        r = len(x.shape)
        if self.chance(0.3):
            v = self.node1(sc, "Size", [x], "int64", (), mag=self.count(x.shape))
        elif self.opset >= 15 and r and self.chance(0.3):
            s = self.randint(-r - 1, r)
            e = self.randint(-r - 1, r + 1)
            n = len(range(r)[slice(s, e)])
            v = self.node1(sc, "Shape", [x], "int64", (n,), mag=max([self.count((d,)) for d
                                                                      in x.shape] + [1]),
                           start=s, end=e)
        else:
            v = self.node1(sc, "Shape", [x], "int64", (r,), mag=max(
                [self.count((d,)) for d in x.shape] + [1]))
        if v.shape and v.shape[0] and self.chance(0.5):
            idx = self.i64(sc, self.randint(0, v.shape[0] - 1), scalar=self.chance(0.5))
            v = self.node1(sc, "Gather", [v, idx], "int64", idx.shape, mag=v.mag, axis=0)
        if self.chance(0.6):
            to = self.choice([d for d in NUMERIC if d in self.cfg.dtypes] or ["int64"])
            v = self.node1(sc, "Cast", [v], to, v.shape, mag=v.mag, to=ELEM[to])
        return v

    def g_flatten(self, sc):
        x = self.operand(sc)
        r = len(x.shape)
        axis = self.randint(-r, r)
        a = axis + r if axis < 0 else axis
        shape = (self.dims_combine(x.shape[:a], prod), self.dims_combine(x.shape[a:], prod))
        return self.node1(sc, "Flatten", [x], x.dtype, shape, mag=x.mag,
                          axis=axis if axis != 1 or self.chance(0.5) else None)

    def g_squeeze(self, sc):
        x = self.operand(sc, pred=lambda v: 1 in v.shape)
        ones = [i for i, d in enumerate(x.shape) if d == 1]
        if not ones:
            raise Skip("no 1")
        r = len(x.shape)
        syms_may_be_1 = any(isinstance(d, str) and 1 in self.syms[d] for d in x.shape)
        if not syms_may_be_1 and self.chance(0.25):
            shape = tuple(d for d in x.shape if d != 1)
            return self.node1(sc, "Squeeze", [x], x.dtype, shape, mag=x.mag)
        axes = [i for i in ones if self.chance(0.6)] or [ones[0]]
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        spelled = [a - r if self.chance(0.3) else a for a in axes]
        return self.node1(sc, "Squeeze", [x, self.i64(sc, spelled)], x.dtype, shape,
                          mag=x.mag)

    def g_unsqueeze(self, sc):
        x = self.operand(sc)
        r = len(x.shape)
        k = self.randint(1, 2)
        n = r + k
        if n > 5:
            raise Skip("rank")
        axes = sorted(int(a) for a in self.r.choice(n, size=k, replace=False))
        shape = list(x.shape)
        for a in axes:
            shape.insert(a, 1)
        spelled = [a - n if self.chance(0.3) else a for a in axes]
        if self.chance(0.3):
            spelled = spelled[::-1]
        return self.node1(sc, "Unsqueeze", [x, self.i64(sc, spelled)], x.dtype, tuple(shape),
                          mag=x.mag)

    def g_concat(self, sc):
        x = self.operand(sc, pred=lambda v: len(v.shape) >= 1)
        r = len(x.shape)
        axis = self.randint(0, r - 1)
        parts = [x]
        for _ in range(self.randint(1, 2)):
            mode = self.choice(["self", "visible", "fresh", "fresh"])
            if mode == "self":
                parts.append(x)
                continue
            if mode == "visible":
                cands = [v for v in sc.visible() if v.dtype == x.dtype and len(v.shape) == r
                         and all(v.shape[i] == x.shape[i] for i in range(r) if i != axis)]
                if cands:
                    parts.append(self.choice(cands))
                    continue
            shape = list(x.shape)
            shape[axis] = self.randint(0 if self.chance(0.05) else 1, 3)
            parts.append(self.fresh(sc, x.dtype, tuple(shape)))
        shape = list(x.shape)
        shape[axis] = self.dims_combine([p.shape[axis] for p in parts], sum)
        shape = tuple(shape)
        if not self.fits(shape, x.dtype):
            raise Skip("concat")
        spelled = axis - r if self.chance(0.3) else axis
        return self.node1(sc, "Concat", parts, x.dtype, shape, mag=max(p.mag for p in parts),
                          axis=spelled)

    def g_slice(self, sc):
        x = self.operand(sc, pred=lambda v: len(v.shape) >= 1)
        r = len(x.shape)
        axes = [i for i in range(r) if self.chance(0.5)] or [self.randint(0, r - 1)]
        if self.chance(0.3):
            axes = list(self.r.permutation(axes))
        idt = self.choice(INTS)
        big = BIG if idt == "int64" else IMAX["int32"]
        starts, ends, steps = [], [], []
        shape = list(x.shape)
        for a in axes:
            step = int(self.choice([1, 1, 1, 1, 2, -1, -1, -2, 3]))
            vals = [-6, -3, -2, -1, 0, 0, 1, 2, 3, 6, big, -big]
            s, e = int(self.choice(vals)), int(self.choice(vals))
            if step > 0 and self.chance(0.4):
                s, e = self.randint(0, 2), big
            if step < 0 and self.chance(0.4):
                s, e = -1, -big
            if step < 0 and e == big and idt == "int32":
                # onnxruntime reads an int32 INT_MAX end as "to the beginning" when stepping
                # backwards (the spec clamps it to dim - 1: an empty slice)
                e = -big
            starts.append(s)
            ends.append(e)
            steps.append(step)
            shape[a] = self.dim_of(tuple(slice_len(s, e, step, self.dval(x.shape[a], k))
                                         for k in (0, 1)))
        ins = [x, self.i64(sc, starts, idt), self.i64(sc, ends, idt)]
        dflt_axes = axes == list(range(len(axes)))
        with_steps = any(st != 1 for st in steps) or self.chance(0.3)
        if not dflt_axes or with_steps or self.chance(0.5):
            ins.append(self.i64(sc, [a - r if self.chance(0.3) else a for a in axes], idt))
        if with_steps:
            ins.append(self.i64(sc, steps, idt))
        return self.node1(sc, "Slice", ins, x.dtype, tuple(shape), mag=x.mag)

    def g_gather(self, sc):
        x = self.operand(sc, pred=lambda v: len(v.shape) >= 1 and any(
            self.dmin(d) > 0 for d in v.shape))
        r = len(x.shape)
        axes = [i for i in range(r) if self.dmin(x.shape[i]) > 0]
        if not axes:
            raise Skip("gather")
        axis = self.choice(axes)
        d = self.dmin(x.shape[axis])
        ishape = self.rand_shape(self.choice([0, 1, 1, 2]))
        ishape = tuple(min(k, 3) for k in ishape)
        idt = self.choice(INTS)
        if self.chance(0.2) and sc.parent is None:
            idx = self.input(idt, ishape, -d, d)
        else:
            arr = self.r.integers(-d, d, size=ishape).astype(NP[idt])
            idx = self.const(sc, arr)
        shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
        if not self.fits(shape, x.dtype):
            raise Skip("gather size")
        spelled = axis - r if self.chance(0.3) else axis
        return self.node1(sc, "Gather", [x, idx], x.dtype, shape, mag=x.mag,
                          axis=spelled if spelled or self.chance(0.5) else None)

    def g_cast(self, sc):
        x = self.operand(sc)
        to = self.choice(list(self.cfg.dtypes))
        if x.dtype in FLOATS and to in INTS and not x.mag < min(IMAX[to] / 2, 2**60):
            to = self.choice([d for d in self.cfg.dtypes if d not in INTS] or [x.dtype])
        mag = x.mag
        if to == "float16" and mag > FMAX["float16"]:
            mag = INF
        if x.dtype in FLOATS and to in INTS and not x.mag < IMAX[to] / 2:
            raise Skip("unsafe cast")
        return self.node1(sc, "Cast", [x], to, x.shape, mag=mag, to=ELEM[to])

    def g_where(self, sc):
        x = self.operand(sc, NUMERIC)
        y = self.partner(sc, x)
        c = self.pick(sc, lambda v: self.bcast(v.shape, x.shape, y.shape) is not None,
                      dtypes=("bool",)) if self.chance(0.6) else None
        if c is None:
            if self.chance(0.5):
                z = self.partner(sc, x)
                c = self.node1(sc, self.choice(COMPARE), [x, z], "bool",
                               self._bshape(x, z), mag=1)
            else:
                c = self.partner(sc, x, dtype="bool")
        shape = self.bcast(c.shape, x.shape, y.shape)
        if shape is None or not self.fits(shape, x.dtype):
            raise Skip("where")
        return self.node1(sc, "Where", [c, x, y], x.dtype, shape, mag=max(x.mag, y.mag))

    def g_expand(self, sc):
        x = self.operand(sc)
        lead = self.randint(0, 2 if len(x.shape) < 4 else 0)
        target = [self.randint(1, 3) for _ in range(lead)]
        out = list(target)
        for d in x.shape:
            if d == 1:
                t = self.choice([1, 2, 3, 4])
            elif isinstance(d, str):
                t = 1 if self.chance(0.6) else d
            else:
                t = d if self.chance(0.6) else 1
            target.append(t)
            out.append(d if t == 1 else t)
        shape = tuple(out)
        if not self.fits(shape, x.dtype):
            raise Skip("expand")
        st = self.shape_tensor(sc, target, [x], force=self.chance(0.3))
        return self.node1(sc, "Expand", [x, st], x.dtype, shape, mag=x.mag)

    def g_tile(self, sc):
        x = self.operand(sc, pred=lambda v: len(v.shape) >= 1)
        reps = [self.choice([1, 1, 2, 3]) for _ in x.shape]
        shape = tuple(d if k == 1 else self.dims_combine([d], lambda v, k=k: v[0] * k)
                      for d, k in zip(x.shape, reps))
        if not self.fits(shape, x.dtype):
            raise Skip("tile")
        return self.node1(sc, "Tile", [x, self.i64(sc, reps)], x.dtype, shape, mag=x.mag)

    def g_constant_of_shape(self, sc):
        dtype = self.choice(self.cfg.dtypes)
        if self.chance(0.5):
            x = self.operand(sc)
            target = tuple(x.shape)
            if not target and self.chance(0.5):
                target = (self.randint(1, 3),)
            st = self.shape_tensor(sc, target, [x], force=True) if x.shape else \
                self.i64(sc, list(target))
        else:
            target = self.rand_shape()
            st = self.i64(sc, list(target) if target else np.zeros(0, np.int64))
        if not self.fits(target, dtype):
            raise Skip("cos")
        attrs = {}
        mag = 0
        if self.chance(0.8) or dtype != "float32":
            arr = self.data(dtype, (1,))
            mag = self.mag_of(arr)
            attrs["value"] = numpy_helper.from_array(arr, self.name("t"))
        return self.node1(sc, "ConstantOfShape", [st], dtype, target, mag=mag, **attrs)

    def g_range(self, sc):
        dtype = self.choice([d for d in ("int64", "int32", "float32") if d in self.cfg.dtypes]
                            or ["int64"])
        start = self.randint(-3, 3)
        delta = self.choice([1, 1, 2, 3, -1, -2] + ([0.5] if dtype == "float32" else []))
        npd = NP[dtype]
        sv = self.const(sc, np.array(start, npd))
        dv = self.const(sc, np.array(delta, npd))
        if self.chance(0.4):
            # limit from a dim (Shape -> Gather), symbolic or static
            x = self.operand(sc, pred=lambda v: len(v.shape) >= 1)
            i = self.randint(0, len(x.shape) - 1)
            shp = self.node1(sc, "Shape", [x], "int64", (len(x.shape),), mag=BIG)
            g = self.node1(sc, "Gather", [shp, self.i64(sc, i, scalar=True)], "int64", (),
                           mag=BIG, axis=0)
            lim = [self.dval(x.shape[i], a) for a in (0, 1)]
            if dtype != "int64":
                g = self.node1(sc, "Cast", [g], dtype, (), mag=BIG, to=ELEM[dtype])
            if delta < 0:
                g = self.node1(sc, "Neg", [g], dtype, (), mag=BIG)
                lim = [-v for v in lim]
            lv = g
        else:
            limit = start + delta * self.randint(0, 8) + (0.3 if dtype == "float32" and
                                                          self.chance(0.3) else 0)
            lv = self.const(sc, np.array(limit, npd))
            lim = [limit, limit]
        n = self.dim_of(tuple(max(math.ceil((lim[a] - start) / delta), 0) for a in (0, 1)))
        if not self.fits((n,), dtype):
            raise Skip("range")
        mag = abs(start) + abs(delta) * max(self.dval(n, a) for a in (0, 1)) + 1
        return self.node1(sc, "Range", [sv, lv, dv], dtype, (n,), mag=mag)

    def g_pad(self, sc):
        x = self.operand(sc, pred=lambda v: len(v.shape) >= 1)
        r = len(x.shape)
        mode = self.choice(["constant", "constant", "edge", "reflect"])
        pads = [self.randint(0, 2) for _ in range(2 * r)]
        for i, d in enumerate(x.shape):
            m = self.dmin(d)
            if (mode == "edge" and m < 1) or (mode == "reflect" and m < 2):
                pads[i] = pads[i + r] = 0
            if mode == "reflect":
                pads[i] = min(pads[i], m - 1) if m >= 2 else 0
                pads[i + r] = min(pads[i + r], m - 1) if m >= 2 else 0
        if mode != "constant" and self.maybe_empty(x.shape):
            raise Skip("pad empty")
        shape = tuple(d if pads[i] + pads[i + r] == 0 else self.dims_combine(
            [d], lambda v, k=pads[i] + pads[i + r]: v[0] + k) for i, d in enumerate(x.shape))
        if not self.fits(shape, x.dtype):
            raise Skip("pad")
        ins = [x, self.i64(sc, pads)]
        mag = x.mag
        if mode == "constant" and x.dtype != "bool" and self.chance(0.5):
            ins.append(self.const(sc, self.data(x.dtype, ())))
            mag = max(mag, ins[-1].mag)
        return self.node1(sc, "Pad", ins, x.dtype, shape, mag=mag,
                          mode=mode if mode != "constant" or self.chance(0.3) else None)

    def g_split(self, sc):
        x = self.operand(sc, pred=lambda v: any(isinstance(d, int) and d >= 2 for d in v.shape))
        axes = [i for i, d in enumerate(x.shape) if isinstance(d, int) and d >= 2]
        if not axes:
            raise Skip("split")
        axis = self.choice(axes)
        d = x.shape[axis]
        k = self.randint(2, min(d, 3))
        if self.opset >= 18 and self.chance(0.5):
            while True:
                q = -(-d // k)
                sizes = [q] * (d // q) + ([d % q] if d % q else [])
                if len(sizes) == k:
                    break
                k = len(sizes)
            ins, attrs = [x], {"num_outputs": k}
        else:
            cuts = sorted(int(c) for c in self.r.choice(range(1, d), size=k - 1, replace=False))
            sizes = [b - a for a, b in zip([0, *cuts], [*cuts, d])]
            ins, attrs = [x, self.i64(sc, sizes)], {}
        outs = []
        for s in sizes:
            shape = list(x.shape)
            shape[axis] = s
            outs.append((x.dtype, tuple(shape), x.mag))
        return self.node(sc, "Split", ins, outs, axis=axis, **attrs)[0]

    def g_clip(self, sc):
        x = self.operand(sc, NUMERIC)
        lo = self.const(sc, np.array(self.randint(-3, 0), NP[x.dtype])) \
            if self.chance(0.7) else None
        hi = self.const(sc, np.array(self.randint(0, 3), NP[x.dtype])) \
            if self.chance(0.7) else None
        ins = [x, lo] + ([hi] if hi is not None else [])
        while ins[-1] is None:
            ins.pop()
        mag = 3 if lo is not None and hi is not None else x.mag
        if x.mag == INF and x.dtype in FLOATS:
            mag = INF
        return self.node1(sc, "Clip", ins, x.dtype, x.shape, mag=mag)

    # -- control flow ----------------------------------------------------------------------
    def vinfo(self, v: Val, shaped=True):
        dims = [d if shaped and (isinstance(d, int) or d in self.base_syms) else None
                for d in v.shape]
        return helper.make_tensor_value_info(v.name, ELEM[v.dtype], dims)

    def body_graph(self, bs: Scope, outputs: list[Val], inputs=()):
        shaped = self.chance(0.7)
        outs = [self.vinfo(v, shaped) for v in outputs]
        for v in outputs:
            v.uses += 1
        ins = [self.vinfo(v) for v in inputs]
        return helper.make_graph(bs.nodes, self.name("body"), ins, outs, bs.inits)

    def grow_body(self, bs: Scope):
        lo, hi = self.cfg.body_ops
        for _ in range(self.randint(lo, hi)):
            self.step(bs, BODY_WEIGHTS)

    def preserve(self, sc, v: Val, steps=None) -> Val:
        """A value of ``v``'s dtype and shape computed from ``v`` in ``sc``."""
        steps = self.randint(1, 3) if steps is None else steps
        start = v
        for _ in range(steps):
            kind = self.weighted({"unary": 3, "binary": 5, "where": 1,
                                  "reshape": 1 if not self.maybe_empty(v.shape) and v.shape
                                  else 0})
            if kind == "unary":
                if v.dtype in FLOATS:
                    op = self.choice(SAFE_UNARY)
                elif v.dtype in INTS:
                    op = self.choice(["Neg", "Abs", "Identity"])
                else:
                    op = self.choice(BOOL_UNARY)
                v = self.node1(sc, op, [v], v.dtype, v.shape, mag=UNARY_MAG[op](v.mag)
                               if v.mag != INF else INF)
            elif kind == "binary":
                p = self.partner(sc, v, grow=False)
                if self.bcast(v.shape, p.shape) != v.shape:
                    p = self.const(sc, self.data(v.dtype, self.into(v.shape)))
                if v.dtype == "bool":
                    op = self.choice(["And", "Or", "Xor"])
                    mag = 1
                else:
                    op = self.choice(["Add", "Sub", "Mul", "Max", "Min"])
                    mag = v.mag * p.mag if op == "Mul" else v.mag + p.mag
                    if v.dtype in INTS:
                        mag = min(mag, IMAX[v.dtype])
                v = self.node1(sc, op, [v, p], v.dtype, v.shape, mag=mag)
            elif kind == "where":
                if v.dtype == "bool":
                    v = self.node1(sc, "Not", [v], "bool", v.shape, mag=1)
                    continue
                c = self.const(sc, self.data("bool", self.into(v.shape)))
                p = self.const(sc, self.data(v.dtype, self.into(v.shape)))
                ins = [c, v, p] if self.chance(0.5) else [c, p, v]
                v = self.node1(sc, "Where", ins, v.dtype, v.shape, mag=max(v.mag, p.mag))
            else:
                flat = self.node1(sc, "Reshape", [v, self.i64(sc, [-1])], v.dtype,
                                  (self.dims_combine(v.shape, prod),), mag=v.mag)
                if self.static(v.shape) and self.chance(0.5):
                    st = self.i64(sc, list(v.shape))
                else:
                    st = self.node1(sc, "Shape", [v], "int64", (len(v.shape),), mag=BIG)
                v = self.node1(sc, "Reshape", [flat, st], v.dtype, v.shape, mag=v.mag)
        assert v is not start or steps == 0
        return v

    def produce_like(self, bs: Scope, t: Val, prior: list[Val]) -> Val:
        """A value in body ``bs`` with ``t``'s dtype and shape (for an If branch output)."""
        opts = {"identity": 4, "compute": 5, "dup": 2 if prior else 0,
                "nested": 1 if bs.depth < self.cfg.max_depth else 0,
                "const": 1 if self.static(t.shape) else 0}
        kind = self.weighted(opts)
        if kind == "dup":  # the same value again, through an Identity: onnxruntime computes
            # garbage for a branch returning one value twice
            same = [p for p in prior if p.dtype == t.dtype and p.shape == t.shape]
            if same:
                p = self.choice(same)
                return self.node1(bs, "Identity", [p], p.dtype, p.shape, mag=p.mag)
            kind = "identity"
        if kind == "identity":
            return self.node1(bs, "Identity", [t], t.dtype, t.shape, mag=t.mag)
        if kind == "const":  # a body initializer or Constant (an outer one needs an Identity)
            return self.const(bs, self.data(t.dtype, t.shape), how=self.choice(["init", "node"]))
        if kind == "nested":
            return self.g_if(bs, templates=[t])
        v = self.preserve(bs, t)
        if self.chance(0.4):
            v = self.node1(bs, "Identity", [v], v.dtype, v.shape, mag=v.mag)
        return v

    def cond_value(self, sc) -> Val:
        kind = self.weighted({"const": 3, "computed": 2, "dynamic": 3, "shape": 2})
        shape = () if self.chance(0.7) else (1,)
        if kind == "const":
            return self.const(sc, np.array(self.chance(0.5)).reshape(shape))
        if kind == "computed":
            a = self.const(sc, self.data("float32", shape, special=False))
            b = self.const(sc, self.data("float32", (), special=False))
            return self.node1(sc, "Greater", [a, b], "bool", shape, mag=1)
        if kind == "shape":
            x = self.operand(sc, pred=lambda v: len(v.shape) >= 1)
            shp = self.node1(sc, "Shape", [x], "int64", (len(x.shape),), mag=BIG)
            i = self.randint(0, len(x.shape) - 1)
            idx = self.i64(sc, [i] if shape else i, scalar=not shape)
            g = self.node1(sc, "Gather", [shp, idx], "int64", shape, mag=BIG, axis=0)
            k = self.i64(sc, self.randint(0, 3), scalar=True)
            return self.node1(sc, self.choice(["Greater", "Less", "Equal"]), [g, k], "bool",
                              shape, mag=1)
        x = self.operand(sc, FLOATS + INTS)
        s = self.node1(sc, "ReduceSum", [x], x.dtype, (), mag=INF, keepdims=0)
        zero = self.const(sc, np.array(0, NP[x.dtype]))
        c = self.node1(sc, "Greater", [s, zero], "bool", (), mag=1)
        if shape:
            c = self.node1(sc, "Reshape", [c, self.i64(sc, [1])], "bool", (1,), mag=1)
        return c

    def g_if(self, sc, templates=None):
        if sc.depth >= self.cfg.max_depth:
            raise Skip("depth")
        if templates is None:
            templates = [self.operand(sc) for _ in range(self.randint(1, 3))]
        cond = self.cond_value(sc)
        branches, outs = [], []
        for _ in range(2):
            bs = Scope(sc)
            produced = []
            if self.chance(0.3):
                self.grow_body(bs)
            for t in templates:
                produced.append(self.produce_like(bs, t, produced))
            branches.append(self.body_graph(bs, produced))
            outs.append(produced)
        specs = []
        for i, t in enumerate(templates):
            mag = max(outs[0][i].mag, outs[1][i].mag)
            specs.append((t.dtype, t.shape, mag))
        const = cond.const and all(v.const for o in outs for v in o)
        vals = self.node(sc, "If", [cond], specs, const=const, then_branch=branches[0],
                         else_branch=branches[1])
        return vals[0] if len(vals) == 1 else self.choice(vals)

    def loop_trip_count(self, sc):
        """A Loop's trip count M (a constant, or a dim of a value read through Shape and
        Gather) and the dim its scan outputs get."""
        trip = self.randint(0 if self.chance(0.05) else 1, 4)
        if self.chance(0.2):
            x = self.operand(sc, pred=lambda v: len(v.shape) >= 1 and max(
                self.dval(d, a) for d in v.shape for a in (0, 1)) <= 5)
            i = self.randint(0, len(x.shape) - 1)
            shp = self.node1(sc, "Shape", [x], "int64", (len(x.shape),), mag=BIG)
            M = self.node1(sc, "Gather", [shp, self.i64(sc, i, scalar=True)], "int64", (),
                           mag=BIG, axis=0)
            return M, x.shape[i]
        return self.i64(sc, trip, scalar=True), trip

    def loop_carried_output(self, bs, c):
        """What a Loop body returns for the carried input ``c``: itself, an Identity of it,
        or a value computed from it."""
        kind = self.weighted({"pass": 1, "identity": 1, "compute": 4})
        if kind == "pass":
            return c
        if kind == "identity":
            return self.node1(bs, "Identity", [c], c.dtype, c.shape, mag=INF)
        v = self.preserve(bs, c)
        if self.chance(0.3):
            v = self.node1(bs, "Identity", [v], v.dtype, v.shape, mag=INF)
        return v

    def loop_condition_output(self, bs, it, cin):
        """The condition a Loop body returns (always true): the input condition, an Identity
        of it, a constant, or ``iteration < 100``."""
        ckind = self.choice(["pass", "identity", "const", "less"])
        if ckind == "pass":
            return cin
        if ckind == "identity":
            return self.node1(bs, "Identity", [cin], "bool", (), mag=1)
        if ckind == "const":
            return self.const(bs, np.array(True), how=self.choice(["init", "node"]))
        return self.node1(bs, "Less", [it, self.i64(bs, 100, scalar=True)], "bool", (), mag=1)

    def loop_scan_outputs(self, sc, bs, it, couts, least):
        """``least`` to 2 scan outputs of a Loop body: carried outputs, outer values, the
        iteration number (through an Identity) or values computed in the body."""
        souts = []
        for _ in range(self.randint(least, 2)):
            kind = self.weighted({"carried": 3 if couts else 0, "outer": 2, "compute": 3,
                                  "iter": 1})
            if kind == "carried":
                souts.append(self.choice(couts))
            elif kind == "outer":
                t = self.operand(sc)
                souts.append(self.node1(bs, "Identity", [t], t.dtype, t.shape, mag=t.mag))
            elif kind == "iter":  # onnxruntime mishandles the iteration number returned as is
                souts.append(self.node1(bs, "Identity", [it], "int64", (), mag=8))
            else:
                base = self.pick(bs, lambda v: v.scope is bs) or self.operand(bs)
                souts.append(self.preserve(bs, base, 1))
        return souts

    def g_loop(self, sc):
        if sc.depth >= self.cfg.max_depth:
            raise Skip("depth")
        M, trip_dim = self.loop_trip_count(sc)
        use_cond = self.chance(0.4)
        cond = self.const(sc, np.array(True)) if use_cond else None
        carried = [self.operand(sc) for _ in range(self.randint(0, 2))]
        bs = Scope(sc)
        it = Val(self.name("iter"), "int64", (), False, 8, bs, kind="input")
        cin = Val(self.name("cond"), "bool", (), False, 1, bs, kind="input")
        cins = [Val(self.name("c"), t.dtype, t.shape, False, INF, bs, kind="input")
                for t in carried]
        bs.vals.extend([it, cin, *cins])
        if self.chance(0.5):
            to = self.choice([d for d in NUMERIC if d in self.cfg.dtypes] or ["int64"])
            self.node1(bs, "Cast", [it], to, (), mag=8, to=ELEM[to])
        if self.chance(0.4):
            self.grow_body(bs)
        couts = [self.loop_carried_output(bs, c) for c in cins]
        cout = self.loop_condition_output(bs, it, cin)
        souts = self.loop_scan_outputs(sc, bs, it, couts, 0 if carried else 1)
        graph = self.body_graph(bs, [cout, *couts, *souts], inputs=[it, cin, *cins])
        specs = [(t.dtype, t.shape, INF) for t in carried]
        if souts and self.dmin(trip_dim) == 0:
            # with no iteration onnxruntime cannot know a scan output's element shape (it
            # gives all dims 0)
            raise Skip("empty loop with scan outputs")
        specs.extend((s.dtype, (trip_dim, *s.shape), INF) for s in souts)
        if any(not self.fits(sp[1], sp[0]) for sp in specs):
            raise Skip("loop size")
        vals = self.node(sc, "Loop", [M, cond, *carried], specs, const=False, body=graph)
        return self.choice(vals)

    def scan_state_output(self, bs, s, ident):
        """What a Scan body returns for the state input ``s``: an Identity of it, or a value
        computed from it (through an Identity or not)."""
        if self.chance(0.25):
            return ident(s)
        v = self.preserve(bs, s)
        if self.chance(0.4):
            v = ident(v)
        return v

    def scan_outputs(self, sc, bs, sins, souts, slices, ident, twice):
        """The scan outputs of a Scan body (at least one when it has no state): Identities of
        states, of state inputs, of outer values, or values computed from the slices."""
        youts = []
        if twice:  # the state, and the same value through an Identity as a scan output
            youts.append(ident(souts[0]))
        for _ in range(self.randint(0 if (sins or youts) else 1, 2)):
            kind = self.weighted({"state": 2 if souts else 0, "slice": 3, "outer": 1,
                                  "state_in": 1 if sins else 0})
            if kind == "state":
                youts.append(ident(self.choice(souts)))
            elif kind == "state_in":
                youts.append(ident(self.choice(sins)))
            elif kind == "outer":
                youts.append(ident(self.operand(sc)))
            else:
                y = self.preserve(bs, self.choice(slices), self.randint(0, 2))
                youts.append(ident(y) if y in slices or self.chance(0.3) else y)
        return youts

    def scan_attributes(self, xs, axes, youts, oaxes):
        """A Scan's attributes: the scan input count, and sometimes its axes and directions."""
        attrs = {"num_scan_inputs": len(xs)}
        if any(axes) or self.chance(0.2):
            attrs["scan_input_axes"] = axes
        if self.chance(0.3):
            attrs["scan_input_directions"] = [self.randint(0, 1) for _ in xs]
        if youts and (any(oaxes) or self.chance(0.2)):
            attrs["scan_output_axes"] = oaxes
        if youts and self.chance(0.3):
            attrs["scan_output_directions"] = [self.randint(0, 1) for _ in youts]
        return attrs

    def g_scan(self, sc):
        if sc.depth >= self.cfg.max_depth:
            raise Skip("depth")
        x = self.operand(sc, pred=lambda v: len(v.shape) >= 1 and self.dmin(v.shape[0]) >= 1
                         and not self.maybe_empty(v.shape))
        if self.maybe_empty(x.shape) or self.dmin(x.shape[0]) < 1:
            raise Skip("scan input")
        ax = 0
        if len(x.shape) >= 2 and self.chance(0.25) and self.dmin(x.shape[1]) >= 1:
            ax = self.choice([1, -1]) if len(x.shape) == 2 else 1
        axn = ax % len(x.shape)
        L = x.shape[axn]
        xs = [x]
        if self.chance(0.3):
            cands = [v for v in sc.visible() if len(v.shape) >= 1 and v.shape[0] == L
                     and not self.maybe_empty(v.shape)]
            xs.append(self.choice(cands) if cands else x)
        axes = [ax] + [ax if v is x else 0 for v in xs[1:]]
        states = [self.operand(sc) for _ in range(self.randint(0, 2))]
        if any(self.maybe_empty(t.shape) for t in states):
            raise Skip("empty scan state")
        bs = Scope(sc)
        sins = [Val(self.name("s"), t.dtype, t.shape, False, INF, bs, kind="input")
                for t in states]
        slices = []
        for v, a in zip(xs, axes):
            a %= len(v.shape)
            shape = v.shape[:a] + v.shape[a + 1:]
            slices.append(Val(self.name("x"), v.dtype, shape, False, v.mag, bs, kind="input"))
        bs.vals.extend(sins + slices)
        if self.chance(0.4):
            self.grow_body(bs)
        # onnxruntime computes garbage when a Scan body returns one of its inputs as is or one
        # value twice: the original only ever has the Identity forms (which a folder must keep)
        ident = lambda v: self.node1(bs, "Identity", [v], v.dtype, v.shape, mag=INF)  # noqa: E731 - a shorthand used below
        twice = self.chance(0.25) and sins
        souts = [self.scan_state_output(bs, s, ident) for s in sins]
        youts = self.scan_outputs(sc, bs, sins, souts, slices, ident, twice)
        seen = set()
        for outs in (souts, youts):
            for i, v in enumerate(outs):
                if v.name in seen:
                    outs[i] = ident(v)
                seen.add(outs[i].name)
        graph = self.body_graph(bs, souts + youts, inputs=sins + slices)
        specs = [(t.dtype, t.shape, INF) for t in states]
        oaxes = []
        for y in youts:
            oa = self.randint(0, len(y.shape)) if self.chance(0.25) else 0
            oaxes.append(oa)
            shape = list(y.shape)
            shape.insert(oa, L)
            specs.append((y.dtype, tuple(shape), INF))
        if any(not self.fits(sp[1], sp[0]) or self.maybe_empty(sp[1]) for sp in specs) \
                or not specs:
            raise Skip("scan size")
        attrs = self.scan_attributes(xs, axes, youts, oaxes)
        vals = self.node(sc, "Scan", states + xs, specs, const=False, body=graph, **attrs)
        return self.choice(vals)

    # -- driver ----------------------------------------------------------------------------
    def step(self, sc, table=None):
        table = table if table is not None else self.weights
        if self.cfg.ops is not None:
            table = {k: v for k, v in table.items() if k in self.cfg.ops}
        if not table:
            return None
        for _ in range(6):
            kind = self.weighted(table)
            try:
                return getattr(self, f"g_{kind}")(sc)
            except Skip:
                continue
        return None

    def build(self) -> Case:
        cfg = self.cfg
        n_syms = self.choice([0, 1, 1, 2])
        for s in ("N", "M")[:n_syms]:
            a = self.randint(1, 4)
            b = self.choice([v for v in range(1, 6) if v != a])
            self.syms[s] = (a, b)
            self.base_syms.append(s)
        for _ in range(self.randint(1, 3)):
            dtype = self.choice(cfg.dtypes)
            shape = self.rand_shape(sym=True)
            if self.fits(shape, dtype):
                self.input(dtype, shape)
        for _ in range(self.randint(0, 3)):
            dtype = self.choice(cfg.dtypes)
            shape = self.rand_shape()
            self.const(self.root, self.data(dtype, shape), how="init")
        overridable = []
        if self.chance(0.05):
            dtype = self.choice(cfg.dtypes)
            v = self.const(self.root, self.data(dtype, self.rand_shape(self.randint(0, 2))),
                           how="init")
            v.const = False
            overridable.append(v)
        for _ in range(self.randint(cfg.min_ops, cfg.max_ops)):
            self.step(self.root)
        return self.finish(overridable)

    def finish(self, overridable) -> Case:
        root = self.root
        nodes_out = [v for v in root.vals if v.kind == "node"]
        leaves = [v for v in nodes_out if v.uses == 0]
        self.r.shuffle(leaves)
        outs = leaves[:self.cfg.max_outputs]
        others = [v for v in root.vals if v not in outs]
        for _ in range(self.randint(0, 2)):
            if others and self.chance(0.5):
                v = self.choice(others)
                if v.kind != "node" and not self.chance(0.2):
                    continue
                if v not in outs:
                    outs.append(v)
        if not outs:
            outs = [root.vals[-1]]
        shaped = self.chance(0.8)
        graph = helper.make_graph(
            root.nodes, "fuzz",
            self.graph_inputs + [helper.make_tensor_value_info(v.name, ELEM[v.dtype],
                                                               list(v.shape))
                                 for v in overridable],
            [self.vinfo(v, shaped) for v in outs], root.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="onnxfold-fuzz")
        model.ir_version = IR_FOR_OPSET[self.opset]
        assignments = [{s: self.syms[s][a] for s in self.base_syms} for a in (0, 1)]
        expected = {v.name: (v.dtype, [self.conc(v.shape, a) for a in (0, 1)]) for v in outs}
        helper.set_model_props(model, {"fuzz.seed": str(self.seed),
                                       "fuzz.assignments": json.dumps(assignments)})
        return Case(self.seed, model, assignments, list(self.specs), expected,
                    count_ops(model.graph), self.cfg)


def count_ops(graph) -> dict:
    ops: dict = {}
    for n in graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                for k, v in count_ops(a.g).items():
                    ops[k] = ops.get(k, 0) + v
    return ops


def generate(seed: int, config: Config | None = None) -> Case:
    """The model of ``seed`` (deterministic for a given config)."""
    return Gen(seed, config).build()
