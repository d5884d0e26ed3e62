"""What an op reads of each of its inputs, from the ONNX spec: the check's own facts.

A cone is run from the values its nodes read (``running.cones``); the input plan follows how
each value depends on the graph's inputs (``inputs.input_reads``); the dim proof follows what
decides a folded value's shape (``folds.dim_proof``). All three read these tables, never the
rules' op facts, so that a fact declared wrongly for the fold cannot confirm a fold.
"""

from __future__ import annotations

# (op type, input index) whose shape (and type) the op reads, never its values
SHAPE_ONLY_READS = frozenset({
    ("Shape", 0), ("Size", 0), ("EyeLike", 0), ("RandomNormalLike", 0),
    ("RandomUniformLike", 0)})
# (op type, input index) whose element type alone the op reads: not its shape nor values
TYPE_ONLY_READS = frozenset({("CastLike", 1)})
# op type -> the inputs whose values decide the op's output shape ("*": all of them)
SHAPE_FROM_VALUES: dict[str, tuple[int, ...] | str] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4),
    "ConstantOfShape": (0,), "Range": (0, 1, 2), "Squeeze": (1,), "Unsqueeze": (1,),
    "Pad": (1, 3), "Resize": (1, 2, 3), "Upsample": (1,), "TopK": (1,), "OneHot": (1,),
    "Split": (1,), "Compress": (1,), "CenterCropPad": (1,), "Col2Im": (1, 2), "DFT": (1, 2),
    "STFT": (1, 3), "MaxUnpool": (2,), "AffineGrid": (1,), "SplitToSequence": (1,),
    "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,),
    "ReduceProd": (1,), "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,),
    "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,), "SequenceAt": (1,),
    "SequenceInsert": "*", "SequenceErase": "*", "ConcatFromSequence": "*",
    "SequenceConstruct": "*", "SequenceEmpty": "*", "SequenceLength": "*", "SequenceMap": "*",
    "NonZero": "*", "Unique": "*", "NonMaxSuppression": "*", "StringSplit": "*",
    "StringNormalizer": "*", "MelWeightMatrix": "*", "HannWindow": "*", "HammingWindow": "*",
    "BlackmanWindow": "*", "ImageDecoder": "*", "Optional": "*", "OptionalGetElement": "*",
    "OptionalHasElement": "*", "If": "*", "Loop": "*", "Scan": "*"}
