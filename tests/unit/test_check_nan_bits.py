"""A NaN of other bits is the same value, never the same bits: fold verification calls a
folded tensor bitwise only where every bit is the original's. Where the original stores the
value (a Constant, a weight), a fold copies its bytes, compared as they are (not through what
onnxruntime gives of them: a bfloat16 comes back through float32), and a NaN of another
payload is a changed tensor; where it computes it, the payload is the arithmetic's, and the
tensor is verified within, not bitwise. Real onnxfold, real onnxruntime."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.check.folds.verification import BITWISE, DIFFERS, WITHIN, verify_folds
from tests.support.models import constant_node, make_model, tensor, vinfo

QUIET_NAN = 0x7FC00000


def _with_payload(arr: np.ndarray, index: int, bits: int) -> np.ndarray:
    """``arr`` (float32) with element ``index`` the NaN of bit pattern ``bits``."""
    raw = arr.astype(np.float32).view(np.uint32).copy()
    raw[index] = bits
    return raw.view(np.float32)


def _folded(tmp_path, proto: onnx.ModelProto) -> tuple[str, onnx.ModelProto]:
    original = str(tmp_path / "original.onnx")
    onnx.save(proto, original)
    path = str(tmp_path / "folded.onnx")
    onnxfold.optimize(original).save(path)
    return original, onnx.load(path)


def _verdict(original: str, proto: onnx.ModelProto, tmp_path, name: str, bits: int):
    """The verdict on initializer ``name`` of ``proto`` once its element 1 is NaN ``bits``."""
    init = next(t for t in proto.graph.initializer if t.name == name)
    changed = numpy_helper.from_array(_with_payload(numpy_helper.to_array(init), 1, bits),
                                      name)
    changed.metadata_props.extend(init.metadata_props)
    init.CopyFrom(changed)
    path = str(tmp_path / f"changed_{bits:x}.onnx")
    onnx.save(proto, path)
    result = verify_folds(original, path)
    return result, next(t for t in result.tensors if t.name == name)


def _constant_output(payload: int) -> onnx.ModelProto:
    """y = x + c, c a Constant holding a NaN of ``payload`` bits, also an output."""
    c = _with_payload(np.array([1.0, 2.0, 3.0], np.float32), 1, payload)
    return make_model([constant_node("c", c), helper.make_node("Add", ["x", "c"], ["y"])],
                      [vinfo("x", shape=[3])], [vinfo("y", shape=[3]), vinfo("c", shape=[3])])


def test_a_constant_copied_with_another_nan_payload_differs(tmp_path):
    original, proto = _folded(tmp_path, _constant_output(QUIET_NAN | 1))
    assert verify_folds(original, str(tmp_path / "folded.onnx")).ok  # the copy: every bit
    result, verdict = _verdict(original, proto, tmp_path, "c", QUIET_NAN | 2)
    assert not result.ok and verdict.state == DIFFERS
    assert verdict.reason.startswith("1 of 3 elements hold other bits than the original "
                                     "stores")


def test_a_weight_kept_with_another_nan_payload_differs(tmp_path):
    """A weight the fold keeps, edited in place under its name (onnxfold's provenance on the
    others): compared with the original's bytes, not counted unchanged."""
    w = _with_payload(np.array([1.0, 2.0, 3.0], np.float32), 1, QUIET_NAN | 1)
    nodes = [helper.make_node("Add", ["x", "w"], ["y"]),
             helper.make_node("Neg", ["k"], ["nk"]), helper.make_node("Add", ["y", "nk"], ["z"])]
    model = make_model(nodes, [vinfo("x", shape=[3])], [vinfo("z", shape=[3])],
                       [tensor("w", w), tensor("k", np.ones(3, np.float32))])
    original, proto = _folded(tmp_path, model)
    result, verdict = _verdict(original, proto, tmp_path, "w", QUIET_NAN | 2)
    assert not result.ok and verdict.state == DIFFERS


def test_a_computed_nan_of_another_payload_is_within_not_bitwise(tmp_path):
    """0 / 0 folded: onnxruntime's NaN and one of another payload hold the same value; the
    verdict says so instead of bitwise."""
    zeros = np.zeros(3, np.float32)
    nodes = [helper.make_node("Div", ["a", "b"], ["q"]), helper.make_node("Add", ["x", "q"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[3])], [vinfo("y", shape=[3])],
                       [tensor("a", zeros), tensor("b", zeros)])
    original, proto = _folded(tmp_path, model)
    (name,) = [t.name for t in proto.graph.initializer]
    folded = verify_folds(original, str(tmp_path / "folded.onnx"))
    assert folded.ok and [t.state for t in folded.tensors] == [BITWISE]
    held = numpy_helper.to_array(proto.graph.initializer[0]).view(np.uint32)[1]
    result, verdict = _verdict(original, proto, tmp_path, name, int(held) ^ 1)
    assert result.ok and verdict.state == WITHIN and "NaNs of other bits" in verdict.reason
    assert "1 within: NaNs of other bits (the same values)" in result.summary()
    assert "ulps" not in result.summary()  # no ulp figure claimed of a NaN


def test_a_bfloat16_constant_copied_bit_for_bit_is_bitwise(tmp_path):
    """NaNs of two payloads in a bfloat16 Constant (typed field), copied as they are: what
    onnxruntime gives of them comes back through float32, which keeps no NaN's payload; the
    copy is compared with the original's own bytes, and is unchanged. (Found by a review:
    compared with onnxruntime's, the exact copy was called a difference.)"""
    data = TensorProto(name="value", data_type=TensorProto.BFLOAT16, dims=[3])
    data.int32_data.extend([0x3F80, 0x7FC1, 0xFF81])
    nodes = [helper.make_node("Constant", [], ["c"], value=data),
             helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
             helper.make_node("Concat", ["xb", "c"], ["xc"], axis=0),
             helper.make_node("Cast", ["xc"], ["y"], to=TensorProto.FLOAT)]
    model = make_model(nodes, [vinfo("x", shape=[3])], [vinfo("y", shape=[6])])
    original, proto = _folded(tmp_path, model)
    (c,) = [t for t in proto.graph.initializer if t.name == "c"]
    assert numpy_helper.to_array(c).view(np.uint16).tolist() == [0x3F80, 0x7FC1, 0xFF81]
    result = verify_folds(original, str(tmp_path / "folded.onnx"))
    assert result.ok and result.unchanged == 1, result.summary()


def test_a_float8_fold_that_differs_is_said_to_differ(tmp_path):
    """float8 has no ulp budget: a folded float8 tensor with one element of other bits was an
    internal error (an assertion in the ulp measure); it differs, said as such."""
    nodes = [helper.make_node("Cast", ["w"], ["w8"], to=TensorProto.FLOAT8E5M2),
             helper.make_node("Cast", ["w8"], ["wf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "wf"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[3])],
                       [vinfo("y", shape=[3]), vinfo("w8", TensorProto.FLOAT8E5M2, [3])],
                       [tensor("w", np.array([1.0, 2.0, 3.0], np.float32))], opset=19,
                       ir_version=9)
    original, proto = _folded(tmp_path, model)
    (w8,) = [t for t in proto.graph.initializer if t.name == "w8"]
    raw = bytearray(w8.raw_data)
    raw[1] ^= 1
    w8.raw_data = bytes(raw)
    path = str(tmp_path / "changed.onnx")
    onnx.save(proto, path)
    verdict = next(t for t in verify_folds(original, path).tensors if t.name == "w8")
    assert verdict.state == DIFFERS and verdict.reason.startswith("1 of 3 elements differ")


def test_a_4bit_constant_written_again_without_its_padding_is_unchanged(tmp_path):
    """A uint4 Constant of 3 elements whose last byte's unused half is not zero: written again
    from its elements (as an initializer), that half is zero. Its elements are the original's:
    unchanged, where the stored data compared as bytes called it a difference (found by
    review: ``--check`` then refused onnxfold's own correct output)."""
    data = TensorProto(name="value", data_type=TensorProto.UINT4, dims=[3],
                       raw_data=bytes([0x21, 0xF3]))
    nodes = [helper.make_node("Constant", [], ["c"], value=data),
             helper.make_node("DequantizeLinear", ["c", "s"], ["cd"]),
             helper.make_node("Add", ["x", "cd"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[3])], [vinfo("y", shape=[3])],
                       [tensor("s", np.float32(0.5))], opset=21, ir_version=10)
    original, proto = _folded(tmp_path, model)
    result = verify_folds(original, str(tmp_path / "folded.onnx"))
    assert result.ok and result.unchanged >= 1, result.summary()
    (c,) = [t for t in proto.graph.initializer if t.name == "c"]
    raw = bytearray(c.raw_data)
    raw[0] ^= 0x01  # an element's bits: 1 -> 0
    c.raw_data = bytes(raw)
    path = str(tmp_path / "changed.onnx")
    onnx.save(proto, path)
    verdict = next(t for t in verify_folds(original, path).tensors if t.name == "c")
    assert verdict.state == DIFFERS and verdict.reason.startswith("1 of 3 elements hold")
