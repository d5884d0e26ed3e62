"""The accuracy check: does a folded model compute what the original computes in onnxruntime?

``compare`` runs it: ``outputs`` compares the two models' outputs on input sets, ``folds``
computes every folded tensor again from the original, ``rewrites`` runs every rewrite's
replaced window against its replacement, all over ``running`` (the models, the feeds, the
check's own onnxruntime runner, memory, tolerances, the original's cones). Of the fold the
check reaches only pure data (the run's evidence and rewrite record) and, still, ONNX's shape
inference through the fold's wrapper (``analysis.shapes``) and its inlining guard
(``tests/unit/test_import_layers.py`` follows every import to what it reaches and lists
those). ``result`` holds what they found.
"""
