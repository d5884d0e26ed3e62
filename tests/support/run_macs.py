"""The multiply-accumulates a model's MatMul and Gemm nodes do in one onnxruntime run: the
signature's tests' reference, sharing nothing with its counts."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort


def run_macs(path, feeds) -> int:
    """The MatMul and Gemm multiply-accumulates of one run of ``path`` in onnxruntime over
    ``feeds``, from the shapes their inputs take at run time (each input made an output): a
    count that shares nothing with the signature's inference."""
    model = onnx.load(path)
    products = [n for n in model.graph.node if n.op_type in ("MatMul", "Gemm")]
    known = {o.name for o in model.graph.output}
    for name in dict.fromkeys(i for n in products for i in n.input[:2]):
        if name not in known:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    shapes = dict(zip(names, (np.shape(v) for v in session.run(names, feeds))))
    shapes.update({t.name: tuple(t.dims) for t in model.graph.initializer})
    macs = 0
    for node in products:
        a, b = shapes[node.input[0]], shapes[node.input[1]]
        if node.op_type == "Gemm":
            trans = {x.name: x.i for x in node.attribute}
            m, k = a[::-1] if trans.get("transA") else a
            n = b[0] if trans.get("transB") else b[1]
            macs += m * k * n
        else:
            out = np.matmul(np.empty(a, np.int8), np.empty(b, np.int8)).shape
            macs += int(np.prod(out)) * a[-1]
    return macs
