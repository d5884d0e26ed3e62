"""Catalogues with a bug planted in a rule, for the tests of what a run does with it: a rule
that raises, a rewrite that leaves a node onnxruntime does not know, folds that compute the
wrong numbers. Each is the installed catalogue with one rule added or changed, passed to
``onnxfold.optimize(..., catalogue=)`` or a command's settings."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from onnxfold.declare import OpBuilder, P
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.declare.pattern_rules import PatternRule
from onnxfold.declare.registry import FolderRule


def _raise(*_args: object, **_kwargs: object) -> ir.Value:
    raise ValueError("a bug in a rule")


def broken(op_type: str = "Add") -> PatternRule:
    """A pattern at every ``op_type`` node whose rewrite raises ``ValueError``."""
    return PatternRule("broken_pattern", P(op_type), _raise, None, "test:broken")


def corrupting(op_type: str) -> PatternRule:
    """A pattern that replaces each ``op_type`` node reading a graph input by a node of an op
    onnxruntime does not know (a stand-in for a rewrite bug)."""

    def reads_an_input(ctx: object, node: ir.Node) -> bool:
        return any(v is not None and v.is_graph_input() for v in node.inputs)

    def unknown(op: OpBuilder, node: ir.Node) -> ir.Value:
        return op.node("NoSuchOp", *node.inputs, _dtype=node.outputs[0].dtype)

    return PatternRule("corrupt", P(op_type, name="node"), unknown, reads_an_input,
                       "test:corrupt")


def with_rule(rule: PatternRule) -> Catalogue:
    """The installed catalogue with ``rule`` tried last."""
    return load_catalogue() + Catalogue((rule,))


def doubling_fold(op_type: str) -> Catalogue:
    """The installed catalogue whose folder of ``op_type`` returns twice the first float
    tensor of more than one element it computes (in this process): one wrong fold."""
    done: list[bool] = []

    def doubled(fn):
        def folder(*args, **kwargs):
            out = fn(*args, **kwargs)
            if done or not (isinstance(out, np.ndarray) and out.dtype.kind == "f" and
                            out.size > 1):
                return out
            done.append(True)
            return out * out.dtype.type(2)
        return folder

    catalogue = load_catalogue()
    return dataclasses.replace(catalogue, rules=tuple(
        dataclasses.replace(r, fn=doubled(r.fn)) if isinstance(r, FolderRule) and
        r.op_type == op_type else r
        for r in catalogue.rules))
