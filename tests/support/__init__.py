"""Helpers the test tiers share, one module per job, imported as ``tests.support.<module>``.

``tests/conftest.py`` keeps only fixtures; pytest puts the repository root on ``sys.path``
(``pythonpath`` in pyproject.toml), so these imports work for one file, a tier or ``-n 2``.
"""
