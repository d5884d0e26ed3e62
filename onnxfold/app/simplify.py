"""``onnxfold.app.simplify``: the one call of onnxsim's habit, a thin layer over optimize + compare.

``simplify(model, check_n=3)`` returns ``(ModelProto, ok)`` like ``onnxsim.simplify``: a check
that finds an output outside tolerance gives ``ok=False`` (it never raises for that); a model
or an argument that is wrong raises :class:`~onnxfold.errors.InputError`, worded for Python
callers (``dims=``, not ``--dim``) as ``onnxfold.simplify`` (``onnxfold.app.python_api``).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.analysis.input_shapes import InputShapes, as_specs
from onnxfold.app.judgement import judged_against, judged_comparison
from onnxfold.check.compare import compare_models
from onnxfold.check.running.options import CompareOptions
from onnxfold.check.running.spilled import SpilledModel, copied
from onnxfold.pipeline.optimizer import ModelInput, optimize, with_keywords
from onnxfold.pipeline.options import FoldOptions
from onnxfold.pipeline.references import with_input_shapes

Shapes = Mapping[str, Sequence[int | str]] | Sequence[str] | None

def _reference(model: ModelInput, shapes: InputShapes) -> onnx.ModelProto | str | os.PathLike:
    """What the check runs as the original, taken before folding changes anything: ``model``
    itself (a path or proto), or a proto of it with the same input shapes fixed
    (``pipeline/references.py``)."""
    if not shapes.specs and isinstance(model, onnx.ModelProto | str | os.PathLike):
        return model
    if isinstance(model, ir.Model):
        model = ir.to_proto(model)  # optimize rewrites an ir.Model in place
    return with_input_shapes(model, shapes)


def simplify(model: ModelInput, check_n: int = 0, *, input_shapes: Shapes = None,
             overwrite_input_shapes: Shapes = None, dims: Mapping[str, int] | None = None,
             options: FoldOptions | None = None,
             inputs: Mapping[str, np.ndarray] | str | os.PathLike | None = None,
             int_ranges: Mapping[str, tuple[int, int]] | None = None,
             rtol: float | None = None, atol: float | None = None,
             custom_op_libraries: Sequence[str | os.PathLike] = (),
             check: bool = True, **fold_options: Any) -> tuple[onnx.ModelProto, bool]:
    """``(folded ModelProto, ok)``, like ``onnxsim.simplify``.

    ``ok`` is True unless ``check_n`` input sets show an output outside tolerance in
    onnxruntime (tolerances by dtype unless ``rtol``/``atol``; see :func:`onnxfold.compare`).
    The fold takes what :func:`onnxfold.optimize` takes, read by the same code
    (``with_keywords``): ``options``, ``check`` (onnx's checker on the input), and any
    ``FoldOptions`` field as a keyword (``target_opset=17``, ``fold_qdq=True``) over
    ``options``. ``input_shapes`` / ``overwrite_input_shapes`` (the same thing, onnxsim's two
    names): fix input shapes before folding, as ``{"input_ids": [1, 128]}`` or
    ``--input-shape`` strings, in place of ``options.input_shapes`` (None: those count).
    ``dims`` binds symbolic dims for the check (``{"batch": 2}``); ``inputs`` (a dict or an
    .npz path), ``int_ranges`` and ``custom_op_libraries`` are :func:`onnxfold.compare`'s.
    The check runs the original with the same input shapes fixed.
    Raises InputError when the model, an argument, or running the check is wrong.
    """
    shapes = None if input_shapes is None and overwrite_input_shapes is None else \
        as_specs(input_shapes) + as_specs(overwrite_input_shapes)
    options = with_keywords(simplify, options, check, shapes, fold_options)
    # every argument judged before the fold, what names the model's dims as it is read
    comparison = judged_comparison(CompareOptions(
        inputs=inputs, seed=0, dims=dict(dims or {}), int_ranges=dict(int_ranges or {}),
        rtol=rtol, atol=atol, custom_op_libraries=tuple(custom_op_libraries)))
    reference = _reference(model, options.fixed_shapes) if check_n > 0 else None
    label = _label(model)
    with _as_a_file(reference, label) as copy:
        if copy is not None:  # the fold and the check read the proto's copy, as a file's
            model = reference = copy
        optimized = optimize(model, options, check=check, record_rewrites=check_n > 0,
                             loaded=None if reference is None else functools.partial(
                                 _judged, comparison, options.fixed_shapes, label))
        folded = optimized.to_proto(spend=True)  # (only the proto is handed back)
        if reference is None:
            return folded, True
        result = compare_models(reference, folded, check_n, comparison,
                                evidence=optimized.evidence)
        return folded, result.ok


def _as_a_file(reference: object, label: str
               ) -> contextlib.AbstractContextManager[SpilledModel | None]:
    """A proto to be checked as given, its large weights written once to a scratch file
    (``check.running.spilled``) that the fold reads and the check runs as they read a file's
    (removed when the block ends), else None. Read from the proto itself, the fold kept copies
    of the weights its rewrites read (every read of a proto's tensor is a copy) for the check
    to validate them: 280 MiB on BERT-base over what the same call on its file holds (issue 84
    item 2). Messages name it as the proto (``label``), never by the scratch path."""
    if isinstance(reference, onnx.ModelProto):
        return copied(reference, "model A", said_as=label)
    return contextlib.nullcontext()


def _judged(comparison: CompareOptions, fixed: InputShapes, label: str,
            model: ir.Model) -> None:
    """The check's arguments that name dims and inputs judged against the model as read."""
    judged_against(model, label, comparison, fixed=fixed)


def _label(model: object) -> str:
    """How an error names the model: its path, where it was given one."""
    return os.fspath(model) if isinstance(model, str | os.PathLike) else "the model given"
