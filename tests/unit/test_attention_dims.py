"""The check plans the dims onnxruntime's GroupQueryAttention accepts, as generation produces
them (genai's decoders): the head size of the past keys from the op's heads and the query's
width, the total length (genai reads it off the attention mask) the past's plus the new
tokens', and several new tokens after a past one sequence at a time. Before, it guessed 224
for genai's ``kv_cache_dim`` (a 4-D float input looks like an image), failed 21 guesses and
settled on every length at 32, a state no generation produces."""

from __future__ import annotations

import pytest

import onnxfold
from tests.support.models import HEAD, gqa_decoder


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
