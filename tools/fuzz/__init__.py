"""Differential fuzzing of onnxfold against onnxruntime.

``graphgen`` builds a valid random ONNX model per seed, ``fuzzcheck`` folds it and compares the
folded model with the original in onnxruntime, ``shrink`` reduces a failing model to a few
nodes, and ``campaign`` runs thousands of seeds in worker processes
(``python -m tools.fuzz.campaign --n 10000``). ``tests/fuzz`` runs 200 seeds in CI.
``check_campaign`` runs the check (``onnxfold.compare``) on every fold the fuzzer finds right:
it must pass them.
"""
