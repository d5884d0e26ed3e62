"""onnxruntime's graph optimization levels by the names ``--ort-level`` takes.

A module of its own, without imports, so that the command line can offer them without loading
onnxruntime. ``all`` is what an ``InferenceSession`` uses unless told otherwise: how a user
deploys a model, so the reference a check compares with.
"""

LEVELS = ("disable", "basic", "extended", "all")
DEFAULT_LEVEL = "all"
