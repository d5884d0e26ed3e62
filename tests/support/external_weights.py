"""A small MLP whose weights the trust-boundary tests save inline or as external data, forge
(rewrite an initializer's external_data entries) and run in onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from tests.support.models import make_model, tensor, vinfo

D = 32  # W is D x D float32 = 4 KiB, exactly the canary's size (tests.support.files.CANARY)


def weights(seed=0):
    """W (D x D) and b (D), float32 normal draws of ``seed``."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((D, D)).astype(np.float32),
            rng.standard_normal(D).astype(np.float32))


def mlp_proto(w=None, b=None):
    """y = x @ Transpose(W) + b, W and b initializers (the Transpose folds)."""
    if w is None:
        w, b = weights()
    nodes = [helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "Wt"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["y"])]
    return make_model(nodes, [vinfo("x", shape=[1, D])], [vinfo("y", shape=[1, D])],
                      [tensor("W", w), tensor("b", b)])


def runtime_proto(w=None):
    """y = x @ (Transpose(W) * s): W an initializer, s a graph input (the runtime constant)."""
    if w is None:
        w, _ = weights()
    nodes = [helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
             helper.make_node("Mul", ["Wt", "s"], ["Ws"]),
             helper.make_node("MatMul", ["x", "Ws"], ["y"])]
    return make_model(nodes, [vinfo("x", shape=[1, D]), vinfo("s", shape=[D])],
                      [vinfo("y", shape=[1, D])], [tensor("W", w)])


def weights_as_inputs_proto():
    """y = x @ Transpose(W) + b with W and b graph inputs (runtime constants), no initializer."""
    nodes = [helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "Wt"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["y"])]
    return make_model(nodes, [vinfo("x", shape=[1, D]), vinfo("W", shape=[D, D]),
                              vinfo("b", shape=[D])], [vinfo("y", shape=[1, D])])


def feeds(seed=1, s_ones=False):
    """x (1 x D) and the runtime constant s (D): random, or s all ones (then W's bytes pass
    through the folded Transpose(W) * s unchanged)."""
    rng = np.random.default_rng(seed)
    out = {"x": rng.standard_normal((1, D)).astype(np.float32),
           "s": np.ones(D, np.float32) if s_ones else rng.standard_normal(D).astype(np.float32)}
    return out


def save_external(proto, model_dir, name="m.onnx", location="w.bin"):
    """Save with every initializer in ``model_dir/location``; return the model's path."""
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / name
    proto = onnx.ModelProto.FromString(proto.SerializeToString())  # onnx.save_model mutates it
    onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)
    return path


def save_inline(proto, model_dir, name="m.onnx"):
    """Save with every initializer inside the model file; return the model's path."""
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / name
    onnx.save_model(proto, str(path))
    return path


def external_entries(path, name):
    """The external_data dict of initializer ``name`` in the saved model (graph only)."""
    model = onnx.load(str(path), load_external_data=False)
    t = next(t for t in model.graph.initializer if t.name == name)
    return {e.key: e.value for e in t.external_data}


def forge(path, name, **entries):
    """Rewrite initializer ``name``'s external_data entries in place (None deletes a key)."""
    model = onnx.load(str(path), load_external_data=False)
    t = next(t for t in model.graph.initializer if t.name == name)
    current = {e.key: e.value for e in t.external_data}
    for key, value in entries.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = str(value)
    del t.external_data[:]
    for key, value in current.items():
        t.external_data.add(key=key, value=value)
    t.data_location = TensorProto.EXTERNAL
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def ort_run(path_or_proto, feed):
    """The model's outputs in onnxruntime on the entries of ``feed`` it has inputs for."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    src = path_or_proto.SerializeToString() if isinstance(path_or_proto, onnx.ModelProto) \
        else str(path_or_proto)
    sess = ort.InferenceSession(src, options, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feed.items() if k in names})
