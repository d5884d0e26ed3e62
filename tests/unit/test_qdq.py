"""QDQ models (issue 14, item 7): QuantizeLinear of constant weights folds by default, every
DequantizeLinear of a weight stays, shared weights are never duplicated, and the output file
never grows by inferred value_info. Each folded model runs in onnxruntime against the original.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.pipeline.options import FoldOptions
from tests.support.models import make_model, tensor, vinfo, without_run_record
from tests.support.running import fold_proto

T = TensorProto


def ops(proto):
    return [n.op_type for n in proto.graph.node]


def run(proto, feeds, optimize=False):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if not optimize:  # onnxruntime's own QDQ fusions change the original's numbers
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(proto.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def assert_same(proto, folded, feeds):
    for a, b in zip(run(proto, feeds), run(folded, feeds)):
        assert a.dtype == b.dtype and a.shape == b.shape
        if a.dtype == np.float16:  # a constant MatMul weight is prepacked: another summation
            np.testing.assert_allclose(a, b, rtol=1e-2, atol=2e-3)
        else:
            np.testing.assert_array_equal(a, b)


def file_size(proto, tmp_path, name):
    """The bytes of ``proto`` saved, the run's record (``onnxfold.run``) left out."""
    path = str(tmp_path / name)
    onnx.save(without_run_record(proto), path)
    return os.path.getsize(path)


def _zero_point(qtype, shape):
    if isinstance(qtype, int):  # int4 / float8: onnx element types numpy cannot name
        return helper.make_tensor("zp", qtype, list(shape), [0] * int(np.prod(shape)))
    return numpy_helper.from_array(np.zeros(shape, qtype), "zp")


def _q_weight_model(k=64, n=32, xtype=np.float32, qtype=np.int8, axis=None, block=None,
                    opset=21, shared=False, seed=0):
    """x -> MatMul(x, DequantizeLinear(QuantizeLinear(W))): a float weight quantized in the
    graph (QAT exports, onnxruntime's AddQDQPairToWeight); ``shared``: W also feeds a MatMul."""
    rs = np.random.default_rng(seed)
    w = (rs.standard_normal((k, n)) * 0.1).astype(xtype)
    attrs = {}
    if block:
        sshape, attrs = (k // block, n), {"axis": 0, "block_size": block}
    elif axis is not None:
        sshape, attrs = (w.shape[axis],), {"axis": axis}
    else:
        sshape = ()
    scale = (np.abs(rs.standard_normal(sshape)) * 0.002 + 0.001).astype(xtype)
    elem = T.FLOAT if xtype == np.float32 else T.FLOAT16
    nodes = [helper.make_node("QuantizeLinear", ["w", "s", "zp"], ["wq"], name="q_w", **attrs),
             helper.make_node("DequantizeLinear", ["wq", "s", "zp"], ["wd"], name="dq_w",
                              **attrs),
             helper.make_node("MatMul", ["x", "wd"], ["y"])]
    outputs = [vinfo("y", elem, [2, n])]
    if shared:
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["y2"]))
        outputs.append(vinfo("y2", elem, [2, n]))
    proto = make_model(nodes, [vinfo("x", elem, [2, k])], outputs,
                       [tensor("w", w), tensor("s", scale), _zero_point(qtype, sshape)],
                       opset=opset, ir_version=10 if opset >= 21 else 8)
    feeds = {"x": rs.standard_normal((2, k)).astype(xtype)}
    return proto, feeds


def _ort_quantized(proto):
    """onnxruntime's own QuantizeLinear of the weight (the model cut after q_w), cast to
    float32 (exact for every quantized type; onnxruntime hands no int4/float8 to numpy)."""
    cut = onnx.ModelProto()
    cut.CopyFrom(proto)
    del cut.graph.node[1:]
    cut.graph.node.append(helper.make_node("Cast", ["wq"], ["wqf"], to=T.FLOAT))
    del cut.graph.input[:]
    del cut.graph.output[:]
    cut.graph.output.append(helper.make_empty_tensor_value_info("wqf"))
    return run(cut, {})[0]


CASES = {
    "int8": {},
    "uint8_opset10": {"qtype": np.uint8, "opset": 10},
    "int8_opset13_per_axis": {"axis": 1, "opset": 13},
    "int8_per_axis_0": {"axis": 0},
    "uint16": {"qtype": np.uint16},
    "int16_per_axis": {"qtype": np.int16, "axis": 1},
    "fp16": {"xtype": np.float16},
    "fp16_per_axis_int8": {"xtype": np.float16, "axis": 1},
    "int4": {"qtype": T.INT4},
    "uint4_per_axis": {"qtype": T.UINT4, "axis": 1},
    "float8e4m3fn": {"qtype": T.FLOAT8E4M3FN},
    "float8e5m2": {"qtype": T.FLOAT8E5M2},
    "blocked_int8": {"block": 16},
    "blocked_int4": {"qtype": T.INT4, "block": 32},
    "large_int8": {"k": 1024, "n": 512},  # 2 MiB of float32: above --growth-min
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_quantize_of_constant_weight_folds_and_dequantize_stays(tmp_path, case):
    proto, feeds = _q_weight_model(**CASES[case])
    folded, report, _ = fold_proto(proto, tmp_path)
    assert ops(folded) == ["DequantizeLinear", "MatMul"], report.declined_nodes
    assert report.declined == {"qdq policy": 1}
    (dq,) = [n for n in folded.graph.node if n.op_type == "DequantizeLinear"]
    weight = next(t for t in folded.graph.initializer if t.name == dq.input[0])
    want = _ort_quantized(proto)
    assert weight.data_type == next(t for t in proto.graph.initializer
                                    if t.name == "zp").data_type
    got = numpy_helper.to_array(weight).astype(np.float32)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # nan == nan
    assert file_size(folded, tmp_path, "f.onnx") < file_size(proto, tmp_path, "p.onnx")
    assert_same(proto, folded, feeds)


def test_quantize_of_shared_weight_is_not_duplicated(tmp_path):
    # 8 KiB of float32 read by QuantizeLinear and by a float MatMul: folding the quantization
    # would add a 2 KiB int8 copy while the float weight stays
    proto, feeds = _q_weight_model(shared=True)
    folded, report, _ = fold_proto(proto, tmp_path)
    assert "QuantizeLinear" in ops(folded)
    assert report.declined == {"qdq policy": 1, "growth": 1}
    assert file_size(folded, tmp_path, "f.onnx") <= file_size(proto, tmp_path, "p.onnx")
    assert_same(proto, folded, feeds)
    folded, report, _ = fold_proto(proto, tmp_path, FoldOptions(growth_factor=None,
                                                                strict=True))
    assert "QuantizeLinear" not in ops(folded)
    assert_same(proto, folded, feeds)


# -- DequantizeLinear -> Transpose -> QuantizeLinear (onnxruntime's quantizer) -------------------

def _requantized_model(tied=False, k=48, n=40, seed=1):
    """wq (int8) -> DequantizeLinear -> Transpose -> QuantizeLinear -> DequantizeLinear -> MatMul,
    as quantize_static writes a weight transposed in the graph; ``tied``: the first
    dequantization also feeds a Gather (a tied embedding)."""
    rs = np.random.default_rng(seed)
    wq = rs.integers(-128, 127, (n, k), endpoint=True).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["wq", "s", "zp"], ["w"], name="dq_w"),
             helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0], name="t"),
             helper.make_node("QuantizeLinear", ["wt", "s", "zp"], ["wtq"], name="q_wt"),
             helper.make_node("DequantizeLinear", ["wtq", "s", "zp"], ["wtd"], name="dq_wt"),
             helper.make_node("MatMul", ["x", "wtd"], ["y"])]
    inputs, outputs = [vinfo("x", shape=[2, k])], [vinfo("y", shape=[2, n])]
    if tied:
        nodes.append(helper.make_node("Gather", ["w", "ids"], ["e"]))
        inputs.append(vinfo("ids", T.INT64, [3]))
        outputs.append(vinfo("e", shape=[3, k]))
    proto = make_model(nodes, inputs, outputs,
                       [tensor("wq", wq), tensor("s", np.float32(0.0123)),
                        tensor("zp", np.int8(-3))], opset=13)
    feeds = {"x": rs.standard_normal((2, k)).astype(np.float32)}
    if tied:
        feeds["ids"] = np.array([0, 7, n - 1], np.int64)
    return proto, feeds, wq


def test_requantized_transpose_folds_into_a_quantized_weight(tmp_path):
    proto, feeds, wq = _requantized_model()
    folded, report, _ = fold_proto(proto, tmp_path)
    assert ops(folded) == ["DequantizeLinear", "MatMul"], report.declined_nodes
    (dq,) = folded.graph.node[:1]
    weight = numpy_helper.to_array(next(t for t in folded.graph.initializer
                                        if t.name == dq.input[0]))
    np.testing.assert_array_equal(weight, wq.T)  # the same scale and zero point: exact
    assert not any(t.data_type == T.FLOAT and len(t.dims) == 2 for t in folded.graph.initializer)
    assert file_size(folded, tmp_path, "f.onnx") < file_size(proto, tmp_path, "p.onnx")
    assert_same(proto, folded, feeds)


def test_requantized_tied_weight_stays(tmp_path):
    proto, feeds, _ = _requantized_model(tied=True)
    folded, _report, _ = fold_proto(proto, tmp_path)
    assert ops(folded) == ops(proto)  # the float dequantized weight is read by the Gather
    assert init_floats(folded) == 0
    assert_same(proto, folded, feeds)


def test_requantization_refused_for_growth_keeps_the_dequantization(tmp_path):
    # the dequantized weight also feeds a second, differently scaled QuantizeLinear read by
    # a graph output: wq stays in use, so the folded transposes would duplicate it
    proto, feeds, _ = _requantized_model()
    proto.graph.node.append(helper.make_node("QuantizeLinear", ["w", "s2", "zp"], ["w2q"]))
    proto.graph.initializer.append(tensor("s2", np.float32(0.02)))
    proto.graph.output.append(vinfo("w2q", T.INT8, [40, 48]))
    folded, _report, _ = fold_proto(proto, tmp_path)
    assert init_floats(folded) == 0
    assert file_size(folded, tmp_path, "f.onnx") <= file_size(proto, tmp_path, "p.onnx")
    assert_same(proto, folded, feeds)


def init_floats(proto):
    """Float initializers larger than a scalar (a dequantized weight that reached the model)."""
    return sum(1 for t in proto.graph.initializer
               if t.data_type in (T.FLOAT, T.FLOAT16) and np.prod(t.dims) > 1)


# -- tied weights under --growth-min -------------------------------------------------------------

def _tied_embedding(vocab=256, dim=128, seed=0):
    """A 128 KiB tied embedding: Gather for the input, Transpose -> MatMul for the logits."""
    wte = np.random.default_rng(seed).standard_normal((vocab, dim)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["wte", "ids"], ["h"]),
             helper.make_node("Transpose", ["wte"], ["wteT"], perm=[1, 0], name="tied_T"),
             helper.make_node("MatMul", ["h", "wteT"], ["logits"])]
    proto = make_model(nodes, [vinfo("ids", T.INT64, [3])], [vinfo("logits", shape=[3, vocab])],
                       [tensor("wte", wte)])
    return proto, {"ids": np.array([0, 5, vocab - 1], np.int64)}


def test_small_tied_weight_is_not_duplicated(tmp_path):
    proto, feeds = _tied_embedding()
    folded, report, _ = fold_proto(proto, tmp_path)
    assert "Transpose" in ops(folded) and report.declined == {"growth": 1}
    assert "its source stays in use" in report.declined_nodes[0]["reason"]
    assert file_size(folded, tmp_path, "f.onnx") <= file_size(proto, tmp_path, "p.onnx")
    assert_same(proto, folded, feeds)
    folded, report, _ = fold_proto(proto, tmp_path, FoldOptions(growth_factor=None,
                                                                strict=True))
    assert "Transpose" not in ops(folded) and report.declined == {}
    assert_same(proto, folded, feeds)


def test_small_results_of_shared_constants_still_fold(tmp_path):
    # a scalar computed from a shared weight and a shape from a shared shape constant are not
    # copies of a weight: they fold
    w = np.random.default_rng(3).standard_normal((16, 16)).astype(np.float32)
    nodes = [helper.make_node("ReduceMax", ["w"], ["m"], keepdims=0),
             helper.make_node("Mul", ["x", "m"], ["xm"]),
             helper.make_node("MatMul", ["xm", "w"], ["y0"]),
             helper.make_node("Concat", ["minus1", "shape"], ["target"], axis=0),
             helper.make_node("Reshape", ["y0", "target"], ["y"]),
             helper.make_node("Reshape", ["y0", "shape2"], ["z"])]
    proto = make_model(nodes, [vinfo("x", shape=[4, 16])],
                       [vinfo("y", shape=[4, 16]), vinfo("z", shape=[64])],
                       [tensor("w", w), tensor("minus1", np.array([-1], np.int64)),
                        tensor("shape", np.array([16], np.int64)),
                        tensor("shape2", np.array([64], np.int64))])
    proto.graph.node.append(helper.make_node("Concat", ["shape", "shape"], ["ss"], axis=0))
    proto.graph.output.append(vinfo("ss", T.INT64, [2]))
    folded, report, _ = fold_proto(proto, tmp_path)
    assert "ReduceMax" not in ops(folded) and "Concat" not in ops(folded)
    assert report.declined == {}
    feeds = {"x": np.ones((4, 16), np.float32)}
    for a, b in zip(run(proto, feeds), run(folded, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


# -- value_info ----------------------------------------------------------------------------------

def test_output_keeps_only_declared_value_info(tmp_path):
    proto, feeds, _ = _requantized_model(tied=True)  # nothing folds: the file must not grow
    assert not proto.graph.value_info
    folded, _, _ = fold_proto(proto, tmp_path)
    assert not folded.graph.value_info
    assert file_size(folded, tmp_path, "f.onnx") <= file_size(proto, tmp_path, "p.onnx")
    declared = onnx.shape_inference.infer_shapes(proto)
    assert declared.graph.value_info
    folded, _, _ = fold_proto(declared, tmp_path)
    assert {v.name for v in folded.graph.value_info} <= \
        {v.name for v in declared.graph.value_info}
    assert folded.graph.value_info
    assert_same(proto, folded, feeds)


def test_subgraph_value_info_is_not_added(tmp_path):
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                              helper.make_node("Neg", ["r"], ["t"])], "then", [],
                             [vinfo("t", shape=[4])])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["a"]),
                               helper.make_node("Sigmoid", ["a"], ["e"])], "else", [],
                              [vinfo("e", shape=[4])])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    proto = make_model(nodes, [vinfo("c", T.BOOL, []), vinfo("x", shape=[4])],
                       [vinfo("y", shape=[4])])
    folded, _, _ = fold_proto(proto, tmp_path)
    from onnxfold.ir.protos import graph_protos
    assert not any(g.value_info for g in graph_protos(folded.graph))
    feeds = {"c": np.array(False), "x": np.array([-1, 0, 1, 2], np.float32)}
    assert_same(proto, folded, feeds)


# -- a real QDQ model from onnxruntime's quantizer -----------------------------------------------

def test_quantize_static_model(tmp_path):
    quantization = pytest.importorskip("onnxruntime.quantization")
    rs = np.random.default_rng(0)
    d = 64
    nodes = [helper.make_node("Transpose", ["w1"], ["w1t"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "w1t"], ["m1"]),
             helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Mul", ["a1", "c"], ["s1"]),
             helper.make_node("MatMul", ["s1", "w2"], ["y"])]
    consts = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
        rs.standard_normal(d).astype(np.float32)))]
    proto = make_model(consts + nodes, [vinfo("x", shape=[1, 8, d])], [vinfo("y", shape=[1, 8, d])],
                       [tensor("w1", rs.standard_normal((d, d)).astype(np.float32) * 0.1),
                        tensor("b1", rs.standard_normal(d).astype(np.float32)),
                        tensor("w2", rs.standard_normal((d, d)).astype(np.float32) * 0.1)])
    src, out = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(proto, src)

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.items = iter([{"x": rs.standard_normal((1, 8, d)).astype(np.float32)}
                               for _ in range(4)])

        def get_next(self):
            return next(self.items, None)

    cwd = os.getcwd()
    os.chdir(tmp_path)  # the quantizer writes temporary files into the current directory
    try:
        quantization.quantize_static(src, out, Reader(),
                                     quant_format=quantization.QuantFormat.QDQ,
                                     activation_type=quantization.QuantType.QUInt8,
                                     weight_type=quantization.QuantType.QInt8)
    finally:
        os.chdir(cwd)
    qdq = onnx.load(out)
    folded, _report, _ = fold_proto(qdq, tmp_path)
    constant = _constant_quantizations(folded)
    assert _constant_quantizations(qdq) and not constant, constant
    n_dq = sum(op == "DequantizeLinear" for op in ops(folded))
    assert n_dq >= sum(op == "QuantizeLinear" for op in ops(folded)) + 3  # the weights' stay
    assert init_floats(folded) <= init_floats(qdq)
    assert file_size(folded, tmp_path, "f2.onnx") < file_size(qdq, tmp_path, "q2.onnx")
    feeds = {"x": rs.standard_normal((1, 8, d)).astype(np.float32)}
    assert_same(qdq, folded, feeds)


def _constant_quantizations(proto):
    """QuantizeLinear nodes whose input is computed from constants only."""
    produced = {o: n for n in proto.graph.node for o in n.output}
    constant = {t.name for t in proto.graph.initializer}

    def is_constant(name, depth=0):
        if name in constant:
            return True
        node = produced.get(name)
        if node is None or depth > 20:
            return False
        return all(is_constant(i, depth + 1) for i in node.input if i)

    return [n.name for n in proto.graph.node
            if n.op_type == "QuantizeLinear" and is_constant(n.input[0])]


# -- the folder against onnxruntime on edge values -----------------------------------------------

def _edge_values(scale):
    """x.5 ties on both sides of zero, out-of-range, negative zero, tiny and huge values."""
    ties = (np.arange(-300, 301, dtype=np.float32) + np.float32(0.5)) * scale
    extra = np.array([-0.0, 0.0, 1e-30, -1e-30, 3e38, -3e38, 1e6, -1e6, 127.5, -128.5,
                      255.5, 32767.5, -32768.5, 7.5, -8.5, 15.5], np.float64) * scale
    extra = np.clip(extra, -3e38, 3e38)  # finite: the folder leaves inf to onnxruntime
    return np.concatenate([ties, extra.astype(np.float32)])


def _fold_and_ort(x, scale, zp, attrs, opset, qtype_elem):
    """(onnxruntime's QuantizeLinear, the folder's) as float32, through one model each."""
    from onnxfold.declare.catalogue import load_catalogue

    inits = [tensor("x", x), tensor("s", scale)]
    ins = ["x", "s"]
    if zp is not None:
        inits.append(zp)
        ins.append("zp")
    nodes = [helper.make_node("QuantizeLinear", ins, ["q"], **attrs),
             helper.make_node("Cast", ["q"], ["qf"], to=T.FLOAT)]
    proto = make_model(nodes, [], [vinfo("qf", shape=list(x.shape))], inits, opset=opset,
                       ir_version=10)
    want = run(proto, {})[0]
    rule = load_catalogue().folder("", "QuantizeLinear", opset)
    args = [x, scale] + ([numpy_helper.to_array(zp)] if zp is not None else [])
    got = rule.fn(*args, **attrs)
    assert got.dtype == np.dtype(onnx.helper.tensor_dtype_to_np_dtype(qtype_elem)) or \
        qtype_elem in (T.INT4, T.UINT4)
    return want, got.astype(np.float32)


QTYPES = {T.INT8: np.int8, T.UINT8: np.uint8, T.INT16: np.int16, T.UINT16: np.uint16,
          T.INT4: None, T.UINT4: None}


@pytest.mark.parametrize("elem", QTYPES, ids=[T.DataType.Name(e) for e in QTYPES])
@pytest.mark.parametrize("opset", [10, 13, 19, 21, 23])
@pytest.mark.parametrize("scale", [1.0, 0.37, 2.0])
def test_quantize_edge_values_match_onnxruntime(elem, opset, scale):
    if elem in (T.INT16, T.UINT16, T.INT4, T.UINT4) and opset < 21:
        pytest.skip("type not in this opset")
    x = _edge_values(scale)
    for zero in (0, 3):
        zp = helper.make_tensor("zp", elem, [], [zero])
        want, got = _fold_and_ort(x, np.float32(scale), zp, {}, opset, elem)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("elem", [T.INT8, T.UINT8, T.INT4])
def test_quantize_per_axis_and_blocked_edge_values(elem):
    rs = np.random.default_rng(2)
    x = (rs.integers(-400, 400, (6, 10)) + 0.5).astype(np.float32)  # all ties
    x[0, :3] = [-0.0, 1e9, -1e9]
    per_axis = np.array([1.0, 0.5, 2.0, 0.25, 1.5, 3.0], np.float32)
    zp = helper.make_tensor("zp", elem, [6], [0, 1, 2, 3, 4, 5] if elem != T.INT4 else
                            [0, 1, -2, 3, -4, 5])
    want, got = _fold_and_ort(x, per_axis, zp, {"axis": 0}, 21, elem)
    np.testing.assert_array_equal(got, want)
    blocked = np.abs(rs.standard_normal((6, 3))).astype(np.float32) + 0.1  # 10 by 4: 3 blocks
    zpb = helper.make_tensor("zp", elem, [6, 3], [1] * 18)
    want, got = _fold_and_ort(x, blocked, zpb, {"axis": 1, "block_size": 4}, 21, elem)
    np.testing.assert_array_equal(got, want)
    want, got = _fold_and_ort(x, np.abs(rs.standard_normal((3, 10))).astype(np.float32) + 0.1,
                              helper.make_tensor("zp", elem, [3, 10], [0] * 30),
                              {"axis": 0, "block_size": 2}, 21, elem)
    np.testing.assert_array_equal(got, want)


def test_quantize_float16_edge_values_match_onnxruntime():
    x = _edge_values(0.37)
    x = x[np.abs(x) < 60000].astype(np.float16)
    zp = helper.make_tensor("zp", T.INT8, [], [-2])
    from onnxfold.declare.catalogue import load_catalogue

    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"])]
    proto = make_model(nodes, [], [vinfo("q", T.INT8, list(x.shape))],
                       [tensor("x", x), tensor("s", np.float16(0.37)), zp], opset=21,
                       ir_version=10)
    want = run(proto, {})[0]
    got = load_catalogue().folder("", "QuantizeLinear", 21).fn(
        x, np.float16(0.37), numpy_helper.to_array(zp))
    np.testing.assert_array_equal(got, want)
