"""onnxfold's declarative folding rules, one module per op family.

Every module here is imported by :func:`onnxfold.declare.catalogue.load_catalogue`. A folder
is a numpy function declared with :func:`onnxfold.declare.registry.folder` (see
``elementwise.py``); a pattern is declared with :func:`onnxfold.declare.patterns.pattern`
(``rewrites.py``), a cleanup with :func:`onnxfold.declare.patterns.cleanup` (``cleanups.py``).
"""
