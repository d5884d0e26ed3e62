"""The accuracy check: does a folded model compute what the original computes in onnxruntime?

``feeds`` builds the inputs, ``sessions`` opens the models, ``comparison`` runs both and
compares outputs within the tolerances of ``tolerance``.
"""
