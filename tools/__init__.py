"""Developer tools that CI, tests and benchmarks import: the wild corpus, fuzzing, commit A/B.

Run from the repository root as modules (``python -m tools.wild_corpus fetch``,
``python -m tools.fuzz.campaign --n 10000``, ``python -m tools.compare_commits main HEAD``);
pytest finds the package through ``pythonpath = ["."]`` in pyproject.toml. Not installed with
onnxfold.
"""
