"""Runtime constants: splitting a model, the session that folds them at run time, and its backends.
"""
