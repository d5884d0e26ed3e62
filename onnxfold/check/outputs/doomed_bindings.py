"""Bindings the reference would fail on as it failed on another: named without being run.

When the original cannot run the guessed dims, the check tries other bindings, up to images of
1537 x 1537 at batch 2; a model whose failure does not depend on the size (a text recognizer
whose height must be 32 for a Squeeze: ppocr's, ``[-1, 3, ?, ?]``) ran its whole network up to
that node at every one of them (199 s). A run is skipped only where both say it fails at the
same node: onnxruntime failed at node N at an earlier binding, and onnx's shape inference (the
op schemas' own inference, which onnxruntime also runs), given this binding's input shapes,
reports an error at N. A binding whose failure shape inference does not see (a reflect Pad
longer than its input, an error in a subgraph, a node without a name) still runs, so a larger
size that would run is still tried.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import onnx
import onnx_ir as ir

from onnxfold.check.inputs.sizes import Sizes
from onnxfold.errors import InputError, clipped

# onnxruntime: "Non-zero status code returned while running Squeeze node. Name:'Squeeze_0' ...",
# as running.models.ort_message says it: "Squeeze node 'Squeeze_0': ..."
_ORT_NODE = re.compile(r"running (\S+) node\. Name:'([^']+)'|(\w+) node '([^']+)': ")
# onnx's strict shape inference, one line per node: "(op_type:Squeeze, node name: Squeeze_0): ..."
_ONNX_NODE = re.compile(r"\(op_type:([^,]+), node name: ([^)]+)\): (?:\[\w+\] )?(.*)")


class Doomed(InputError):
    """A binding not run: shape inference shows it fails where onnxruntime failed before.
    ``seen`` is the error onnxruntime gave at that node."""

    def __init__(self, message: str, seen: InputError) -> None:
        super().__init__(message)
        self.seen = seen


class FailedNodes:
    """The nodes onnxruntime failed at while the reference tried bindings of the original
    ``model``, and whether another binding's input shapes fail at one of them (by onnx's
    shape inference at them); ``sizes``: how large the values are there."""

    def __init__(self, model: ir.Model) -> None:
        self.model = model
        self.failed: dict[tuple[str, str], tuple[str, InputError]] = {}  # (op, node) -> where
        self.sizes = Sizes(model)

    def record(self, error: InputError, where: str) -> None:
        """onnxruntime's ``error`` at the binding of the guessed dims ``where``."""
        found = _ORT_NODE.search(str(error))
        if found is not None and not isinstance(error, Doomed):
            op, node = (found.group(1), found.group(2)) if found.group(1) else \
                (found.group(3), found.group(4))
            self.failed.setdefault((op, node), (where, error))

    def check(self, shapes: Mapping[str, tuple[int, ...]], label: str) -> None:
        """Doomed when onnx's shape inference, the inputs of shapes ``shapes``, fails at a
        node onnxruntime failed at."""
        if not self.failed:
            return
        proto = self.sizes.bound(shapes)
        try:
            onnx.shape_inference.infer_shapes(proto, strict_mode=True, data_prop=True)
        except onnx.shape_inference.InferenceError as e:
            for line in str(e).splitlines():
                found = _ONNX_NODE.search(line)
                if found is None or (found.group(1), found.group(2)) not in self.failed:
                    continue
                where, seen = self.failed[(found.group(1), found.group(2))]
                raise Doomed(f"{label}: not run: onnx's shape inference fails at "
                             f"{found.group(1)} node '{found.group(2)}' for these input shapes "
                             f"({clipped(found.group(3).strip(), 120)}), where onnxruntime "
                             f"failed at {where}", seen) from None
        except Exception:
            return


__all__ = ["Doomed", "FailedNodes"]
