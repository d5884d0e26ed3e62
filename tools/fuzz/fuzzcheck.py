"""The differential check: fold a generated model with onnxfold, compare both in onnxruntime.

``check_seed(seed)`` generates the model of ``seed`` (``graphgen``), makes sure it is valid
(``onnx.checker`` full check, onnxruntime loads and runs it at both assignments of its symbolic
dims and gives the shapes the generator expects) and then classifies it:

- ``ok``: the folded model computes the same outputs (ints/bools bit for bit, floats within
  rtol 1e-4 / atol 1e-5, float16 within one float16 ulp-scale tolerance, NaN == NaN);
- ``crash``: ``onnxfold.optimize(..., FoldOptions(strict=True))`` or ``save_model`` raised;
- ``invalid-output``: onnxruntime refuses to load (or run) the folded model;
- ``mismatch``: an output differs (shape, dtype or values);
- ``discard``: the generated model is not valid (not a failure of onnxfold; counted).

Every run also records how many nodes of the folded model onnxfold would still fold
(``foldable_left``, informational).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import time
import traceback
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort

from tools.fuzz import graphgen

CLASSES = ("ok", "crash", "invalid-output", "mismatch", "discard")
FAILURES = ("crash", "invalid-output", "mismatch")
RTOL, ATOL = 1e-4, 1e-5
# float16 results carry 11 significant bits: a one-ulp difference is ~5e-4..1e-3 relative
RTOL16, ATOL16 = 2e-3, 1e-3


@dataclass
class Result:
    seed: int
    status: str
    kind: str = ""            # discard reason, exception type, what mismatched
    detail: str = ""
    foldable_left: dict = field(default_factory=dict)
    nodes: tuple = (0, 0)     # nodes before / after (main graph)
    seconds: float = 0.0
    ops: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status in FAILURES

    def line(self) -> str:
        return f"seed {self.seed}: {self.status} [{self.kind}] {self.detail}".rstrip()


def session(model):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def first_line(e: BaseException, limit: int = 300) -> str:
    """The informative part of an exception's message (onnxruntime's prefixes removed)."""
    text = str(e).strip()
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = re.sub(r"^Load model from \S+ failed:", "", text)
    text = re.sub(r"/onnxruntime_src/\S+:\d+ [^(]*\([^)]*\)( const)? ", "", text)
    lines = text.strip().splitlines()
    return (lines[0] if lines else "")[:limit]


def signature(res) -> str:
    """What makes two failures the same bug: class and message with names and numbers masked.

    Mismatches are grouped by the op types of their minimal repro (``shrink``), not here.
    """
    if res.status == "mismatch":
        dtype = re.search(r"\((\w+)\) at dims", res.detail)
        worst = re.search(r"max abs ([-+.\w]+)", res.detail)
        size = ""
        if worst:  # float16 outputs of onnxruntime's own kernels vary by a few ulp
            size = " small (max abs <= 0.01)" if float(worst.group(1)) <= 0.01 else " large"
        return f"mismatch:{res.kind}:{dtype.group(1) if dtype else ''}{size}"
    text = re.sub(r"'%\"?[\w.]+\"?<[^>]*>(\{[^}]*\})?'", "VALUE", res.detail)
    text = re.sub(r"In Node, \(.*?\) : \(.*?\) -> \(.*?\) , ", "", text)
    text = re.sub(r"\b(v|w|in|iter|cond|c|s|x|t|body|[A-Z][A-Za-z]+_)\d+\b", "#", text)
    text = re.sub(r"\d+", "N", text)
    text = re.sub(r"\([^()]*\)$", "", text).strip()
    return f"{res.status}:{res.kind}:{text[:160]}"


def diff(a: np.ndarray, b: np.ndarray, loose: bool = False) -> str | None:
    """None if ``b`` matches ``a``, else what differs."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} vs {b.dtype}"
    if a.shape != b.shape:
        return f"shape {a.shape} vs {b.shape}"
    if a.dtype.kind != "f":
        bad = a != b
        if not bad.any():
            return None
        i = np.argwhere(bad)[0]
        return (f"{int(bad.sum())}/{a.size} elements differ, e.g. at {tuple(int(k) for k in i)}"
                f": {a[tuple(i)]!r} vs {b[tuple(i)]!r}")
    rtol, atol = (RTOL16, ATOL16) if a.dtype == np.float16 else (RTOL, ATOL)
    if loose:
        rtol, atol = rtol * 30, atol * 100
    x, y = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return None
    both = np.isfinite(x) & np.isfinite(y)
    ad = np.abs(x[both & ~close] - y[both & ~close])
    i = tuple(int(k) for k in np.argwhere(~close)[0])
    rel = (ad / np.maximum(np.abs(x[both & ~close]), 1e-30)).max() if ad.size else float("nan")
    worst = ad.max() if ad.size else "nan"
    return (f"{int((~close).sum())}/{a.size} elements differ, max abs {worst} (rel {rel:.3g}), "
            f"e.g. at {i}: {a[i]!r} vs {b[i]!r}")


def ort_hazards(model) -> list[str]:
    """Constructs of ``model`` that onnxruntime (1.32, CPU) computes wrongly or refuses.

    Found by this fuzzer with hand-written checks against the ONNX reference; a folded model
    must not contain any that the original did not have:

    - ``scan-body-returns-input``: a Scan body output that is one of the body's inputs (a
      state or a scan-input slice) as is: the result is garbage;
    - ``scan-body-returns-twice`` / ``if-branch-returns-twice``: one value in two outputs of a
      Scan body or an If branch: garbage (zeros, uninitialized memory) in one of them;
    - ``loop-returns-iteration-number``: a Loop body's scan output that is the iteration
      number input as is: every element is the trip count;
    - ``subgraph-returns-outer-value``: a body output that is an outer-scope value: refused.
    """
    found = []

    def visit(graph):
        for n in graph.node:
            for g in (a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH):
                outs = [o.name for o in g.output]
                ins = [i.name for i in g.input]
                g_local = set(ins) | {t.name for t in g.initializer} | {
                    o for m in g.node for o in m.output}
                if any(o not in g_local for o in outs):
                    found.append("subgraph-returns-outer-value")
                twice = len(set(outs)) != len(outs)
                if n.op_type == "Scan":
                    if any(o in ins for o in outs):
                        found.append("scan-body-returns-input")
                    if twice:
                        found.append("scan-body-returns-twice")
                elif n.op_type == "If" and twice:
                    found.append("if-branch-returns-twice")
                elif n.op_type == "Loop" and ins and ins[0] in outs[1:]:
                    found.append("loop-returns-iteration-number")
                visit(g)

    visit(model.graph)
    return sorted(set(found))


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout("case took too long")


def foldable_left(path: str) -> dict:
    """Op histogram of what onnxfold would still fold in ``path`` (informational)."""
    try:
        from onnxfold.analysis.shapes import infer_shapes
        from onnxfold.app.inspection import foldable_ops
        from onnxfold.declare.catalogue import load_catalogue
        from onnxfold.io import load_model

        model = load_model(path)
        infer_shapes(model)
        return dict(foldable_ops(model, load_catalogue()))
    except Exception as e:  # informational only
        return {f"<inspect failed: {type(e).__name__}>": 1}


def validate(case) -> tuple[str, str, list] | tuple[None, None, list]:
    """(discard reason, detail, []) or (None, None, reference outputs per assignment)."""
    model = case.model
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:
        return "checker", first_line(e), []
    try:
        sess = session(model.SerializeToString())
    except Exception as e:
        return "ort-load", first_line(e), []
    names = [o.name for o in sess.get_outputs()]
    refs = []
    for a in (0, 1):
        try:
            outs = sess.run(None, case.feeds(a))
        except Exception as e:
            return "ort-run", first_line(e), []
        for name, out in zip(names, outs):
            if not isinstance(out, np.ndarray):
                return "ort-run", f"{name}: onnxruntime returned {type(out).__name__}", []
            if case.expected is None:
                continue
            dtype, shapes = case.expected[name]
            if out.shape != tuple(shapes[a]) or out.dtype != graphgen.NP[dtype]:
                return "tracker", (f"{name}: onnxruntime gives {out.dtype}{list(out.shape)}, "
                                   f"generator expected {dtype}{list(shapes[a])}"), []
        refs.append(dict(zip(names, outs)))
    return None, None, refs


def reference_outputs(case, which: int) -> dict | str:
    """The ONNX reference evaluator's outputs of the original (or why it could not run)."""
    from onnx.reference import ReferenceEvaluator

    try:
        outs = ReferenceEvaluator(case.model).run(None, case.feeds(which))
    except Exception as e:
        return f"reference evaluator failed: {type(e).__name__}: {first_line(e, 120)}"
    return {o.name: np.asarray(v) for o, v in zip(case.model.graph.output, outs)}


def same_by_the_spec(case, which: int, name: str, folded_model) -> bool:
    """Whether the ONNX reference gives ``name`` the same value (float16 tolerance) in the
    folded model as in the original: then the fold changed nothing the spec defines."""
    from onnx.reference import ReferenceEvaluator

    ref = reference_outputs(case, which)
    try:
        outs = ReferenceEvaluator(folded_model).run([name], case.feeds(which))
    except Exception:
        return False
    return not isinstance(ref, str) and name in ref and diff(ref[name], np.asarray(outs[0])) is None


def _computes_in_float16(graph) -> bool:
    """Whether any value of ``graph`` or its subgraphs (inputs, initializers, declared values)
    is float16, or any Cast or Constant there makes one."""
    f16 = onnx.TensorProto.FLOAT16
    typed = list(graph.input) + list(graph.output) + list(graph.value_info)
    if any(v.type.tensor_type.elem_type == f16 for v in typed) or \
            any(t.data_type == f16 for t in graph.initializer):
        return True
    for n in graph.node:
        if n.op_type == "Cast" and any(a.name == "to" and a.i == f16 for a in n.attribute):
            return True
        if n.op_type == "Constant" and any(a.t.data_type == f16 for a in n.attribute):
            return True
        subs = [a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH]
        if any(_computes_in_float16(g) for g in subs + [g for a in n.attribute for g in a.graphs]):
            return True
    return False


def _new_half_constants(original, folded) -> bool:
    """Whether the folded model holds a float16/bfloat16 constant the original has not: a value
    a rule computed (a rule's rounding is never excused as onnxruntime's layout; a review: a
    Sum of three float16 constants rounded pairwise passed as rounding)."""
    half = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)

    def constants(model) -> set[bytes]:
        found = {t.SerializeToString(deterministic=True) for t in model.graph.initializer
                 if t.data_type in half}
        for node in model.graph.node:
            if node.op_type == "Constant":
                found |= {a.t.SerializeToString(deterministic=True) for a in node.attribute
                          if a.t.data_type in half}
        return found

    def stripped(blobs: set[bytes]) -> set[bytes]:  # the data, whatever the name
        out = set()
        for blob in blobs:
            t = onnx.TensorProto.FromString(blob)
            t.name = ""
            out.add(t.SerializeToString(deterministic=True))
        return out

    return bool(stripped(constants(folded)) - stripped(constants(original)))


def _depends_on_float16(model, name: str) -> bool:
    """Whether output ``name`` of ``model`` is computed from float16 values: a float16 value,
    Cast or subgraph among the nodes it depends on (types from onnx's shape inference)."""
    try:
        typed = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    except Exception:
        typed = model.graph
    f16 = onnx.TensorProto.FLOAT16
    half = {v.name for v in list(typed.input) + list(typed.value_info) + list(typed.output)
            if v.type.tensor_type.elem_type == f16}
    half |= {t.name for t in typed.initializer if t.data_type == f16}
    producer = {o: n for n in typed.node for o in n.output}
    seen, todo = set(), [name]
    while todo:
        value = todo.pop()
        if value in seen or not value:
            continue
        seen.add(value)
        if value in half:
            return True
        node = producer.get(value)
        if node is None:
            continue
        if node.op_type in ("Cast", "Constant") or any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                for a in node.attribute):
            one = onnx.GraphProto(node=[node])
            if _computes_in_float16(one):
                return True
        todo.extend(node.input)
    return False


def _optimized_original(case, which: int, name: str):
    """Output ``name`` of the original as onnxruntime computes it with its basic graph
    optimizations on (its own constant folding), or None if it cannot run."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.log_severity_level = 4
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    try:
        sess = ort.InferenceSession(case.model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        return sess.run([name], case.feeds(which))[0]
    except Exception:
        return None


def tie_break(case, which: int, name: str, original, folded, folded_model=None) \
        -> tuple[str, str]:
    """On a mismatch, ask onnxruntime's optimizer, then the ONNX reference, which side is right.

    ("ort-optimization-level", why) when onnxruntime with its basic optimizations computes the
    original bit for bit as the folded model (which the comparison runs with every
    optimization off): what a user of onnxruntime's defaults gets is unchanged; the difference
    is onnxruntime's own, between its levels (seed 77782: with optimizations off it merges a
    Cast to float16 with the one it inserts before a MatMul, and the overflow to inf goes;
    its constant folding, like onnxfold's, folds the Cast first).

    ("ort-wrong-original", why) when the original has a construct onnxruntime is known to
    miscompute (``ort_hazards``) and the reference agrees with the folded model, not with
    onnxruntime's run of the original: that proves nothing about the fold (the case is
    discarded and counted). ("ort-float16-rounding", why) when the model computes in float16,
    the folded model holds no float16 constant a rule computed, the ONNX reference computes
    the same value for both models and, for a float output, the
    two differ by float16 rounding only (within 30x the float16 tolerance): onnxruntime runs float16
    ops without float16 kernels in float32 and drops the roundings between them (its cast
    elimination), so where it rounds depends on the graph's layout (an If inlined, a Gemm
    folded, an identity Transpose gone), not on what the models compute. An integer or bool
    output of float16 values moves with those roundings too: an ArgMin's tie, or ``x >= x``
    false where onnxruntime compares a rounded copy of ``x`` with an unrounded one. Otherwise
    ("mismatch", note): onnxruntime's result is the promise, even where the reference sides
    with onnxfold (e.g. int64 reductions, computed in double by onnxruntime).
    """
    optimized = _optimized_original(case, which, name)
    if optimized is not None and np.asarray(optimized).dtype == folded.dtype and \
            np.array_equal(optimized, folded, equal_nan=folded.dtype.kind in "fc"):
        return "ort-optimization-level", ("onnxruntime's own optimizer (basic) computes the "
                                          "original exactly as the folded model does")
    ref = reference_outputs(case, which)
    if isinstance(ref, str):
        return "mismatch", ref
    r = ref.get(name)
    if r is None:
        return "mismatch", "reference: no such output"
    r = r.astype(original.dtype) if r.shape == original.shape else r
    vs_orig, vs_fold = diff(r, original, loose=True), diff(r, folded, loose=True)
    if vs_orig and not vs_fold and ort_hazards(case.model):
        return "ort-wrong-original", f"reference agrees with the folded model; vs original: " \
                                     f"{vs_orig}"
    # a float output (float16, or float32 of float16 values) differs by rounding only; an int
    # or bool one of float16 values moves with the roundings (a tie, a comparison)
    rounded_only = original.dtype.kind != "f" or not diff(
        original.astype(np.float16), folded.astype(np.float16), loose=True)
    if folded_model is not None and rounded_only and _depends_on_float16(case.model, name) and \
            not _new_half_constants(case.model, folded_model) and (
            same_by_the_spec(case, which, name, folded_model)):
        return "ort-float16-rounding", ("the ONNX reference computes the same for both models; "
                                        "onnxruntime's float16 kernels round differently")
    if not vs_orig:
        return "mismatch", "reference agrees with the original"
    if not vs_fold:
        return "mismatch", "reference agrees with the folded model"
    return "mismatch", "reference differs from both"


def fold(src: str, dst: str):
    import onnxfold

    result = onnxfold.optimize(src, onnxfold.FoldOptions(strict=True))
    onnxfold.save_model(result.model, dst)
    return result


def compare_folded(case, refs, folded: str, res: Result) -> Result:
    try:
        sess = session(folded)
    except Exception as e:
        res.status, res.kind, res.detail = "invalid-output", "load", first_line(e)
        return res
    try:  # the original passes the full check: so must the folded model (onnxfold's own
        # loader runs the checker, so it would refuse its own output)
        onnx.checker.check_model(folded, full_check=True)
    except Exception as e:
        res.status, res.kind, res.detail = "invalid-output", "onnx-checker", first_line(e)
        return res
    names = [o.name for o in sess.get_outputs()]
    if sorted(names) != sorted(refs[0]):
        res.status, res.kind = "mismatch", "outputs"
        res.detail = f"outputs {sorted(refs[0])} became {sorted(names)}"
        return res
    for a in (0, 1):
        try:
            outs = dict(zip(names, sess.run(None, case.feeds(a))))
        except Exception as e:
            res.status, res.kind, res.detail = "invalid-output", "run", first_line(e)
            hazards = ort_hazards(onnx.load(folded))
            if hazards:
                res.kind += ": folded model has " + ",".join(hazards)
            return res
        for name, ref in refs[a].items():
            d = diff(ref, outs[name])
            if d is not None:
                verdict, note = tie_break(case, a, name, ref, outs[name], onnx.load(folded))
                dims = case.assignments[a]
                res.detail = f"output {name} ({ref.dtype}) at dims {dims}: {d}; {note}"
                if verdict == "mismatch":
                    hazards = ort_hazards(onnx.load(folded))
                    res.status, res.kind = "mismatch", "values"
                    if hazards:
                        res.kind += ": folded model has " + ",".join(hazards)
                else:
                    res.status, res.kind = "discard", verdict
                return res
    res.status = "ok"
    return res


def check_case(case, workdir: str, inspect: bool = True, phase=None) -> Result:
    """Validate, fold and compare ``case``; ``phase(name)`` is told what runs next
    ("validate", "fold", "compare") so a supervisor can classify a fatal signal."""
    phase = phase or (lambda name: None)
    started = time.perf_counter()
    res = Result(case.seed, "discard", ops=case.ops)
    phase("validate")
    reason, detail, refs = validate(case)
    if reason is not None:
        res.kind, res.detail = reason, detail
        res.seconds = time.perf_counter() - started
        return res
    src = os.path.join(workdir, "model.onnx")
    dst = os.path.join(workdir, "folded.onnx")
    for p in (src, dst):
        if os.path.exists(p):
            os.remove(p)
    onnx.save(case.model, src)
    phase("fold")
    try:
        result = fold(src, dst)
    except Timeout:
        raise
    except Exception as e:
        res.status, res.kind = "crash", type(e).__name__
        tb = traceback.extract_tb(e.__traceback__)
        where = next((f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in
                      reversed(tb) if "onnxfold" in f.filename or "/rules/" in f.filename), "")
        res.detail = f"{first_line(e)} ({where})" if where else first_line(e)
        res.seconds = time.perf_counter() - started
        return res
    res.nodes = (result.report.nodes_before, result.report.nodes_after)
    phase("compare")
    compare_folded(case, refs, dst, res)
    if inspect and res.status == "ok":
        res.foldable_left = {k: v for k, v in foldable_left(dst).items() if v}
    res.seconds = time.perf_counter() - started
    return res


def check_seed(seed: int, config=None, workdir: str | None = None, timeout: float | None = None,
               inspect: bool = True, phase=None) -> Result:
    """Generate, validate, fold and compare the model of ``seed``."""
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="onnxfold-fuzz-")
    old = None
    if timeout:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        try:
            case = graphgen.generate(seed, config)
        except Exception as e:  # a generator bug: counted as a discard, never hidden
            return Result(seed, "discard", f"generator {type(e).__name__}", first_line(e))
        return check_case(case, workdir, inspect=inspect, phase=phase)
    except Timeout as e:
        return Result(seed, "crash", "Timeout", str(e))
    finally:
        if timeout:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        if own:
            shutil.rmtree(workdir, ignore_errors=True)


def save_failure(seed: int, res: Result, directory: str, config=None) -> str:
    """Write SEED.onnx (the original model), SEED.npz (feeds, both assignments), SEED.txt."""
    os.makedirs(directory, exist_ok=True)
    case = graphgen.generate(seed, config)
    base = os.path.join(directory, str(seed))
    onnx.save(case.model, base + ".onnx")
    arrays = {}
    for a in (0, 1):
        for k, v in case.feeds(a).items():
            arrays[f"{a}/{k}"] = v
    np.savez(base + ".npz", **arrays)
    with open(base + ".txt", "w") as f:
        f.write(res.line() + "\n")
        f.write(f"assignments: {case.assignments}\n")
        f.write(f"ops: {case.ops}\n")
    return base + ".onnx"
