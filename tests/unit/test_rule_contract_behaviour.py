"""The rule contract by behaviour (issue 66): the driver, not the rule, decides whether a
rewrite may remove what it matched.

Each pattern rule has a seed (``tests/support/rule_seeds.py``): a small model on which it
rewrites at a named node. The values the rewrite consumes (those of the seed that are gone
after it) are varied one at a time: a second reader (an Identity whose result is a graph
output), a graph output themselves; and the seed's initializers become graph inputs with
defaults (IR >= 4: a caller may feed them). Held of every rule:

- with a consumed value read elsewhere, the rule's attempt at the same node either still
  rewrites (what it builds may differ) or is refused by the driver's judgement
  (``rewrite/judge.py``); a rule that declines on its own there counted the readers itself;
- the optimized variant computes what the variant computes in onnxruntime (the initializers
  turned inputs fed other values), whatever was decided.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from onnxfold import optimize
from onnxfold.declare.catalogue import load_catalogue
from tests.support.rule_attempts import attempt
from tests.support.rule_seeds import seeds

SEEDS = seeds()


def _pattern_rules() -> set[str]:
    return {rule.name for rules in load_catalogue().patterns_by_op().values() for rule in rules}


def test_every_pattern_rule_has_a_seed():
    assert set(SEEDS) == _pattern_rules()


@pytest.mark.parametrize("rule", sorted(SEEDS))
def test_the_rule_rewrites_its_seed(rule, monkeypatch):
    seed = SEEDS[rule]
    proto = seed.build()
    onnx.checker.check_model(proto)
    done, _ = attempt(proto, rule, seed.at, monkeypatch, seed.runtime_inputs)
    assert done.rewrote, done


def _outputs_of_nodes(proto: onnx.ModelProto) -> list[str]:
    return [name for node in proto.graph.node for name in node.output if name]


def _consumed(rule: str, monkeypatch) -> list[str]:
    """The values of ``rule``'s seed that its rewrite consumes: computed by a node, no graph
    output, and gone or read by nothing once it rewrote (the cleanups remove what is dead)."""
    seed = SEEDS[rule]
    proto = seed.build()
    done, after = attempt(proto, rule, seed.at, monkeypatch, seed.runtime_inputs)
    assert done.rewrote, done
    left = {str(v.name) for node in after.graph for v in node.outputs if v.uses()}
    outputs = {o.name for o in proto.graph.output}
    return [name for name in _outputs_of_nodes(proto) if name not in left and name not in outputs]


def _typed(proto: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Every value's type as onnx's inference gives it."""
    inferred = onnx.shape_inference.infer_shapes(proto)
    graph = inferred.graph
    return {info.name: info for info in [*graph.value_info, *graph.output, *graph.input]}


def _read_elsewhere(proto: onnx.ModelProto, value: str) -> onnx.ModelProto:
    """``proto`` with an Identity of ``value`` as a further graph output."""
    info = _typed(proto)[value]
    variant = onnx.ModelProto()
    variant.CopyFrom(proto)
    variant.graph.node.append(helper.make_node("Identity", [value], [f"{value}_also"],
                                               name=f"{value}_second_reader"))
    extra = variant.graph.output.add()
    extra.CopyFrom(info)
    extra.name = f"{value}_also"
    return variant


def _returned(proto: onnx.ModelProto, value: str) -> onnx.ModelProto:
    """``proto`` with ``value`` a graph output too."""
    variant = onnx.ModelProto()
    variant.CopyFrom(proto)
    variant.graph.output.add().CopyFrom(_typed(proto)[value])
    return variant


def _initializers_as_inputs(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with every initializer also a graph input (a default a caller may feed)."""
    variant = onnx.ModelProto()
    variant.CopyFrom(proto)
    for init in proto.graph.initializer:
        variant.graph.input.append(helper.make_tensor_value_info(
            init.name, init.data_type, list(init.dims)))
    return variant


VARIANTS = {"read_elsewhere": _read_elsewhere, "returned": _returned}


def _cases() -> list[tuple[str, str, str]]:
    """(rule, variant, consumed value) for every seed, found by rewriting it once."""
    mp = pytest.MonkeyPatch()
    try:
        return [(rule, kind, value) for rule in sorted(SEEDS)
                for value in _consumed(rule, mp) for kind in VARIANTS]
    finally:
        mp.undo()


CASES = _cases()


def test_every_seed_has_a_consumed_value_to_vary():
    """A seed whose rewrite consumes nothing would vary nothing (a rule dropping one node
    consumes its result)."""
    assert {rule for rule, _, _ in CASES} == set(SEEDS)


# (rule, variant, the value varied) where the readers of a value decide what a rule builds,
# not whether it may remove it: the rule declines there itself (its check says why in a
# '# what to build:' comment). Held exact: a decline not listed fails, and so does a listed
# one that no longer happens.
WHAT_TO_BUILD = {
    ("constant_of_shape_as_expand", "read_elsewhere", "c"):
        "an Expand of the scalar pays only where its one reader can then fold on it",
    ("constant_of_shape_as_expand", "returned", "c"):
        "an Expand of the scalar pays only where its one reader can then fold on it",
    ("postpone_expand", "read_elsewhere", "e"):
        "an Expand another node reads stays: postponed past one reader it would run twice",
    ("postpone_expand", "returned", "e"):
        "an Expand the graph returns stays: postponed past one reader it would run twice",
    ("split_to_sequence_as_split", "read_elsewhere", "seq"):
        "a sequence read by other than SequenceAt stays a sequence (the Split replaces each "
        "SequenceAt by a part)",
}


@pytest.mark.parametrize(("rule", "kind", "value"), CASES)
def test_the_driver_decides_what_a_value_read_elsewhere_allows(rule, kind, value, monkeypatch):
    seed = SEEDS[rule]
    variant = VARIANTS[kind](seed.build(), value)
    done, _ = attempt(variant, rule, seed.at, monkeypatch, seed.runtime_inputs)
    if (rule, kind, value) in WHAT_TO_BUILD:
        assert not done.rewrote and done.refused_by_driver is None, (
            f"{rule} now {done} with {value} {kind.replace('_', ' ')}: take it out of "
            f"WHAT_TO_BUILD")
        return
    assert done.rewrote or done.refused_by_driver is not None, (
        f"{rule} at {seed.at} with {value} {kind.replace('_', ' ')}: {done} (the rule "
        f"counted readers the driver judges)")


def _feeds(proto: onnx.ModelProto, defaults_fed: bool) -> dict[str, np.ndarray]:
    """Random values of the graph inputs (a symbolic dim 3); with ``defaults_fed``, the
    float initializers listed as inputs fed values of their own (x * 1.5 + 0.25)."""
    rng = np.random.default_rng(1)
    initial = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    feeds = {}
    for info in proto.graph.input:
        if info.name in initial:
            array = initial[info.name]
            if defaults_fed and array.dtype.kind == "f":
                feeds[info.name] = np.asarray(array * 1.5 + 0.25, dtype=array.dtype)
            continue
        dims = [d.dim_value if d.HasField("dim_value") else 3
                for d in info.type.tensor_type.shape.dim]
        feeds[info.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def _run(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, object]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _assert_computes_the_same(variant: onnx.ModelProto, defaults_fed: bool = False) -> None:
    folded = optimize(variant).to_proto()
    feeds = _feeds(variant, defaults_fed)
    want, got = _run(variant, feeds), _run(folded, feeds)
    assert list(got) == list(want)
    for name in want:  # a sequence: a list of tensors
        expected, actual = want[name], got[name]
        if isinstance(expected, list):
            assert isinstance(actual, list) and len(actual) == len(expected), name
        for one, other in zip(actual if isinstance(actual, list) else [actual],
                              expected if isinstance(expected, list) else [expected],
                              strict=True):
            assert one.shape == other.shape and one.dtype == other.dtype, name
            np.testing.assert_allclose(one, other, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize(("rule", "kind", "value"), CASES)
def test_the_optimized_variant_computes_the_variant(rule, kind, value):
    _assert_computes_the_same(VARIANTS[kind](SEEDS[rule].build(), value))


@pytest.mark.parametrize("rule", sorted(SEEDS))
def test_initializers_fed_as_inputs_are_not_baked(rule):
    _assert_computes_the_same(_initializers_as_inputs(SEEDS[rule].build()), defaults_fed=True)


def _constant_slots(proto: onnx.ModelProto) -> list[str]:
    """The seed's constant slots a broadcast can raise: its initializers and Constant nodes
    (an epsilon, an exponent, a scale)."""
    return [t.name for t in proto.graph.initializer] + [
        node.output[0] for node in proto.graph.node if node.op_type == "Constant"
        and any(a.name == "value" for a in node.attribute)]


def _raised(proto: onnx.ModelProto, slot: str) -> onnx.ModelProto | None:
    """``proto`` with the constant ``slot`` given leading axes of 1 up to one more axis than
    any graph input or output has (the same values, broadcast into more axes), its outputs
    declared at the rank the variant computes (each dim symbolic); None where onnxruntime
    refuses the variant (a slot no broadcast reaches)."""
    variant = onnx.ModelProto()
    variant.CopyFrom(proto)
    typed = _typed(proto)
    rank = 1 + max(len(typed[v.name].type.tensor_type.shape.dim)
                   for v in [*proto.graph.input, *proto.graph.output])
    for tensor in [*variant.graph.initializer,
                   *(a.t for n in variant.graph.node if n.op_type == "Constant"
                     and n.output[0] == slot for a in n.attribute if a.name == "value")]:
        if tensor.name in (slot, ""):
            array = numpy_helper.to_array(tensor)
            array = array.reshape((1,) * (rank - array.ndim) + array.shape)
            tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
    del variant.graph.value_info[:]
    for output in variant.graph.output:
        output.type.tensor_type.ClearField("shape")
    try:
        computed = _run(variant, _feeds(variant, False))
    except Exception:  # onnxruntime refuses it: the slot takes no such broadcast
        return None
    for output in variant.graph.output:
        shape = output.type.tensor_type.shape
        shape.SetInParent()
        for k in range(np.ndim(computed[output.name])):
            shape.dim.add().dim_param = f"{output.name}_{k}"
    return variant


RAISED = [(rule, slot) for rule in sorted(SEEDS) for slot in _constant_slots(
    SEEDS[rule].build())]


def test_the_seeds_have_constant_slots_to_raise():
    assert {rule for rule, _ in RAISED} >= {"write_normalization", "drop_neutral_element",
                                            "merge_constant_factors", "scale_the_product_once"}


@pytest.mark.parametrize(("rule", "slot"), RAISED)
def test_a_constant_that_raises_the_rank_is_kept_or_left(rule, slot):
    """Issue 82: a constant of more axes than the input (a size-1 epsilon of shape [1, 1, 1])
    broadcasts the result into them; a rewrite keeps that shape and those values, or does not
    fire."""
    variant = _raised(SEEDS[rule].build(), slot)
    if variant is None:
        pytest.skip(f"onnxruntime runs no {slot} of rank > its input's in this seed")
    _assert_computes_the_same(variant)
