"""onnxfold's declarative folding rules, one module per op family.

Every module here is imported by :func:`onnxfold.registry.default_registry`. A rule is a numpy
function registered with :func:`onnxfold.registry.folder`; see ``elementwise.py`` for examples.
"""
