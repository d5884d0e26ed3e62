"""A 4-bit weight folded through onnxruntime (``--fold-qdq``: its DequantizeLinear has no
native rule for 4-bit types) computes what onnxruntime computes of the original, or stays.
onnxruntime's Python binding takes the shape of the array it is fed and reads its bytes as
packed, two elements a byte: fed one element a byte, ``[1, 2, 3, 4]`` as uint4 was
``[1, 0, 2, 0]``, and the fold wrote ``[0.5, 0, 1, 0]`` for ``[0.5, 1, 1.5, 2]`` (found by a
review). Real onnxfold, real onnxruntime."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxfold.pipeline.options import FoldOptions
from tests.support.models import make_model, vinfo
from tests.support.running import fold_proto


def _outputs(proto, x: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


@pytest.mark.parametrize("elem, values", [
    (TensorProto.UINT4, [1, 2, 3, 4, 15, 0, 7]),
    (TensorProto.INT4, [1, -2, 3, -8, 7, 0, -1]),
], ids=["uint4", "int4"])
@pytest.mark.parametrize("shape", [[7], [1, 7]], ids=["odd", "2-D"])
def test_a_4bit_weight_dequantized_by_the_fold_computes_what_onnxruntime_does(tmp_path, elem,
                                                                                values, shape):
    weight = helper.make_tensor("w", elem, shape, values)
    scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.5])
    nodes = [helper.make_node("DequantizeLinear", ["w", "s"], ["wd"]),
             helper.make_node("Add", ["x", "wd"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=shape)], [vinfo("y", shape=shape)],
                       [weight, scale], opset=21, ir_version=10)
    folded, _, _ = fold_proto(proto, tmp_path, FoldOptions(strict=True, fold_qdq=True))
    x = np.zeros(shape, np.float32)
    (want,), (got,) = _outputs(proto, x), _outputs(folded, x)
    np.testing.assert_array_equal(got, want)
    assert want.reshape(-1).tolist() == [v * 0.5 for v in values]
