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
# onnxsim's optimizer passes (onnxoptimizer's names) that are one onnxfold rule
ONNXSIM_PASSES = {"fuse_bn_into_conv": "fuse_batch_norm_into_conv",
                  "fuse_consecutive_transposes": "merge_transposes",
                  "fuse_consecutive_reshapes": "merge_reshapes",
                  "fuse_consecutive_unsqueezes": "merge_unsqueezes",
                  "fuse_matmul_add_bias_into_gemm": "fuse_matmul_add_into_gemm",
                  "eliminate_identity": "remove_identity",
                  "eliminate_duplicate_initializer": "dedupe_initializers",
                  "eliminate_nop_dropout": "drop_inference_dropout"}


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
