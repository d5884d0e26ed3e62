"""Reduce a failing fuzz model to a small one that fails the same way.

``shrink(seed)`` (or ``shrink_subject(Subject(...))``) repeats, until nothing changes:

- keep a single graph output (the mismatching one first) and remove dead code, in every graph;
- drop outputs of If/Loop/Scan nodes that nothing reads (with their body outputs, carried
  values and states);
- replace a main-graph node by what it computed: an initializer when its outputs are the
  same under both assignments of the symbolic dims and computed from constants only, else a
  new graph input fed with the values the original computed (so upstream nodes die);

keeping a step only if the result still fails with the same signature
(``fuzzcheck.signature``). The result is a :class:`Subject` with its model and feeds.
"""

from __future__ import annotations

import copy
import re
import tempfile

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tools.fuzz import fuzzcheck, graphgen


class Subject:
    """A model with explicit feeds for the two assignments (what ``check_case`` needs)."""

    def __init__(self, model, feeds, assignments, seed=-1):
        self.model = model
        self._feeds = feeds
        self.assignments = assignments
        self.seed = seed
        self.expected = None
        self.ops = graphgen.count_ops(model.graph)

    def feeds(self, which: int) -> dict:
        names = {i.name for i in self.model.graph.input}
        return {k: v for k, v in self._feeds[which].items() if k in names}

    def with_model(self, model, feeds=None):
        return Subject(model, feeds or self._feeds, self.assignments, self.seed)


def from_case(case) -> Subject:
    return Subject(copy.deepcopy(case.model), [case.feeds(0), case.feeds(1)], case.assignments,
                   case.seed)


# -- graph surgery ---------------------------------------------------------------------------
def subgraphs(node):
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def names_read(graph) -> set:
    """Every name read by a node of ``graph`` or of its subgraphs, and its outputs."""
    out = {o.name for o in graph.output}
    for n in graph.node:
        out.update(i for i in n.input if i)
        for g in subgraphs(n):
            out |= names_read(g)
    return out


def dce(graph, keep_inputs: bool) -> None:
    """Remove nodes, initializers (and, for the main graph, inputs) nothing needs."""
    for n in graph.node:
        for g in subgraphs(n):
            dce(g, keep_inputs=True)
    changed = True
    while changed:
        changed = False
        needed = {o.name for o in graph.output}
        for n in graph.node:
            needed.update(i for i in n.input if i)
            for g in subgraphs(n):
                needed |= names_read(g)
        keep = [n for n in graph.node if any(o in needed for o in n.output if o)]
        if len(keep) != len(graph.node):
            del graph.node[:]
            graph.node.extend(keep)
            changed = True
    needed = names_read(graph)
    inits = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    if not keep_inputs:
        ins = [i for i in graph.input if i.name in needed]
        del graph.input[:]
        graph.input.extend(ins)


def used_anywhere(graph, name: str) -> bool:
    return name in names_read(graph)


def drop_cf_outputs(model) -> list:
    """Candidate models, each with one unread If/Loop/Scan output removed."""
    out = []

    def visit(graph, path):
        for ni, n in enumerate(graph.node):
            for k, o in enumerate(n.output):
                if not o or used_anywhere_in(model.graph, o):
                    continue
                cand = copy.deepcopy(model)
                g = locate(cand.graph, path)
                if remove_output(g.node[ni], k):
                    out.append(cand)
            for ai, a in enumerate(n.attribute):
                if a.type == onnx.AttributeProto.GRAPH:
                    visit(a.g, [*path, (ni, ai)])

    visit(model.graph, [])
    return out


def used_anywhere_in(root, name: str) -> bool:
    return name in names_read(root)


def locate(graph, path):
    for ni, ai in path:
        graph = graph.node[ni].attribute[ai].g
    return graph


def remove_output(node, k: int) -> bool:
    bodies = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
    if node.op_type == "If":
        if len(node.output) == 1:
            return False
        for g in bodies.values():
            del g.output[k]
        del node.output[k]
        return True
    if node.op_type == "Loop":
        body = bodies["body"]
        n_carried = len(node.input) - 2
        if k < n_carried:  # carried value: input k+2, body input k+2, body output k+1
            del node.input[k + 2]
            del body.input[k + 2]
            del body.output[k + 1]
        else:
            del body.output[k + 1]
        del node.output[k]
        return True
    if node.op_type == "Scan":
        body = bodies["body"]
        n_scan_in = next(a.i for a in node.attribute if a.name == "num_scan_inputs")
        n_states = len(node.input) - n_scan_in
        if len(node.output) == 1:
            return False
        if k < n_states:
            del node.input[k]
            del body.input[k]
        else:
            j = k - n_states
            for a in node.attribute:
                if a.name in ("scan_output_axes", "scan_output_directions"):
                    del a.ints[j]
        del body.output[k]
        del node.output[k]
        return True
    return False


def single_outputs(model, prefer: str | None) -> list:
    outs = [o.name for o in model.graph.output]
    if len(outs) <= 1:
        return []
    order = sorted(outs, key=lambda n: n != prefer)
    cands = []
    for name in order:
        cand = copy.deepcopy(model)
        keep = [o for o in cand.graph.output if o.name == name]
        del cand.graph.output[:]
        cand.graph.output.extend(keep)
        cands.append(cand)
    return cands


def intermediates(subject) -> list:
    """Values of every main-graph node output under both assignments (None if unavailable)."""

    model = copy.deepcopy(subject.model)
    have = {o.name for o in model.graph.output}
    extra = [o for n in model.graph.node for o in n.output if o and o not in have]
    for name in extra:
        model.graph.output.append(helper.make_value_info(name, onnx.TypeProto()))
    try:
        sess = fuzzcheck.session(model.SerializeToString())
        names = [o.name for o in sess.get_outputs()]
        return [dict(zip(names, sess.run(None, subject.feeds(a)))) for a in (0, 1)]
    except Exception:
        return []


def constant_names(graph) -> set:
    const = {t.name for t in graph.initializer} - {i.name for i in graph.input}
    for n in graph.node:
        reads = [i for i in n.input if i]
        for g in subgraphs(n):
            reads += [r for r in names_read(g) if r not in local_names(g)]
        if all(r in const for r in reads):
            const.update(o for o in n.output if o)
    return const


def local_names(graph) -> set:
    out = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    for n in graph.node:
        out.update(n.output)
        for g in subgraphs(n):
            out |= local_names(g)
    return out


def replace_node(subject, index: int, values: list, const: set):
    """The subject with main-graph node ``index`` replaced by its computed outputs."""
    model = copy.deepcopy(subject.model)
    node = model.graph.node[index]
    feeds = [dict(subject._feeds[0]), dict(subject._feeds[1])]
    for o in node.output:
        if not o:
            continue
        a, b = values[0].get(o), values[1].get(o)
        if not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray):
            return None
        if o in const and a.shape == b.shape and (
                np.array_equal(a, b, equal_nan=a.dtype.kind == "f")):
            model.graph.initializer.append(numpy_helper.from_array(a, o))
        else:
            if a.ndim != b.ndim:
                return None
            dims = [d if d == e else f"S{i}_{o}" for i, (d, e) in enumerate(zip(a.shape, b.shape))]
            elem = helper.np_dtype_to_tensor_dtype(a.dtype)
            model.graph.input.append(helper.make_tensor_value_info(o, elem, dims))
            feeds[0][o], feeds[1][o] = a, b
    del model.graph.node[index]
    return subject.with_model(model, feeds)


def dead_node_removals(model) -> list:
    """Candidates with one node removed whose outputs nothing reads (main graph)."""
    read = names_read(model.graph)
    out = []
    for i, n in enumerate(model.graph.node):
        if not any(o in read for o in n.output if o):
            cand = copy.deepcopy(model)
            del cand.graph.node[i]
            out.append(cand)
    return out


def value_types(model) -> dict:
    """name -> TypeProto (serialized) for every value onnx shape inference can type."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        return {}
    out = {}

    def visit(g):
        for v in list(g.input) + list(g.output) + list(g.value_info):
            if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
                out[v.name] = v.type.SerializeToString()
        for t in g.initializer:
            out[t.name] = helper.make_tensor_type_proto(t.data_type, list(t.dims)) \
                .SerializeToString()
        for n in g.node:
            for sub in subgraphs(n):
                visit(sub)

    visit(inferred.graph)
    return out


def rename_uses(graph, old: str, new: str) -> None:
    for n in graph.node:
        for k, i in enumerate(n.input):
            if i == old:
                n.input[k] = new
        for sub in subgraphs(n):
            rename_uses(sub, old, new)
    for o in graph.output:
        if o.name == old:
            o.name = new


def bypasses(model) -> list:
    """Candidates with one node (in any graph) replaced by one of its inputs of the same type."""
    types = value_types(model)
    out = []

    def visit(graph, path):
        for ni, n in enumerate(graph.node):
            if len(n.output) == 1 and n.output[0] in types:
                for i in dict.fromkeys(x for x in n.input if x):
                    if types.get(i) == types[n.output[0]]:
                        cand = copy.deepcopy(model)
                        g = locate(cand.graph, path)
                        node = g.node[ni]
                        old = node.output[0]
                        del g.node[ni]
                        rename_uses(cand.graph, old, i)
                        out.append(cand)
                        break
            for ai, a in enumerate(n.attribute):
                if a.type == onnx.AttributeProto.GRAPH:
                    visit(a.g, [*path, (ni, ai)])

    visit(model.graph, [])
    return out


def with_dce(model):
    cand = copy.deepcopy(model)
    dce(cand.graph, keep_inputs=False)
    return cand


class _StillFails:
    """Whether a subject still fails with signature ``sig``; at most ``budget`` checks, after
    which every subject counts as not failing."""

    def __init__(self, sig: str, budget: int, workdir: str) -> None:
        self.sig = sig
        self.budget = budget
        self.tries = 0
        self.workdir = workdir

    def __call__(self, subject) -> bool:
        if self.tries >= self.budget:
            return False
        self.tries += 1
        try:
            res = fuzzcheck.check_case(subject, self.workdir, inspect=False)
        except Exception:
            return False
        return res.failed and fuzzcheck.signature(res) == self.sig


def _replace_nodes(subject, fails):
    """Try ``replace_node`` on each node, last first, keeping each replacement that still
    fails: the smaller subject, and whether anything was replaced."""
    progress = False
    values = intermediates(subject)
    if values:
        const = constant_names(subject.model.graph)
        for i in reversed(range(len(subject.model.graph.node))):
            if i >= len(subject.model.graph.node):
                continue
            cand = replace_node(subject, i, values, const)
            if cand is not None and fails(cand):
                subject, progress = cand, True
                values = intermediates(subject) or values
                const = constant_names(subject.model.graph)
    return subject, progress


def shrink_subject(subject, sig: str, prefer_output: str | None = None, budget: int = 400,
                   log=None):
    """The smallest subject found that still fails with signature ``sig`` (its checks run in
    a temporary directory removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="onnxfold-shrink-") as workdir:
        return _shrink(subject, prefer_output, budget, log, _StillFails(sig, budget, workdir))


def _shrink(subject, prefer_output: str | None, budget: int, log, fails: _StillFails):

    def attempt(model, feeds=None):
        cand = subject.with_model(model, feeds)
        return cand if fails(cand) else None

    def first_attempt(candidates):
        """The first candidate that still fails, or None."""
        for cand in candidates:
            got = attempt(cand)
            if got:
                return got
        return None

    def size(model):
        return len(model.SerializeToString())

    progress = True
    while progress and fails.tries < budget:
        progress = False
        dced = with_dce(subject.model)
        if size(dced) < size(subject.model) and (got := attempt(dced)):
            subject, progress = got, True
        for make in (lambda m: single_outputs(m, prefer_output), drop_cf_outputs):
            got = first_attempt(make(subject.model))
            if got:
                subject, progress = got, True
        for make in (bypasses, dead_node_removals):
            if not progress:
                got = first_attempt(make(subject.model))
                if got:
                    subject, progress = got, True
        subject, replaced = _replace_nodes(subject, fails)
        progress = progress or replaced
        if log:
            log(f"  {sum(subject.ops.values())} nodes after {fails.tries} tries")
    return subject


def shrink(seed: int, config=None, budget: int = 400, log=None):
    """(result of the original, minimal Subject, result of the minimal one)."""
    case = graphgen.generate(seed, config)
    res = fuzzcheck.check_seed(seed, config, inspect=False)
    if not res.failed:
        return res, None, None
    m = re.search(r"output (\S+) \(", res.detail)
    sig = fuzzcheck.signature(res)
    small = shrink_subject(from_case(case), sig, m.group(1) if m else None, budget, log)
    with tempfile.TemporaryDirectory(prefix="onnxfold-shrink-") as workdir:
        final = fuzzcheck.check_case(small, workdir, inspect=False)
    return res, small, final


def describe(subject) -> str:
    """The model as ONNX text (initializers shortened)."""
    text = onnx.printer.to_text(subject.model.graph)
    return "\n".join(line if len(line) < 200 else line[:200] + " ..."
                     for line in text.splitlines())


if __name__ == "__main__":
    import sys

    for arg in sys.argv[1:]:
        res, small, final = shrink(int(arg), log=print)
        print(res.line())
        if small is not None:
            print(f"minimal ({sum(small.ops.values())} nodes, dims {small.assignments}):")
            print(describe(small))
            print("  ->", final.line())
