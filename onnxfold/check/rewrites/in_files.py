"""A file's rewrites validated, and the tensors only they read judged with them.

``verify-folds`` and ``compare`` read an optimized file that carries no record they may trust
(``file_windows``): the windows the check finds by reading both models run on the reference's
input sets as a run's records do (``validation``). Where a window differs at a value, the value
is *opened*: compared no more there, but where what reads it hands on (a few rounds): the
same meaning may be written in another form under the original's name.

A tensor that matches a recipe the check accepts as the original's computation
(``check/folds/recipe_forms``), or one of structure (a few integers: axes, a Reshape's target)
that the file says a rewrite made (a parameter, a rewired value), and that only validated
windows read is then a *parameter* of them, judged with them on the
input sets, as ``optimize --check`` judges its own rewrites' parameters; one that anything
else reads, that a window that did not validate reads, or that no such word names (another
tool's), keeps its verdict."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence

import onnx_ir as ir

from onnxfold.check.judging.verdicts import (
    AGREES,
    DIFFERS,
    PARAMETER,
    STRUCTURE_ELEMENTS,
    UNVERIFIABLE,
    Verdict,
)
from onnxfold.check.rewrites.file_windows import FileRewrites, rewritten_windows
from onnxfold.check.rewrites.validation import RewriteValidation

OPENINGS = 3  # rounds of opening the values where windows differ

# what the file says made a tensor: a rewrite's parameter, a recipe, a rewired value (a tensor
# with no such word, another tool's, is not presumed a rewrite's: not verifiable, as it was)
CLAIMED = ("rewrite", "recipe", "rewired")
RECIPE = "recipe"  # a recipe the check accepted as the original's computation, and matched
JUDGED_WITH = ("read only by windows of the file validated on the input sets (judged with "
               "them)")


def structural(verdict: Verdict) -> bool:
    """Whether ``verdict``'s tensor is structure (a few integers: axes, a Reshape's target,
    sizes), which windows run on the input sets judge exactly (a wrong axis or size changes
    what they compute, not its last bits). A float tensor that matches no recipe the check
    accepts is not judged by its windows' tolerance: a file's word that a rewrite made it
    would excuse any difference the tolerance hides, where without that word it is not
    verifiable."""
    dtype = (verdict.dtype or "").lower()
    return dtype.startswith(("int", "uint", "bool")) and \
        math.prod(verdict.shape) <= STRUCTURE_ELEMENTS


def validated_windows(original: ir.Model, optimized: ir.Model, found: FileRewrites,
                      validate: Callable[[FileRewrites], RewriteValidation],
                      reshaped: Collection[str] = ()) -> tuple[FileRewrites, RewriteValidation]:
    """The windows of ``optimized`` that ``original`` does not hold (``found``: as first
    found), validated (``validate``): the values ``reshaped`` (:func:`reshaped_values`) opened
    from the start, those where windows differ for a few rounds (module), a graph output
    never; the validation says which were opened."""
    outputs = {str(v.name) for v in optimized.graph.outputs}
    opened = set(reshaped) - outputs
    if opened:
        found = rewritten_windows(original, optimized, opened)
    validation = validate(found)
    for _ in range(OPENINGS):
        wrong: set[str] = set()
        for record, verdict in zip(found.records, validation.rewrites):
            if verdict.state != DIFFERS:
                continue
            # where it differs; where its replacement could not run, what it reads that
            # another window computes (in another form, maybe)
            wrong |= {verdict.output} if verdict.output else set(
                record.after.originals) & found.computed if record.after is not None else set()
        wrong -= opened | outputs
        if not wrong:
            break
        opened |= wrong
        found = rewritten_windows(original, optimized, opened)
        validation = validate(found)
    validation.opened = sorted(opened)
    return found, validation


def reshaped_values(original: ir.Model, optimized: ir.Model) -> set[str]:
    """The values both models name whose ranks, where both say them, differ (a rewrite
    flattened an elementwise chain between Reshapes: ``[1, 16, 256]`` as ``[16, 256]``);
    both models with their shapes inferred (``running.cones.reinferred``)."""
    shapes = {str(v.name): v.shape for node in original.graph for v in node.outputs
              if v.name and v.shape is not None}
    return {str(v.name) for node in optimized.graph for v in node.outputs
            if v.shape is not None and shapes.get(str(v.name)) is not None and
            len(v.shape) != len(shapes[str(v.name)])}


def judge_parameters(tensors: list[Verdict], found: FileRewrites,
                     validation: RewriteValidation, edited: Sequence[str] = ()) -> None:
    """Each of ``tensors`` not verifiable alone (and not an original weight under its name
    with other values: ``edited``) that only validated windows read becomes a parameter of
    them."""
    validated = [record for record, verdict in zip(found.records, validation.rewrites)
                 if verdict.state in AGREES and not verdict.unrun]
    reads: dict[str, int] = {}
    for record in validated:
        for name, count in found.reads[id(record)].items():
            reads[name] = reads.get(name, 0) + count
    for verdict in tensors:
        if verdict.state != UNVERIFIABLE or verdict.name in edited or verdict.via not in CLAIMED \
                or (verdict.via != RECIPE and not structural(verdict)):
            continue
        readers = found.readers.get(verdict.name, 0)
        if readers and reads.get(verdict.name, 0) == readers:
            verdict.state, verdict.reason, verdict.via = PARAMETER, JUDGED_WITH, "rewrite"
