"""onnxsim's and onnxslim's flags on ``onnxfold optimize``: each one a user of those tools types
either does what it did (an alias of the onnxfold flag of the same meaning, or nothing where
onnxfold does that already) or is refused in one line naming the onnxfold flag that does it.

docs/cli.md's table maps every flag of both tools; this module is that table as data
(:data:`ALIASES`, :data:`SAME_BY_DEFAULT`, :data:`REFUSED`), and ``--test-input-shape``'s
shapes as the check's dims (:func:`test_shape_dims`).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from onnxfold.errors import InputError
from onnxfold.ir.graph import is_static_dim
from onnxfold.numbers import NumberError, parse_bytes

# flag -> (the onnxfold flag it is, argparse keywords: dest, action, ...)
ALIASES: dict[str, tuple[str, dict[str, Any]]] = {
    "--overwrite-input-shape": ("--input-shape", {"dest": "input_shapes", "action": "append"}),
    "--input-shapes": ("--input-shape", {"dest": "input_shapes", "action": "append"}),
    "--test-input-shape": ("the check's --dim values, from the shapes", {"dest": "test_shapes",
                                                      "action": "append", "default": []}),
    "--model-check-inputs": ("the check's --dim values, from the shapes", {"dest": "test_shapes",
                                                        "action": "append"}),
    "--skip-optimization": ("--disable-rule", {"dest": "disabled_rules", "nargs": "?",
                                               "action": "append"}),
    "--skip-optimizer": ("--disable-rule", {"dest": "disabled_rules", "nargs": "?",
                                            "action": "append"}),
    "--skip-fuse-bn": ("--disable-rule fuse_batch_norm_into_conv", {
        "dest": "disabled_rules", "action": "append_const",
        "const": "fuse_batch_norm_into_conv"}),
    "--no-large-tensor": ("--max-tensor", {"dest": "max_tensor_bytes", "nargs": "?",
                                           "const": 1024}),
    "--size-threshold": ("--max-tensor", {"dest": "max_tensor_bytes"}),
    "--save-as-external-data": ("--external-data yes", {"dest": "external_data",
                                                        "action": "store_const", "const": "yes"}),
    "--check-rtol": ("--rtol", {"dest": "rtol"}),
    "--check-atol": ("--atol", {"dest": "atol"}),
    "--custom-lib": ("--custom-op-library", {"dest": "custom_op_library", "action": "append"}),
    "--model-check": ("--check 1", {"dest": "check", "action": "store_const", "const": 1}),
}
# flags asking for what onnxfold does by default: accepted, and nothing changes
SAME_BY_DEFAULT = ("--enable-fuse-bn", "--dynamic-input-shape", "--include-subgraph",
                   "--mutable-initializer")
REFUSED = {
    "--skip-constant-folding": "folding constants is what onnxfold does; --keep OP|NODE or "
                               "--disable-rule NAME leaves some unfolded",
    "--skip-shape-inference": "onnxfold always infers shapes; --no-shape-folding keeps the "
                              "Shape and Size nodes",
    "--no-shape-infer": "onnxfold always infers shapes; --no-shape-folding keeps the Shape "
                        "and Size nodes",
    "--enable-onnxruntime-optimization": "onnxfold writes no onnxruntime-fused graph (its "
                                         "ops run on any runtime); --ort-level sets the "
                                         "level the check runs at",
    "--input-data-path": "the check's arrays are one .npz: --inputs FILE.npz",
    "--unused-output": "onnxfold keeps every output; no flag removes one",
    "--skip-optimizations": "onnxfold's rewrites are rules: --disable-rule NAME (onnxfold "
                            "rules lists them)",
    "--skip-fusion-patterns": "onnxfold's rewrites are rules: --disable-rule NAME (onnxfold "
                              "rules lists them)",
    "--outputs": "onnxfold keeps every output and its type; no flag changes them",
    "--dtype": "onnxfold does not convert a model's precision",
    "--inspect": "onnxfold inspect MODEL",
    "--dump-to-disk": "--json FILE (and --report FILE.html)",
}
# onnxsim's optimizer passes (onnxoptimizer's names) that are one onnxfold rule
ONNXSIM_PASSES = {"fuse_bn_into_conv": "fuse_batch_norm_into_conv",
                  "fuse_consecutive_transposes": "merge_transposes",
                  "fuse_consecutive_reshapes": "merge_reshapes",
                  "fuse_consecutive_unsqueezes": "merge_unsqueezes",
                  "fuse_matmul_add_bias_into_gemm": "fuse_matmul_add_into_gemm",
                  "eliminate_identity": "remove_identity",
                  "eliminate_nop_dropout": "drop_inference_dropout",
                  "eliminate_duplicate_initializer": "dedupe_initializers"}
_TOOL = {**dict.fromkeys(("--input-shapes", "--model-check-inputs", "--size-threshold",
                          "--model-check", "--no-shape-infer", "--skip-optimizations",
                          "--skip-fusion-patterns", "--outputs", "--dtype", "--inspect",
                          "--dump-to-disk"), "onnxslim")}


def _tool(flag: str) -> str:
    return _TOOL.get(flag, "onnxsim")


class _Refused(argparse.Action):
    """A peer's flag with no onnxfold counterpart: one line naming what does it here."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser.error(f"{option_string} is {_tool(str(option_string))}'s: "
                     f"{REFUSED[str(option_string)]}")


class _Rules(argparse.Action):
    """onnxsim's ``--skip-optimization NAME``: NAME disabled (an onnxsim pass by the onnxfold
    rule that does it, :data:`ONNXSIM_PASSES`); without a name (every optimizer skipped) it
    is refused, naming the flag."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if values is None:
            parser.error(f"{option_string} without a name skips every onnxsim optimizer; "
                         "onnxfold's rewrites are rules: --disable-rule NAME for each "
                         "(onnxfold rules lists them)")
        rule = ONNXSIM_PASSES.get(values, values)
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), rule])


def _size(text: str) -> int:
    try:
        return parse_bytes(text)
    except NumberError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _test_shape(text: str) -> str:
    """A shape for the check (onnxslim's ``x:data.npy`` form, arrays, is ``--inputs``)."""
    if text.rpartition(":")[2].endswith((".npy", ".npz", ".bin")) or "/" in text:
        raise argparse.ArgumentTypeError(f"{text}: arrays for the check are one .npz: "
                                         "--inputs FILE.npz")
    return text


_METAVARS = {"input_shapes": "NAME:D0,D1,..", "test_shapes": "NAME:D0,D1,..",
             "disabled_rules": "NAME", "max_tensor_bytes": "SIZE", "custom_op_library": "PATH"}


def add_peer_flags(group: Any, numbers: Mapping[str, Any]) -> None:
    """Every flag of :data:`ALIASES`, :data:`SAME_BY_DEFAULT` and :data:`REFUSED` on
    ``group`` (refused and no-op ones hidden from ``--help``); ``numbers``: the parser's
    argparse types by dest (``rtol``: a non-negative float, ...)."""
    for flag, (same, keywords) in ALIASES.items():
        kwargs = dict(keywords)
        if kwargs["dest"] == "disabled_rules" and kwargs.get("nargs") == "?":
            kwargs["action"] = _Rules
        if kwargs.get("action") in (None, "append") and kwargs["dest"] in numbers:
            kwargs["type"] = numbers[kwargs["dest"]]
        elif kwargs["dest"] == "max_tensor_bytes":
            kwargs["type"] = _size
        elif kwargs["dest"] == "test_shapes":
            kwargs["type"] = _test_shape
        if kwargs.get("action") not in ("store_const", "append_const"):
            kwargs.setdefault("metavar", _METAVARS.get(kwargs["dest"], "X"))
        group.add_argument(flag, help=f"{_tool(flag)}'s: {same}", **kwargs)
    for flag in SAME_BY_DEFAULT:
        group.add_argument(flag, action="store_true", dest="peer_default",
                           help=argparse.SUPPRESS)
    for flag in REFUSED:
        group.add_argument(flag, action=_Refused, nargs="*", help=argparse.SUPPRESS)


def test_shape_dims(shapes: Sequence[str], inputs: Sequence[tuple[str, Sequence[object]]]
                    ) -> dict[str, int]:
    """``--test-input-shape x:1,3,224,224`` as the check's dims: each dynamic dim of the
    original's input ``x`` (``inputs``: name and declared dims, a name or None where dynamic)
    bound to the size given on its axis, an anonymous one by the name the check gives it
    (``x[2]``). InputError for an input the model lacks, another rank, a static dim given
    another size, or a dim given two sizes."""
    from onnxfold.analysis.input_shapes import parse
    from onnxfold.check.running.feeds import anonymous_dims

    declared = dict(inputs)
    anonymous = anonymous_dims([(name, list(dims)) for name, dims in inputs])
    try:
        given, named = parse(shapes)
    except InputError as e:
        raise InputError(str(e).replace("--input-shape", "--test-input-shape")) from None
    dims: dict[str, int] = dict(named)
    for name, sizes in given.items():
        flag = f"--test-input-shape {name}:{','.join(map(str, sizes))}"
        if name not in declared:
            raise InputError(f"{flag}: the model has no input {name} (inputs: "
                             f"{', '.join(declared)})")
        if len(sizes) != len(declared[name]):
            raise InputError(f"{flag}: {name} has {len(declared[name])} dims")
        for axis, (want, size) in enumerate(zip(declared[name], sizes)):
            if not isinstance(size, int):
                raise InputError(f"{flag}: a shape for the check gives every dim a size")
            if is_static_dim(want):
                if want != size:
                    raise InputError(f"{flag}: dim {axis} of {name} is {want} in the model")
                continue
            dim = str(want) if isinstance(want, str) and want else anonymous[(name, axis)]
            if dims.setdefault(dim, size) != size:
                raise InputError(f"{flag}: {dim} is {dims[dim]} in another shape given")
    return dims
