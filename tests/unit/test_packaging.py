"""The wheel must ship every subpackage (setuptools is given an explicit list)."""

import os

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_package_directory_is_listed_in_pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    found = {"onnxfold.rules"}
    for dirpath, _dirs, files in os.walk(os.path.join(ROOT, "onnxfold")):
        if "__init__.py" in files and "__pycache__" not in dirpath:
            found.add(os.path.relpath(dirpath, ROOT).replace(os.sep, "."))
    assert found == listed


def test_the_report_schema_is_package_data():
    """``onnxfold.pipeline.report_schema`` reads report.schema.json from the installed package."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        data = tomllib.load(f)["tool"]["setuptools"]["package-data"]["onnxfold"]
    assert "report.schema.json" in data
    assert os.path.isfile(os.path.join(ROOT, "onnxfold", "report.schema.json"))
