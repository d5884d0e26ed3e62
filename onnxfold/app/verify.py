"""After writing, before the output replaces anything: does onnxruntime load what we wrote?

A folded model must compute what the original computes in onnxruntime; the cheapest part of
that promise to check on every run is that onnxruntime accepts the new graph at all (graph
optimizations off, so its own rewrites cannot hide ours). Outputs above ``VERIFY_LIMIT`` bytes
or ``VERIFY_MAX_NODES`` nodes skip this by default (onnxruntime then takes about as long to load
them as onnxfold to fold them); ``--check N`` compares outputs. The nodes are counted with
every call of a model-local function expanded (``expansion.py``), as onnxruntime inlines them
when it loads the model: a 4 KB nest of functions is a million nodes there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import onnx_ir as ir

from onnxfold.analysis.expansion import describe, expanded_size
from onnxfold.analysis.input_shapes import InputShapes
from onnxfold.errors import InputError, one_line
from onnxfold.host.ort_sessions import open_session, session_options
from onnxfold.io.opener import check_regular

if TYPE_CHECKING:  # imported where used: a run that verifies nothing never loads it
    import onnxruntime

VERIFY_LIMIT = 64 << 20  # bytes of output
VERIFY_MAX_NODES = 5000  # nodes of output (all graphs)


def verifiable(model: ir.Model) -> tuple[bool, str | None]:
    """Whether onnxruntime is asked to load ``model``: its nodes in all graphs, every function
    call expanded, are at most ``VERIFY_MAX_NODES``. When the expansion alone puts it over,
    also a warning for the report saying why it was not verified."""
    size = expanded_size(model, VERIFY_MAX_NODES)
    if size <= VERIFY_MAX_NODES:
        return True, None
    if expanded_size(model, VERIFY_MAX_NODES, functions=False) > VERIFY_MAX_NODES:
        return False, None  # a large graph: skipped as every large graph is
    return False, (f"not verified in onnxruntime: with its function calls expanded (as "
                   f"onnxruntime inlines them) the model has {describe(size, VERIFY_MAX_NODES)} "
                   f"nodes, over the limit of {VERIFY_MAX_NODES:,} for verification")


class OutputRejected(RuntimeError):
    """onnxruntime loads the input but not the folded output: a bug in onnxfold."""


def load_check_options() -> onnxruntime.SessionOptions:
    """Session options for a load check: no graph optimization (onnxruntime's rewrites must not
    hide ours), no logging, and one thread per pool. The session never runs, so its thread
    pools would only be started and stopped: a third of the cost of creating a session on a
    graph of thousands of nodes. Everything that decides whether the model loads (parsing,
    type and shape checks, kernel lookup and creation) runs as with any thread count."""
    return session_options(optimized=False, threads=1)


def ort_load_error(model: str | bytes) -> str | None:
    """Why onnxruntime cannot create a session for ``model`` (a path or bytes), or None."""
    if isinstance(model, str):
        check_regular(model)  # onnxruntime opens it itself, and would wait on a FIFO
    try:
        open_session(model, load_check_options())
    except Exception as e:  # onnxruntime raises several exception types
        return one_line(e, 300)
    return None


def verifier(original: str | os.PathLike, limit: int | None = VERIFY_LIMIT,
             input_shapes: InputShapes | None = None, target_opset: int | None = None,
             warn: Callable[[str], object] = print):
    """A ``verify(path)`` for ``save_model``: raise OutputRejected if onnxruntime refuses the
    output but loads ``original``; outputs over ``limit`` bytes are not checked (None: every
    output is). ``input_shapes``: what ``--input-shape`` fixed in the run; a model the
    fixed shapes make invalid (a sequence past the position table) is refused at load once
    its shapes are static: where the original, with those shapes, fails to run too, that is
    an InputError naming the shapes, not a bug; so is a ``target_opset`` onnxruntime has no
    kernel of (an Add of opset 6: onnxruntime runs opset 7 and later). Where onnxruntime
    loads neither, the output is written and ``warn`` says so."""

    def verify(path: str) -> None:
        if limit is not None and os.path.getsize(path) > limit:
            return
        problem = ort_load_error(path)
        if problem is None:
            return
        unloadable = ort_load_error(os.fspath(original))
        if unloadable is not None:
            warn(f"onnxruntime loads neither the input nor the output written ({unloadable})")
            return
        if input_shapes is not None and input_shapes.specs:
            failure = _fails_at(original, input_shapes)
            if failure is not None:
                raise InputError(f"--input-shape {' '.join(input_shapes.specs)}: the model does "
                                 f"not run at those shapes (the original fails there too: "
                                 f"{failure}); nothing was written")
        else:
            failure = _fails_at(original, None)
            if failure is not None and _same_op(problem, failure):
                said = re.sub(r"^.*?Load model from .*? failed: ?", "", problem)
                raise InputError(f"onnxruntime cannot run the model: with its constants folded "
                                 f"it does not load ({said}), and the original fails in the "
                                 f"same op ({failure}); nothing was written")
        if target_opset is not None and _unloadable_at(original, target_opset):
            raise InputError(f"--target-opset {target_opset}: onnxruntime cannot load the model "
                             f"converted to opset {target_opset} ({problem}); nothing was "
                             "written")
        raise OutputRejected(f"onnxruntime refuses the folded model ({problem}); nothing "
                             "was written")

    return verify


def _unloadable_at(original: str | os.PathLike, opset: int) -> bool:
    """Whether onnxruntime refuses ``original`` converted to ``opset`` and not folded (it
    has no kernel of an op there: the flag's value, not the fold, is to blame)."""
    from onnxfold.errors import OnnxfoldError
    from onnxfold.io import load_model
    from onnxfold.pipeline.opset_conversion import convert_opset

    try:
        converted = convert_opset(load_model(original, check=False), opset)
        return ort_load_error(ir.to_proto(converted).SerializeToString()) is not None
    except (OnnxfoldError, ValueError):  # no conversion, or over protobuf's 2 GiB
        return False


def _same_op(load_error: str, run_error: str) -> bool:
    """Whether onnxruntime's refusal to load the output names an op type (``Op (MatMul)``)
    that the original's failure to run names too: the model's own op failing at load where
    its shapes became known, not another failure of the original on made-up inputs."""
    named = re.search(r"Op \((\w+)\)", load_error)
    return named is not None and re.search(rf"\b{named.group(1)}\b", run_error) is not None


def _fails_at(original: str | os.PathLike, input_shapes: InputShapes | None) -> str | None:
    """Why the original, its inputs fixed by ``input_shapes`` (None: as it declares them),
    fails to run once on seeded inputs (None: it runs)."""
    from onnxfold.check.inputs.feeds import synthetic_feeds
    from onnxfold.pipeline.references import with_input_shapes

    proto = with_input_shapes(os.fspath(original), input_shapes) if input_shapes is not None \
        else os.fspath(original)
    try:
        feeds, _ = synthetic_feeds(proto)
        model = proto if isinstance(proto, str) else proto.SerializeToString()
        open_session(model, load_check_options()).run(None, feeds)
    except Exception as e:  # onnxruntime and the feeds raise several exception types
        return " ".join(str(e).split())[:300] or type(e).__name__
    return None
