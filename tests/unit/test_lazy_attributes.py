"""A package's public names are imported on first use (PEP 562 ``__getattr__``) and kept in
the package's own globals, so the second access costs nothing; no other module is touched."""

from __future__ import annotations

import email
import email.parser

import pytest

from onnxfold._lazy import lazy_attributes
from tests.support.cli import run_python


def test_a_name_is_imported_on_first_use_and_kept_in_the_namespace():
    namespace = {"__name__": "email"}
    getattr_ = lazy_attributes(namespace, {"Parser": "parser"})
    assert getattr_("Parser") is email.parser.Parser
    assert namespace["Parser"] is email.parser.Parser
    assert "Parser" not in vars(email)  # the module object in sys.modules is left alone


def test_an_unknown_name_is_an_attribute_error():
    getattr_ = lazy_attributes({"__name__": "json"}, {})
    with pytest.raises(AttributeError, match="module 'json' has no attribute 'nope'"):
        getattr_("nope")


def test_the_package_imports_a_public_name_only_when_asked():
    code = ("import onnxfold, sys\n"
            "print('onnxfold.runtime.session' in sys.modules, 'Session' in vars(onnxfold))\n"
            "onnxfold.Session\n"
            "print('onnxfold.runtime.session' in sys.modules, 'Session' in vars(onnxfold))\n"
            "print(hasattr(onnxfold, 'nope'))")
    done = run_python("-c", code, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout.split("\n")
    assert out[:3] == ["False False", "True True", "False"]
