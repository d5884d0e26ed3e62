"""The accuracy check: does a folded model compute what the original computes in onnxruntime?

``compare`` runs it: ``outputs`` compares the two models' outputs on input sets, ``folds``
computes every folded tensor again from the original, ``rewrites`` runs every rewrite's replaced
window against its replacement. They stand on three rooms by job: ``running`` (the models, the
check's own onnxruntime runner, memory, the original's cones), ``inputs`` (the feeds and the
plan of dims) and ``judging`` (tolerances, bits, verdicts, magnitudes). Of the fold the check
reaches only pure data (the run's evidence and rewrite record) and, by decision, ONNX's shape
inference through the fold's wrapper (``analysis.shapes``) and its inlining guard
(``tests/unit/test_import_layers.py`` follows every import to what it reaches and lists those):
the wrapper's work is bounding onnx's inference (data propagation, function expansion) and
clearing what onnx misreads (a declared ``-1``), hazards the check meets alike, and a copy
would be some 300 lines kept in step by hand; what the check proves from inference
(``folds.dim_proof``) it also runs at every binding. ``result`` holds what they found.
"""
