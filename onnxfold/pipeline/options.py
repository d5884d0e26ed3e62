"""``FoldOptions``: the options of the pipeline, with each field's command-line flag beside it.

A field's flag (name, help, how its text is parsed) is data in the field's metadata
(:class:`Flag`), so a name, a default and a help text are written once, here; the command line
(``onnxfold.app.parser``) builds its flags from it. The defaults of what the fold reads are the
fold's own (``onnxfold.fold.settings``), and :meth:`FoldOptions.fold_settings` hands the fold
that slice; the rewrite and the cleanups get theirs as ``RunSettings``
(:meth:`FoldOptions.run_settings`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from onnxfold.analysis.input_shapes import InputShapes, as_specs, parse
from onnxfold.analysis.settings import RunSettings
from onnxfold.errors import InputError
from onnxfold.fold.settings import Evaluation, FoldSettings, SizePolicy
from onnxfold.numbers import parse_bytes, parse_float, parse_int
from onnxfold.pipeline.metadata import MODES


@dataclass(frozen=True)
class Flag:
    """How a field appears on the command line.

    ``parse``: how the flag's text becomes the value (one of ``onnxfold.numbers``' parsers,
    raising ``NumberError``), at least ``minimum`` when set; none: the text itself.
    ``switch``: a boolean flag that sets the field to the opposite of its default
    (``--no-fallback`` for ``fallback=True``); ``repeat``: a repeatable flag collected into the
    field's collection; ``none_flag``: a second flag that sets the field to None; ``choices``:
    the values ``--flag=VALUE`` takes, ``--flag`` alone meaning the first.
    """

    name: str
    help: str
    parse: Callable[..., Any] | None = None
    minimum: float | None = None
    switch: bool = False
    repeat: bool = False
    metavar: str | None = None
    none_flag: tuple[str, str] | None = None
    choices: tuple[str, ...] | None = None


def _opt(default: Any, flag: Flag, factory: Callable[[], Any] | None = None) -> Any:
    if factory is not None:
        return field(default_factory=factory, metadata={"cli": flag})
    return field(default=default, metadata={"cli": flag})


def _names(given: str | Iterable[str]) -> tuple[str, ...]:
    """Names given as one string or a collection of them (a string is one name, not its
    letters)."""
    return (given,) if isinstance(given, str) else tuple(given)


def flag_of(option: Any) -> Flag:
    """The :class:`Flag` of a ``dataclasses.Field`` of :class:`FoldOptions`."""
    flag: Flag = option.metadata["cli"]
    return flag


@dataclass(frozen=True, kw_only=True)
class FoldOptions:
    """What may be folded, and how: the options of one run of the pipeline.

    Every field has a command-line flag of the same meaning (its metadata, :class:`Flag`).
    The passes do not read this object: each is given its slice (:meth:`fold_settings`,
    :meth:`run_settings`, and single fields), built once per run. A value: frozen and
    hashable (its collections are stored as a frozenset and tuples, whatever was given);
    ``dataclasses.replace(options, field=...)`` makes a changed copy.
    """

    disabled_rules: AbstractSet[str] = _opt(frozenset(), Flag(
        "--disable-rule", "do not use this rule: a rule name, or an op type (every native rule "
        "for that op: its folder, the patterns matching it, the cleanup removing it; the "
        "onnxruntime fallback still folds it; --keep prevents that); a name that is neither is "
        "refused; repeatable", repeat=True,
        metavar="NAME"))
    keep: tuple[str, ...] = _opt((), Flag(
        "--keep", "never fold, rewrite or remove nodes of this op type or of this node name, "
        "natively or through onnxruntime; repeatable", repeat=True, metavar="OP|NODE"))
    fallback: bool = _opt(Evaluation.fallback, Flag(
        "--no-fallback", "fold only with native rules, never through onnxruntime", switch=True))
    shape_folding: bool = _opt(FoldSettings.shape_folding, Flag(
        "--no-shape-folding", "do not fold Shape/Size of statically shaped values, nor the "
        "static parts of shapes with dynamic dims", switch=True))
    inputs_are_constant: bool = _opt(FoldSettings.inputs_are_constant, Flag(
        "--inputs-are-constant", "treat initializers that are also graph inputs as constants "
        "(IR >= 4)", switch=True))
    expansion_factor: float = _opt(SizePolicy.expansion_factor, Flag(
        "--expansion-factor", "refuse to keep a result that exceeds this many times its "
        "inputs' bytes (and --expansion-min)", parse=parse_float, minimum=0.0))
    expansion_min_bytes: int = _opt(SizePolicy.expansion_min_bytes, Flag(
        "--expansion-min", "results up to this size are never refused by the expansion bound",
        parse=parse_bytes, metavar="SIZE"))
    max_tensor_bytes: int | None = _opt(SizePolicy.max_tensor_bytes, Flag(
        "--max-tensor", "refuse folds producing a tensor larger than this (e.g. 256M)",
        parse=parse_bytes, metavar="SIZE"))
    growth_factor: float | None = _opt(SizePolicy.growth_factor, Flag(
        "--growth-factor", "a kept result may be this many times the constants it replaces",
        parse=parse_float, minimum=0.0,
        none_flag=("--allow-growth", "fold even when the kept results are bigger "
                    "than the constants they replace (fp16->fp32 casts, transposes of shared "
                    "weights)")))
    growth_min_bytes: int = _opt(SizePolicy.growth_min_bytes, Flag(
        "--growth-min", "results up to this size are never refused for growth, except "
        "copies of a weight that stays in use elsewhere (tied weights are never duplicated "
        "unless --allow-growth)",
        parse=parse_bytes, metavar="SIZE"))
    max_growth_bytes: int | None = _opt(SizePolicy.max_growth_bytes, Flag(
        "--max-growth", "refuse folds once the model would grow by more than this in total",
        parse=parse_bytes, metavar="SIZE"))
    fold_fp16_casts: bool = _opt(SizePolicy.fold_fp16_casts, Flag(
        "--fold-fp16-casts", "fold casts of fp16/bf16 weights to wider types (doubles their "
        "size)", switch=True))
    fold_qdq: bool = _opt(SizePolicy.fold_qdq, Flag(
        "--fold-qdq", "also fold DequantizeLinear of constant quantized weights into float "
        "weights (by default they stay, so a quantized model stays quantized and small; "
        "QuantizeLinear of constant weights folds either way)", switch=True))
    memory_limit: int | None = _opt(Evaluation.memory_limit, Flag(
        "--memory-limit", "keep the fold pool's heap under this (e.g. 4G): larger "
        "intermediates move to memory-mapped temporary files (written out and dropped from "
        "the page cache); a single output larger than this is refused", parse=parse_bytes,
        metavar="SIZE"))
    pool_budget: int | None = _opt(Evaluation.pool_budget, Flag(
        "--pool-budget", "the fold pool may hold at most this much (e.g. 1G); a fold whose "
        "outputs would not fit is refused before it runs (default: a quarter of the memory "
        "the process may use, the host's RAM or its memory cgroup's limit, at most 4G)",
        parse=parse_bytes, metavar="SIZE"))
    fold_timeout: float | None = _opt(Evaluation.fold_timeout, Flag(
        "--fold-timeout", "stop an onnxruntime fallback fold running longer than this (one "
        "that could take long runs in a child process, killed then; the nodes stay unfolded)",
        parse=parse_float, minimum=0.0, metavar="SECONDS"))
    input_shapes: tuple[str, ...] = _opt((), Flag(
        "--input-shape", "fix an input's shape before folding (an int fixes a dim, '?' keeps "
        "the model's); or DIM=VALUE binds a named dim in every input (e.g. batch=1); "
        "repeatable", repeat=True, metavar="NAME:D0,D1,.."))
    target_opset: int | None = _opt(None, Flag(
        "--target-opset", "convert the model to this opset of the default domain first, with "
        "onnx's version converter (e.g. 17 for an older onnxruntime); one line where it cannot",
        parse=parse_int, minimum=1, metavar="N"))
    strip_metadata: str | None = _opt("others", Flag(
        "--strip-metadata", "drop the metadata exporters attach to each node and value "
        "(dynamo's module paths and stack traces, TorchScript's doc strings), done by "
        "default: all of it but onnxfold's own provenance, or with --strip-metadata=all that "
        "too", choices=MODES, metavar="all",
        none_flag=("--keep-metadata", "keep the exporters' node and value metadata (stack "
                   "traces, module paths) in the output")))
    inline_functions: bool = _opt(False, Flag(
        "--inline-functions", "inline the model's local functions first, so that the "
        "constants in their bodies fold with the rest", switch=True))
    assume_named_dims_equal: bool = _opt(False, Flag(
        "--assume-named-dims-equal", "take the inputs' dims that share a name (dim_param) as "
        "one value, as the ONNX spec means them, so that a shape read from one input folds "
        "against another's; a model then run with such dims unequal may compute something "
        "else instead of failing (docs/policy.md)", switch=True))
    strict: bool = _opt(Evaluation.strict, Flag(
        "--strict", "a rule or pass that fails is an error (exit 3), not a step skipped with a "
        "warning (for tests and CI)", switch=True))

    def __post_init__(self) -> None:
        """Store the collections as immutable values (a set of rule names as a frozenset, a
        list of kept names as a tuple; onnxsim's form of input shapes, ``{"input_ids": [1,
        16]}``, as the ``--input-shape`` strings); refuse a ``strip_metadata`` that is none
        of its modes."""
        if not isinstance(self.disabled_rules, frozenset):
            object.__setattr__(self, "disabled_rules", frozenset(_names(self.disabled_rules)))
        if not isinstance(self.keep, tuple):
            object.__setattr__(self, "keep", _names(self.keep))
        if not isinstance(self.input_shapes, tuple):
            object.__setattr__(self, "input_shapes", as_specs(self.input_shapes))
        if self.strip_metadata is not None and self.strip_metadata not in MODES:
            raise InputError(f"--strip-metadata {self.strip_metadata!r}: expected "
                             f"{' or '.join(map(repr, MODES))} (or None: keep it)")

    @functools.cached_property
    def fixed_shapes(self) -> InputShapes:
        """``input_shapes`` parsed (once per options value): what the fold, the references
        and ``simplify`` read."""
        return parse(self.input_shapes)

    @classmethod
    def everything(cls, **overrides: Any) -> FoldOptions:
        """Fold every constant whatever its size: no expansion or growth bound, QDQ and fp16
        casts folded (the runtime fold and the exactness tier, where results are needed)."""
        return cls(growth_factor=None, fold_qdq=True, fold_fp16_casts=True,
                   expansion_factor=float("inf"), expansion_min_bytes=1 << 62, **overrides)

    def fold_settings(self) -> FoldSettings:
        """The slice of these options the fold reads (``onnxfold.fold.settings``)."""
        return FoldSettings(
            keep=frozenset(self.keep), inputs_are_constant=self.inputs_are_constant,
            shape_folding=self.shape_folding,
            policy=SizePolicy(self.expansion_factor, self.expansion_min_bytes,
                              self.max_tensor_bytes, self.growth_factor, self.growth_min_bytes,
                              self.max_growth_bytes, self.fold_fp16_casts, self.fold_qdq),
            evaluation=Evaluation(self.fallback, self.fold_timeout, self.memory_limit,
                                  self.pool_budget, self.strict))

    def run_settings(self, unknown_ops: Iterable[str] = (),
                     runtime_inputs: Iterable[str] = ()) -> RunSettings:
        """The slice the rewrite and the cleanups read; ``unknown_ops``: the model's
        default-domain op types onnx does not know (the reader's ``UNKNOWN_OPS_KEY``);
        ``runtime_inputs``: the inputs a split or a Session holds constant at run time."""
        return RunSettings(keep=frozenset(self.keep),
                           named_dims_equal=self.assume_named_dims_equal,
                           unknown_ops=frozenset(unknown_ops),
                           runtime_inputs=frozenset(runtime_inputs))
