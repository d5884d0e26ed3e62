"""The check plans the dims onnxruntime's GroupQueryAttention accepts, as generation produces
them (genai's decoders): the head size of the past keys from the op's heads and the query's
width, the total length (genai reads it off the attention mask) the past's plus the new
tokens', and several new tokens after a past one sequence at a time. Before, it guessed 224
for genai's ``kv_cache_dim`` (a 4-D float input looks like an image), failed 21 guesses and
settled on every length at 32, a state no generation produces."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxfold
from tests.support.models import make_model, tensor, vinfo

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


def _states(result):
    return [(b["batch_size"], b["past_sequence_length"], b["sequence_length"],
             b["total_sequence_length"], b["kv_cache_dim"]) for b in result.bindings]


@pytest.mark.parametrize("layers", [1, 3])
def test_a_group_query_attention_decoder_is_checked_at_states_generation_produces(layers):
    model = gqa_decoder(layers)
    result = onnxfold.compare(model, model, n=3)
    assert result.ok, result.summary()
    states = _states(result)
    assert len(states) == 3 and not result.single_dims and not result.notes, result.summary()
    for batch, past, new, total, head in states:
        assert head == HEAD and total == past + new
        assert batch == 1 or new == 1  # new tokens after a past: one sequence at a time
    assert len({s[0] for s in states}) > 1 and len({s[1] for s in states}) > 1
    assert "kv_cache_dim = 16 (head size of" in " ".join(result.derived_dims.values()) + \
        " ".join(f"{k} = {v}" for k, v in result.derived_dims.items())


def test_a_given_batch_is_kept_and_the_plan_does_not_break_it():
    """``--dim batch_size=2`` is the user's: every binding keeps it, so no binding takes new
    tokens after a past (onnxruntime would refuse it)."""
    model = gqa_decoder()
    result = onnxfold.compare(model, model, n=3, dims={"batch_size": 2})
    assert result.ok, result.summary()
    for batch, past, new, total, _ in _states(result):
        assert batch == 2 and total == past + new and new == 1
