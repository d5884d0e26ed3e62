"""FoldOptions and its flags: one place for names, defaults and help."""

from __future__ import annotations

import argparse
from dataclasses import fields

from onnxfold.fold.options import FoldOptions, add_arguments, from_args


def _parse(*argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_args(parser.parse_args(list(argv)))


def test_no_flags_give_the_default_options():
    assert _parse() == FoldOptions()


def test_every_field_has_a_flag_with_help():
    for f in fields(FoldOptions):
        assert f.metadata["cli"].name.startswith("--") and f.metadata["cli"].help, f.name


def test_flags_set_their_fields():
    options = _parse("--no-fallback", "--allow-growth", "--disable-rule", "Neg",
                     "--disable-rule", "merge_transposes", "--pool-budget", "1G",
                     "--input-shape", "x:1,3", "--input-shape", "N=2", "--expansion-min", "2M")
    assert options.fallback is False and options.growth_factor is None
    assert options.disabled_rules == {"Neg", "merge_transposes"}
    assert options.pool_budget == 1 << 30 and options.expansion_min_bytes == 2 << 20
    assert options.input_shapes == ("x:1,3", "N=2")
    assert _parse("--growth-factor", "2").growth_factor == 2.0
