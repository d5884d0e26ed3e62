"""Rewrites the ``mlir`` backend applies to a fold model before IREE compiles it.

- ``transpose_before_dequantize`` (ONNX, through the folding rule ``transpose_before_widening``):
  transpose the integer weight, then dequantize, so the float result is written in order
  (bitwise the same values).
- ``results_to_out_params`` (MLIR): results become arguments the function overwrites, so each
  dispatch stores into memory the caller provides instead of a buffer IREE allocates per call.
- ``tile_2d_transposes`` (IREE executable configurations): [16, 16] vector tiles for 2-D ops
  that transpose an operand, which lower to in-register transposes instead of 16 scattered
  stores per vector (6x faster on BERT-size weights). It matches IREE's printed configuration;
  if a new IREE prints it differently nothing is patched (the kernel is slower, still right),
  and a test says so.
"""

from __future__ import annotations

import re

import onnx_ir as ir

from onnxfold.declare.catalogue import Catalogue
from onnxfold.rewrite.driver import rewrite


def transpose_before_dequantize(model: ir.Model, catalogue: Catalogue) -> ir.Model:
    """``Transpose(DequantizeLinear(q))`` -> ``DequantizeLinear(Transpose(q))`` (and the same
    for ``Cast``): the folding rule ``transpose_before_widening``, applied with the fold
    model's inputs, the runtime constants, counted as constants.

    The transpose then moves the (4x smaller) integer tensor and the float result is written
    in order; the values are bitwise the same. Returns ``model`` itself (unchanged) if nothing
    matched, else a rewritten copy. ``catalogue``: the session's, which holds the rule.
    """
    copy = model.clone()
    rules = catalogue.only("transpose_before_widening")
    return copy if rewrite(copy, rules, constant_inputs=True) else model


def results_to_out_params(asm: str, func_name: str) -> str:
    """Make each result of ``func_name`` an extra ``!torch.tensor`` argument it overwrites.

    IREE lowers ``torch.overwrite.tensor.contents`` of a mutable argument to
    ``hal.tensor.alias``: the dispatch that computes the result stores into the caller's buffer.
    """
    from iree.compiler import ir

    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    with ctx, ir.Location.unknown() as loc:
        module = ir.Module.parse(asm)
        func = next(op.operation for op in module.body.operations
                    if op.operation.name == "func.func"
                    and ir.StringAttr(op.operation.attributes["sym_name"]).value == func_name)
        block = func.regions[0].blocks[0]
        ret = block.operations[len(block.operations) - 1]
        ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        args = []
        for value in ret.operands:
            text = str(value.type)
            if not text.startswith("!torch.vtensor<"):
                raise ValueError(f"result of type {text}")
            args.append(block.add_argument(
                ir.Type.parse("!torch.tensor<" + text[len("!torch.vtensor<"):]), loc))
        with ir.InsertionPoint(ret):
            for value, arg in zip(ret.operands, args):
                ir.Operation.create("torch.overwrite.tensor.contents", operands=[value, arg])
            ir.Operation.create("func.return", operands=[])
        ret.operation.erase()
        func.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(list(ftype.inputs) + [a.type for a in args], []))
        return str(module)


_TRANSPOSED_2D = re.compile(r"affine_map<\(d0, d1\) -> \(d1, d0\)>")
_TILES = re.compile(r"vector_common_parallel = \[1, (\d+)\]")


def tile_2d_transposes(configured: str) -> str:
    """Give 2-D all-parallel ops that transpose an operand [16, 16] vector tiles (was [1, N]).

    ``configured`` is the output of ``--compile-to=executable-configurations``; only a root op
    whose lowering config has ``vector_common_parallel = [1, N]`` and whose indexing maps
    include ``(d0, d1) -> (d1, d0)`` with at most 32-bit elements is touched.
    """
    out, pos = [], 0
    for m in re.finditer(r"linalg\.generic \{indexing_maps = \[(?P<maps>[^\]]*)\], "
                         r"iterator_types = \[\"parallel\", \"parallel\"\][^\n]*\n", configured):
        line = m.group(0)
        if not _TRANSPOSED_2D.search(m.group("maps")) or "lowering_config" not in line \
                or re.search(r"x(f|i)64>", line):
            continue
        patched = _TILES.sub("vector_common_parallel = [16, 16]", line, count=1)
        out.append(configured[pos:m.start()])
        out.append(patched)
        pos = m.end()
    out.append(configured[pos:])
    return "".join(out)
