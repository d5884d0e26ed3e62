"""onnxfold's declarative folding rules, one module per op family.

Every module here is imported by :func:`onnxfold.declare.catalogue.load_catalogue`, and imports
only the rule API, :mod:`onnxfold.declare` (and ``onnxfold.ir``). A folder is a numpy function
declared with :func:`onnxfold.declare.folder` (see ``elementwise.py``); a pattern is declared
with :func:`onnxfold.declare.pattern` (``rewrites.py``), what an op does to shape values and
dims with :func:`onnxfold.declare.shape_value` and :func:`onnxfold.declare.shape_dims`
(``shape_steps.py``). Groups of ops several rules read are defined once in ``op_groups.py``.

``MODULES`` lists every module in the order the catalogue holds their rules (each module's in
declaration order): the order in which the patterns of an op are tried at a node. A new module
is added there, at the place its rules should take; the catalogue refuses a module not
listed. ``no_ops`` comes before ``shape_values``: a Reshape or Transpose
that is a no-op by its static shapes goes before any rule of ``shape_values`` asks for the
symbolic shape values, a whole-graph walk (on a 12k-node graph of such Reshapes the rewrite
phase took 1.5x as long with the order reversed).
"""

MODULES = (
    "contrib",
    "dropout",
    "elementwise",
    "facts",
    "fusions",
    "fusable",
    "generators",
    "linalg",
    "low_rank",
    "normalizations",
    "op_groups",
    "quant",
    "recurrent_states",
    "reduce",
    "rewrites",
    "shape_ops",
    "shape_steps",
    "no_ops",
    "op_costs",
    "shape_values",
    "shared_input_matmuls",
    "sizes",
    "structure",
    "window_dims",
    "zero_sign",
)
