"""The accuracy check: does a folded model compute what the original computes in onnxruntime?

``compare`` runs it: ``outputs`` compares the two models' outputs on input sets, ``folds``
computes every folded tensor again from the original, ``rewrites`` runs every rewrite's
replaced window against its replacement, all over ``running`` (the models, the feeds, the
check's own onnxruntime runner, memory, tolerances, the original's cones), which shares no
execution code with the fold. ``result`` holds what they found.
"""
