"""FoldOptions and its flags: one place for names, defaults and help."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import fields

import pytest

from onnxfold.app.parser import add_fold_flags, fold_options
from onnxfold.fold.settings import Evaluation, FoldSettings, SizePolicy
from onnxfold.pipeline.options import FoldOptions, flag_of


def _parse(*argv):
    parser = argparse.ArgumentParser()
    add_fold_flags(parser)
    return fold_options(parser.parse_args(list(argv)))


def test_no_flags_give_the_default_options():
    assert _parse() == FoldOptions()


def test_every_field_has_a_flag_with_help():
    for f in fields(FoldOptions):
        assert flag_of(f).name.startswith("--") and flag_of(f).help, f.name


def test_flags_set_their_fields():
    options = _parse("--no-fallback", "--allow-growth", "--disable-rule", "Neg",
                     "--disable-rule", "merge_transposes", "--pool-budget", "1G",
                     "--input-shape", "x:1,3", "--input-shape", "N=2", "--expansion-min", "2M")
    assert options.fallback is False and options.growth_factor is None
    assert options.disabled_rules == {"Neg", "merge_transposes"}
    assert options.pool_budget == 1 << 30 and options.expansion_min_bytes == 2 << 20
    assert options.input_shapes == ("x:1,3", "N=2")
    assert _parse("--growth-factor", "2").growth_factor == 2.0


def test_a_bad_number_names_the_flag():
    with pytest.raises(SystemExit):
        _parse("--growth-factor", "-1")


def test_the_default_options_fold_as_the_fold_does_without_options():
    """The fold's defaults are its own (``onnxfold.fold.settings``); the options take them,
    so ``fold_model(model)`` folds as ``optimize(model)`` does."""
    assert FoldOptions().fold_settings() == FoldSettings()
    assert FoldOptions().fold_settings().policy == SizePolicy()
    assert FoldOptions().fold_settings().evaluation == Evaluation()


def test_each_slice_carries_what_it_is_given():
    options = FoldOptions(keep=("Gather",), growth_factor=None, fold_qdq=True, fallback=False,
                          memory_limit=1 << 30, strict=True, assume_named_dims_equal=True)
    folding = options.fold_settings()
    assert folding.keep == frozenset({"Gather"})
    assert folding.policy.growth_factor is None and folding.policy.fold_qdq
    assert not folding.evaluation.fallback and folding.evaluation.memory_limit == 1 << 30
    assert folding.evaluation.strict
    settings = options.run_settings(["MyOp"])
    assert settings.keep == frozenset({"Gather"}) and settings.named_dims_equal
    assert settings.unknown_ops == frozenset({"MyOp"})


def test_options_are_a_frozen_value_changed_by_replace():
    """One way to change an option: ``dataclasses.replace``. Assigning a field raises, and
    the collections given (a set, a list, a dict of shapes) are stored immutable, so no
    caller holding the options can change what a run it was given reads."""
    options = FoldOptions(disabled_rules={"Neg"}, keep=["Gather"],
                          input_shapes={"x": [1, None]})
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.fold_qdq = True  # type: ignore[misc]
    assert isinstance(options.disabled_rules, frozenset) and options.keep == ("Gather",)
    assert options.input_shapes == ("x:1,?",)
    assert hash(options) == hash(FoldOptions(disabled_rules=frozenset({"Neg"}),
                                             keep=("Gather",), input_shapes=("x:1,?",)))
    changed = dataclasses.replace(options, fold_qdq=True)
    assert changed.fold_qdq and not options.fold_qdq
    assert FoldOptions(keep="Gather").keep == ("Gather",)  # one name, not its letters
