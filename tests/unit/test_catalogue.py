"""The rule catalogue: immutable, filtered per call, opset ranges that exist, no state leaks."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper
from test_policy import _tied_embedding

import onnxfold
from onnxfold.declare import SHAPE_FOLDING, OpBuilder, P, Var, pattern
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.declare.pattern_rules import PatternRule
from onnxfold.declare.registry import RULES_ATTR, FolderRule
from onnxfold.pipeline.options import FoldOptions
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import fold_proto


def _neg_model():
    nodes = [helper.make_node("Neg", ["c"], ["n"]), helper.make_node("Add", ["x", "n"], ["y"])]
    return make_model(nodes, [vinfo("x", shape=[3])], [vinfo("y", shape=[3])],
                      [tensor("c", np.float32([1, 2, 3]))])


def test_disabling_a_rule_does_not_leak_into_later_calls(tmp_path):
    _, report, _ = fold_proto(_neg_model(), tmp_path, FoldOptions(disabled_rules={"Neg"}))
    assert "Neg_v6" not in report.rule_hits and report.folded_fallback == 1
    _, report, _ = fold_proto(_neg_model(), tmp_path, name="again.onnx")
    assert report.rule_hits == {"Neg_v6": 1}  # the shared catalogue was not changed
    assert load_catalogue().folder("", "Neg", 17) is not None


def test_an_op_type_disables_the_patterns_that_match_it(tmp_path):
    x = vinfo("x", shape=[2, 3])
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 0]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0]),
             helper.make_node("Relu", ["t2"], ["y"])]
    proto = make_model(nodes, [x], [vinfo("y", shape=[2, 3])])
    _, report, _ = fold_proto(proto, tmp_path)
    assert report.pattern_hits == {"merge_transposes": 1}
    folded, report, _ = fold_proto(proto, tmp_path, FoldOptions(disabled_rules={"Transpose"}),
                                   name="off.onnx")
    assert report.pattern_hits == {}
    assert [n.op_type for n in folded.graph.node] == ["Transpose", "Transpose", "Relu"]
    assert load_catalogue().without({"Add"}).patterns_by_op().get("Add") is None
    assert "Mul" in load_catalogue().without({"Add"}).patterns_by_op()  # other roots stay


def test_no_shape_folding_keeps_the_growth_policy(tmp_path):
    proto, wte = _tied_embedding(1024, 512)  # 2 MiB, shared by a Gather and a Transpose
    options = FoldOptions(shape_folding=False, strict=True)
    folded, report, _ = fold_proto(proto, tmp_path, options)
    assert report.declined == {"growth": 1}
    assert sum(t.ByteSize() for t in folded.graph.initializer) < 1.5 * wte.nbytes


def test_rule_opset_ranges_exist_in_onnx():
    for rule in load_catalogue().of(FolderRule):
        schema = onnx.defs.get_schema(rule.op_type, rule.since, rule.domain)
        assert schema.since_version == rule.since, rule.name
        if rule.until is not None:
            later = onnx.defs.get_schema(rule.op_type, rule.until + 1, rule.domain)
            assert later.since_version == rule.until + 1, rule.name
        expected = rule.op_type if rule.since == 1 and rule.until is None else \
            f"{rule.op_type}_v{rule.since}"
        assert rule.name.startswith(expected), rule.name


def test_the_catalogue_is_immutable():
    catalogue = load_catalogue()
    with pytest.raises(AttributeError):
        catalogue.rules = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        catalogue.of(FolderRule)[0].since = 1  # type: ignore[misc]
    assert catalogue.without({"Neg"}) is not catalogue
    assert catalogue.without({"Neg"}).folder("", "Neg", 17) is None
    assert catalogue.only("merge_transposes").names() == {"merge_transposes"}


def test_a_pattern_records_where_it_is_declared():
    (rule,) = [p for p in load_catalogue().of(PatternRule) if p.name == "merge_transposes"]
    assert rule.source.endswith(".py:" + rule.source.rsplit(":", 1)[1])
    assert "rewrites.py" in rule.source and rule.uses == {"Transpose"}




def test_op_facts_are_declared_by_rules_not_the_engine():
    catalogue = load_catalogue()
    assert catalogue.shape_only == {"Shape", "Size"}  # the folders declared shape_only
    assert {"RandomNormal", "Bernoulli", "Multinomial"} <= catalogue.nondeterministic
    assert catalogue.kept_quantized == {"DequantizeLinear"}


def _string_constants(path: Path) -> list[tuple[int, str]]:
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


# the rule names onnxfold's own code may write: the runtime runs these rules by the names a
# user disables them by (docs/runtime-constants.md); the command line names the rules a user
# types (onnxsim's passes, as onnxfold's rules) and the one a failed check's line suggests
# disabling; no engine code decides by a rule's name
NAMED_BY_THE_RUNTIME = {
    ("runtime/reassociate.py", "merge_low_rank_branches"),
    ("runtime/session.py", "merge_low_rank_branches"),
    ("runtime/backends/iree_rewrites.py", "transpose_before_widening"),
    # onnxsim's pass names as the rules that do them (the table of onnxsim's names)
    *(("app/peer_flags.py", rule) for rule in (
        "fuse_batch_norm_into_conv", "merge_transposes", "merge_reshapes", "merge_unsqueezes",
        "fuse_matmul_add_into_gemm", "drop_inference_dropout", "fuse_add_into_conv",
        "fuse_mul_into_conv", "inline_constant_if", "drop_neutral_element", "drop_noop")),
    ("app/failure_line.py", "merge_shared_input_matmuls"),
}


def test_the_engine_names_no_rule_it_needs_to_know_of():
    """What the engine must know of a rule is a tag the rule declares (``tags=``), not its
    name in the engine's code: no pattern or cleanup name is a string constant of onnxfold/
    outside the runtime's own uses of the rules it runs."""
    catalogue = load_catalogue()
    names = {r.name for r in catalogue.of(PatternRule)}
    package = Path(onnxfold.__file__).parent
    found = {(str(path.relative_to(package)), value)
             for path in package.rglob("*.py")
             for _, value in _string_constants(path) if value in names}
    assert found == NAMED_BY_THE_RUNTIME


def test_a_rule_tagged_shape_folding_is_off_without_shape_folding():
    """``--no-shape-folding`` turns off every rule that declares the tag (a plugin's too),
    and only those: the engine reads the tag."""

    @pattern(P("Neg", P("Neg", Var("x"))), tags=[SHAPE_FOLDING])
    def tagged_double_negation(op: OpBuilder, x: ir.Value) -> ir.Value:
        return x

    (rule,) = getattr(tagged_double_negation, RULES_ATTR)
    assert rule.tags == {SHAPE_FOLDING}
    catalogue = load_catalogue() + Catalogue((rule,))
    assert catalogue.tagged(SHAPE_FOLDING) == {"known_shape_value", "reshape_known_target",
                                               rule.name}
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Neg", ["n"], ["nn"]),
             helper.make_node("Relu", ["nn"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[3])], [vinfo("y", shape=[3])])
    on = onnxfold.optimize(model, catalogue=catalogue).report.pattern_hits
    off = onnxfold.optimize(model, catalogue=catalogue, shape_folding=False).report.pattern_hits
    assert on == {rule.name: 1} and off == {}
    with pytest.raises(TypeError, match="unknown tags"):
        pattern(P("Neg", Var("x")), tags=["shape_folding_typo"])(tagged_double_negation)


def test_the_catalogue_is_one_list_in_the_explicit_module_order(monkeypatch):
    """Rules are held in the order ``rules.MODULES`` gives (each module's in declaration
    order), not the order of file names; a module left out of that list is refused."""
    import onnxfold.rules as package

    from onnxfold.declare import catalogue as catalogue_module

    catalogue = load_catalogue()
    modules = [Path(r.source.rsplit(":", 1)[0]).stem for r in catalogue.rules
               if hasattr(r, "source")]
    places = [package.MODULES.index(m) for m in modules]
    assert places == sorted(places) and len(set(places)) > 10
    first = package.MODULES[0]
    monkeypatch.setattr(package, "MODULES", package.MODULES[1:])
    with pytest.raises(ValueError, match=f"unlisted \\['{first}'\\]"):
        catalogue_module._modules(package)
    monkeypatch.setattr(package, "MODULES", (*reversed(package.MODULES), "nowhere"))
    with pytest.raises(ValueError, match="missing \\['nowhere'\\]"):
        catalogue_module._modules(package)


def test_static_no_ops_go_before_the_shape_values_rules():
    """A no-op by static shapes is removed before a rule asking for the symbolic shape values
    (a whole-graph walk) sees its node: ``no_ops`` is listed before ``shape_values``."""
    import rules as package

    assert package.MODULES.index("no_ops") < package.MODULES.index("shape_values")


def test_every_onnxsim_pass_maps_to_a_rule_or_cleanup_that_exists():
    """``--skip-optimization NAME`` disables the rule onnxsim's pass NAME is here: a renamed
    rule would leave the name pointing at nothing."""
    from onnxfold.app.peer_flags import ONNXSIM_PASSES
    from onnxfold.pipeline.cleanups import CLEANUPS

    known = load_catalogue().names() | {cleanup.name for cleanup in CLEANUPS}
    assert set(ONNXSIM_PASSES.values()) <= known, set(ONNXSIM_PASSES.values()) - known
