"""A small model for each pattern rule, on which the rule rewrites at a named node: the seeds
the behavioural rule contract (``tests/unit/test_rule_contract_behaviour.py``) varies.

A seed's every node is named, its inputs are float tensors (a dim may be symbolic), the
values the rule's match consumes are read by nothing but the match, and its outputs are read
after the match (a node beyond the rewritten region), so that each consumed value is an
intermediate the contract can give a second reader, make a graph output, or (an initializer)
list as a graph input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnx


@dataclass(frozen=True)
class Seed:
    """``build`` makes the model; ``at``: the name of the node the rule rewrites at;
    ``runtime_inputs``: the inputs the run holds constant at run time (a rule that pays only
    across them applies only where they are set)."""

    build: Callable[[], onnx.ModelProto]
    at: str
    runtime_inputs: tuple[str, ...] = ()


def seeds() -> dict[str, Seed]:
    """Every seed, by the name of its rule."""
    from tests.support.rule_seeds_arithmetic import SEEDS as ARITHMETIC
    from tests.support.rule_seeds_structure import SEEDS as STRUCTURE

    return {**ARITHMETIC, **STRUCTURE}
