"""onnxsim's and onnxslim's flags on ``onnxfold optimize``: each one a user of those tools types
either does what it did (an alias of the onnxfold flag of the same meaning, or nothing where
onnxfold does that already) or is refused in one line naming the onnxfold flag that does it.

docs/cli.md's table maps every flag of both tools; this module is that table as data
(:data:`SAME_FLAG`, :data:`SAME_BY_DEFAULT`, :data:`REFUSED`, and the flags of
:func:`add_peer_flags`); ``--test-input-shape``'s shapes become the check's dims where the
options are judged against the model (``onnxfold.app.judgement``).
"""

from __future__ import annotations

import argparse
from typing import Any

from onnxfold.numbers import NumberError, parse_bytes

# onnxsim's and onnxslim's names of an onnxfold flag of the same meaning: one argparse flag
# answers to all of them
SAME_FLAG = {"--input-shape": ("--overwrite-input-shape", "--input-shapes"),
             "--max-tensor": ("--size-threshold",), "--custom-op-library": ("--custom-lib",),
             "--rtol": ("--check-rtol",), "--atol": ("--check-atol",)}
# flags asking for what onnxfold does by default: accepted, and nothing changes
SAME_BY_DEFAULT = ("--enable-fuse-bn", "--dynamic-input-shape", "--include-subgraph",
                   "--mutable-initializer")
# flag -> (whose, what onnxfold does instead)
REFUSED = {
    "--skip-constant-folding": ("onnxsim", "folding constants is what onnxfold does; --keep "
                                "OP|NODE or --disable-rule NAME leaves some unfolded"),
    "--skip-shape-inference": ("onnxsim", "onnxfold always infers shapes; --no-shape-folding "
                               "keeps the Shape and Size nodes"),
    "--no-shape-infer": ("onnxslim", "onnxfold always infers shapes; --no-shape-folding keeps "
                         "the Shape and Size nodes"),
    "--enable-onnxruntime-optimization": ("onnxsim", "onnxfold writes no onnxruntime-fused "
                                          "graph (its ops run on any runtime); --ort-level "
                                          "sets the level the check runs at"),
    "--input-data-path": ("onnxsim", "the check's arrays are one .npz: --inputs FILE.npz"),
    "--unused-output": ("onnxsim", "onnxfold keeps every output; no flag removes one"),
    "--skip-optimizations": ("onnxslim", "onnxfold's rewrites are rules: --disable-rule NAME "
                             "(onnxfold rules lists them)"),
    "--skip-fusion-patterns": ("onnxslim", "onnxfold's rewrites are rules: --disable-rule "
                               "NAME (onnxfold rules lists them)"),
    "--outputs": ("onnxslim", "onnxfold keeps every output and its type; no flag changes them"),
    "--dtype": ("onnxslim", "onnxfold does not convert a model's precision"),
    "--inspect": ("onnxslim", "onnxfold inspect MODEL"),
    "--dump-to-disk": ("onnxslim", "--json FILE (and --report FILE.html)"),
}
# onnxsim's optimizer passes (onnxoptimizer's names) that an onnxfold rule does
_NO_OPS = "drop_noop"  # onnxfold's one rule for every no-op node
ONNXSIM_PASSES = {"fuse_bn_into_conv": "fuse_batch_norm_into_conv",
                  "fuse_add_bias_into_conv": "fuse_add_into_conv",
                  "fuse_mul_into_conv": "fuse_mul_into_conv",
                  "fuse_consecutive_transposes": "merge_transposes",
                  "fuse_consecutive_reshapes": "merge_reshapes",
                  "fuse_consecutive_unsqueezes": "merge_unsqueezes",
                  "fuse_matmul_add_bias_into_gemm": "fuse_matmul_add_into_gemm",
                  "eliminate_identity": "remove_identity",
                  "eliminate_duplicate_initializer": "dedupe_initializers",
                  "eliminate_common_subexpression": "merge_duplicates",
                  "extract_constant_to_initializer": "constants_to_initializers",
                  "eliminate_if_with_const_cond": "inline_constant_if",
                  "eliminate_nop_dropout": "drop_inference_dropout",
                  **dict.fromkeys(("eliminate_nop_with_unit", "eliminate_nop_add_zero",
                                   "eliminate_nop_sub_zero", "eliminate_nop_mul_one",
                                   "eliminate_nop_div_one"), "drop_neutral_element"),
                  **dict.fromkeys(("eliminate_nop_cast", "eliminate_nop_transpose",
                                   "eliminate_nop_pad", "eliminate_nop_reshape",
                                   "eliminate_nop_expand", "eliminate_nop_flatten",
                                   "eliminate_nop_split", "eliminate_nop_concat"), _NO_OPS)}
# onnxsim's passes with no onnxfold rule to skip: accepted, and one line says why
_NO_SUCH_FUSION = "onnxfold has no such rewrite: nothing to skip"
_SHAPES = "onnxfold folds shapes as constants: --no-shape-folding keeps Shape and Size nodes"
_ALWAYS = "onnxfold always removes what nothing reads: nothing to skip"
_NAMING = "onnxfold keeps the model's names and types: nothing to skip"
NO_COUNTERPART = {
    **dict.fromkeys(("fuse_pad_into_conv", "fuse_pad_into_pool", "fuse_pad_into_avgpool",
                     "fuse_pad_into_maxpool", "fuse_consecutive_concats",
                     "fuse_consecutive_log_softmax", "fuse_consecutive_reduce_unsqueeze",
                     "fuse_consecutive_squeezes", "fuse_consecutive_slices",
                     "fuse_consecutive_squeeze_unsqueeze", "fuse_transpose_into_gemm",
                     "fuse_qkv", "fuse_gelu", "fuse_attention", "fuse_concat_into_reshape",
                     "fuse_concat_and_reshape", "fuse_constant_reshape", "adjust_add",
                     "adjust_slice_and_matmul", "replace_einsum_with_matmul", "rewrite_where",
                     "eliminate_nop_monotone_argmax", "eliminate_consecutive_idempotent_ops",
                     "lift_lexical_references", "split_init", "split_predict", "nop"),
                   _NO_SUCH_FUSION),
    **dict.fromkeys(("eliminate_shape_op", "eliminate_shape_gather", "eliminate_nop_gather_shape",
                     "eliminate_slice_after_shape", "eliminate_shape_slice",
                     "eliminate_slice_shape"), _SHAPES),
    **dict.fromkeys(("eliminate_deadend", "eliminate_unused_initializer",
                     "eliminate_initializer_from_input"), _ALWAYS),
    **dict.fromkeys(("rename_input_output", "set_unique_name_for_nodes",
                     "rewrite_input_dtype"), _NAMING),
}


def names(flag: str) -> tuple[str, ...]:
    """``flag`` and the names onnxsim and onnxslim give it (:data:`SAME_FLAG`)."""
    return (flag, *SAME_FLAG.get(flag, ()))


class _Refused(argparse.Action):
    """A peer's flag with no onnxfold counterpart: one line naming what does it here."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        whose, instead = REFUSED[str(option_string)]
        parser.error(f"{option_string} is {whose}'s: {instead}")


class _Rules(argparse.Action):
    """onnxsim's ``--skip-optimization NAME``: NAME disabled (an onnxsim pass by the onnxfold
    rule that does it, :data:`ONNXSIM_PASSES`; a pass with none, :data:`NO_COUNTERPART`,
    accepted with one line saying why); without a name (every optimizer skipped) it is
    refused, naming the flag."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if values is None:
            parser.error(f"{option_string} without a name skips every onnxsim optimizer; "
                         "onnxfold's rewrites are rules: --disable-rule NAME for each "
                         "(onnxfold rules lists them)")
        if values in NO_COUNTERPART:  # (said once, however often it is given)
            namespace.peer_notes = list(dict.fromkeys([*getattr(namespace, "peer_notes", []), (
                f"onnxfold: {option_string} {values}: onnxsim's pass; {NO_COUNTERPART[values]}")]))
            return
        rule = ONNXSIM_PASSES.get(values, values)
        if rule == _NO_OPS:
            namespace.peer_notes = [*getattr(namespace, "peer_notes", []), (
                f"onnxfold: {option_string} {values}: onnxsim's pass; onnxfold removes every "
                f"no-op node by one rule, {_NO_OPS}, now disabled")]
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), rule])


def _size(text: str) -> int:
    try:
        return parse_bytes(text)
    except NumberError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _test_shape(text: str) -> str:
    """A shape for the check (onnxslim's ``x:data.npy`` form, arrays, is ``--inputs``): what
    follows the last colon says which; an input's name may hold anything (``input/ids``)."""
    given = text.rpartition(":")[2]
    if given.endswith((".npy", ".npz", ".bin")) or "/" in given:
        raise argparse.ArgumentTypeError(f"{text}: arrays for the check are one .npz: "
                                         "--inputs FILE.npz")
    return text


def add_peer_flags(group: Any) -> None:
    """onnxsim's and onnxslim's flags that are not an onnxfold flag's other name, on
    ``group`` (the refused and the no-op ones hidden from ``--help``)."""
    group.add_argument("--test-input-shape", "--model-check-inputs", dest="test_shapes",
                       action="append", default=[], type=_test_shape, metavar="NAME:D0,D1,..",
                       help="onnxsim's, onnxslim's: the check runs the original at these "
                            "shapes (their dims as --dim)")
    group.add_argument("--skip-optimization", "--skip-optimizer", dest="disabled_rules",
                       nargs="?", action=_Rules, metavar="NAME",
                       help="onnxsim's: --disable-rule (its passes by onnxfold's rules)")
    group.add_argument("--skip-fuse-bn", dest="disabled_rules", action="append_const",
                       const="fuse_batch_norm_into_conv",
                       help="onnxsim's: --disable-rule fuse_batch_norm_into_conv")
    group.add_argument("--no-large-tensor", dest="max_tensor_bytes", nargs="?", const=1024,
                       type=_size, metavar="SIZE", help="onnxsim's: --max-tensor (1K alone)")
    group.add_argument("--save-as-external-data", dest="external_data", action="store_const",
                       const="yes", help="onnxsim's, onnxslim's: --external-data yes")
    group.add_argument("--model-check", dest="model_check", action="store_true",
                       help="onnxslim's: the check, on 1 input set unless --check N")
    for flag in SAME_BY_DEFAULT:
        group.add_argument(flag, action="store_true", dest="peer_default",
                           help=argparse.SUPPRESS)
    for flag in REFUSED:
        group.add_argument(flag, action=_Refused, nargs="*", help=argparse.SUPPRESS)
