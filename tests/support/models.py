"""Tiny ONNX models built with onnx.helper: the graph, its initializers and value infos."""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "models")


def make_model(nodes, inputs, outputs, initializers=(), opset=17, ir_version=8):
    """A model of one graph named ``test`` in the default domain at ``opset``."""
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def tensor(name, arr):
    """An initializer ``name`` holding ``arr``."""
    return numpy_helper.from_array(np.asarray(arr), name)


def vinfo(name, elem=TensorProto.FLOAT, shape=None):
    """A value info (graph input or output) of element type ``elem`` and ``shape``."""
    return helper.make_tensor_value_info(name, elem, shape)


def constant_node(name, arr):
    """A ``Constant`` node whose output ``name`` holds ``arr``."""
    return helper.make_node("Constant", [], [name], value=tensor(name + "_v", np.asarray(arr)))


def stale_named_sum_reshaped():
    """x: [N, 4] + pos [1, 4] -> Relu (named ``relu``), both declared [unk__2, 4] (a stale
    name shape inference left); then Reshape(r, Concat(Shape(r)[0:1], [2, 2])): the dims a
    shape chain reads through a name that proves nothing."""
    nodes = [constant_node("pos", np.ones((1, 4), np.float32)),
             helper.make_node("Add", ["x", "pos"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Shape", ["r"], ["s"], end=1),
             constant_node("rest", np.array([2, 2])),
             helper.make_node("Concat", ["s", "rest"], ["target"], axis=0),
             helper.make_node("Reshape", ["r", "target"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["N", 4])], [vinfo("y", shape=["N", 2, 2])])
    proto.graph.value_info.extend([vinfo("a", shape=["unk__2", 4]),
                                   vinfo("r", shape=["unk__2", 4])])
    return proto


def reshape_to_rows_of_thirteen(rows: int = 13):
    """``y = Reshape(x, [-1, rows])`` with x: float[1, n] and a Constant target: it runs only
    when n is a multiple of ``rows``, so no dim onnxfold guesses for n (16, 1, 7, then 64 to
    1537) fits; the check then tries multiples of the numbers onnxruntime's error names (up to
    512: 13 runs there, 1031 never)."""
    target = helper.make_tensor("shape", TensorProto.INT64, [2], [-1, rows])
    return make_model([helper.make_node("Constant", [], ["s"], value=target),
                       helper.make_node("Reshape", ["x", "s"], ["y"])],
                      [vinfo("x", shape=[1, "n"])], [vinfo("y", shape=["m", rows])])


def transposed_weight(directory, name="m.onnx", rows=4096, cols=16384):
    """``y = x @ Transpose(W)`` saved as ``directory/name``, ``W`` float32 [rows, cols] zeros
    in ``name.data`` (a sparse file: made at once, whatever its size; 256 MiB by default). The
    fold stores ``W`` transposed: the save writes every byte of it."""
    import onnx

    os.makedirs(directory, exist_ok=True)
    weight = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[rows, cols],
                         data_location=TensorProto.EXTERNAL)
    for key, value in (("location", name + ".data"), ("offset", "0"),
                       ("length", str(rows * cols * 4))):
        weight.external_data.add(key=key, value=value)
    with open(os.path.join(directory, name + ".data"), "wb") as f:
        f.truncate(rows * cols * 4)
    model = make_model([helper.make_node("Transpose", ["W"], ["Wt"]),
                        helper.make_node("MatMul", ["x", "Wt"], ["y"])],
                       [vinfo("x", shape=[1, cols])], [vinfo("y", shape=[1, rows])], [weight])
    path = os.path.join(directory, name)
    onnx.save(model, path)
    return type(directory)(path) if not isinstance(directory, str) else path


def exp_model(path):
    """y = x + Exp(|c|): the folded Exp is numpy's, which differs from onnxruntime's in the
    last bits of some elements, so a check with zero tolerance fails."""
    c = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 10, "c")
    nodes = [helper.make_node("Abs", ["c"], ["a"]), helper.make_node("Exp", ["a"], ["e"]),
             helper.make_node("Add", ["x", "e"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])], [c])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))


HEADS, KV_HEADS, HEAD = 4, 2, 16
HIDDEN = HEADS * HEAD


def gqa_decoder(layers: int = 1) -> onnx.ModelProto:
    """genai's layout in small: token ids through an embedding, a packed QKV projection and
    GroupQueryAttention per layer, its total length ``Cast(Gather(Shape(mask), 1))`` and its
    sequence lengths ``ReduceSum(mask) - 1``; the caches ``[batch_size, 2,
    past_sequence_length, kv_cache_dim]`` as genai names them."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gather", ["embed", "input_ids"], ["h0"]),
             helper.make_node("Shape", ["attention_mask"], ["mask_shape"]),
             helper.make_node("Gather", ["mask_shape", "one"], ["total64"]),
             helper.make_node("Cast", ["total64"], ["total"], to=TensorProto.INT32),
             helper.make_node("ReduceSum", ["attention_mask", "axes"], ["summed"]),
             helper.make_node("Sub", ["summed", "one1"], ["lens64"]),
             helper.make_node("Cast", ["lens64"], ["seqlens"], to=TensorProto.INT32)]
    inits = [tensor("embed", rng.standard_normal((100, HIDDEN)).astype(np.float32)),
             tensor("one", np.array(1, np.int64)), tensor("one1", np.array([1], np.int64)),
             tensor("axes", np.array([1], np.int64)),
             tensor("head", rng.standard_normal((HIDDEN, 100)).astype(np.float32))]
    inputs = [vinfo("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              vinfo("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"])]
    outputs = [vinfo("logits", shape=["batch_size", "sequence_length", 100])]
    cache = ["batch_size", KV_HEADS, "past_sequence_length", "kv_cache_dim"]
    present = ["batch_size", KV_HEADS, "total_sequence_length", "kv_cache_dim"]
    hidden = "h0"
    for k in range(layers):
        width = (HEADS + 2 * KV_HEADS) * HEAD
        inits.append(tensor(f"qkv{k}", rng.standard_normal((HIDDEN, width)).astype(np.float32)
                            / 8))
        nodes += [helper.make_node("MatMul", [hidden, f"qkv{k}"], [f"packed{k}"]),
                  helper.make_node("GroupQueryAttention",
                                   [f"packed{k}", "", "", f"past_key_values.{k}.key",
                                    f"past_key_values.{k}.value", "seqlens", "total"],
                                   [f"attn{k}", f"present.{k}.key", f"present.{k}.value"],
                                   domain="com.microsoft", num_heads=HEADS,
                                   kv_num_heads=KV_HEADS)]
        hidden = f"attn{k}"
        inputs += [vinfo(f"past_key_values.{k}.{kv}", shape=cache) for kv in ("key", "value")]
        outputs += [vinfo(f"present.{k}.{kv}", shape=present) for kv in ("key", "value")]
    nodes.append(helper.make_node("MatMul", [hidden, "head"], ["logits"]))
    model = make_model(nodes, inputs, outputs, inits)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def shared_input_products(path):
    """Two layers of ``x @ Transpose(W_i)``, i = 1..3, of one input (merged into one MatMul and
    a Split: a rewrite whose leaves are the transposed weights), summed, then Tanh."""
    rng = np.random.default_rng(3)
    nodes, inits, x = [], [], "x"
    for layer in range(2):
        names = []
        for i in range(3):
            w = f"w{layer}{i}"
            inits.append(tensor(w, rng.standard_normal((64, 64)).astype(np.float32)))
            nodes += [helper.make_node("Transpose", [w], [f"{w}t"]),
                      helper.make_node("MatMul", [x, f"{w}t"], [f"{w}p"])]
            names.append(f"{w}p")
        nodes += [helper.make_node("Sum", names, [f"s{layer}"]),
                  helper.make_node("Tanh", [f"s{layer}"], [f"h{layer}"])]
        x = f"h{layer}"
    onnx.save(make_model(nodes, [vinfo("x", shape=["N", 64])], [vinfo(x, shape=["N", 64])],
                         inits), str(path))


def without_run_record(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` without the model-level record every onnxfold output carries
    (``onnxfold.run``: some 60 bytes), for tests that weigh what the fold itself wrote."""
    from onnxfold.ir.provenance import RUN

    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    kept = [p for p in copy.metadata_props if p.key != RUN]
    del copy.metadata_props[:]
    copy.metadata_props.extend(kept)
    return copy
