"""The softmax's exponentials of a step (model.md eq. 2.15m), counted by hand."""

from __future__ import annotations

import pytest

from codesign.model.step import step_costs
from codesign.model.workload import load_workload


def _costs(model: str, **kw):
    return step_costs(load_workload(model), weight_bytes_per_param=1.0, kv_bytes_per_element=1.0, **kw)


def test_a_prompt_takes_one_exponential_per_causal_pair_and_query_head():
    """Llama-3.1-8B: 32 layers of full attention, 32 query heads. A 1,024-token prompt attends
    1 + 2 + ... + 1,024 = 1,024 x 1,025 / 2 = 524,800 (query, key) pairs per layer (the causal
    triangle, as its score FLOPs): 524,800 x 32 layers x 32 heads = 537,395,200 exponentials; a
    batch of 3 prompts three times that, 1,612,185,600."""
    assert float(_costs("llama-3.1-8b", batch=1, new_tokens=1024, context=0).exponentials) == 537_395_200
    assert float(_costs("llama-3.1-8b", batch=3, new_tokens=1024, context=0).exponentials) == 1_612_185_600


def test_a_decode_step_takes_one_per_cached_token_and_itself():
    """Llama-3.1-8B decoding 4 sequences of 2,047 cached tokens: each new token attends the 2,047
    and itself, 2,048 pairs per layer: 4 x 2,048 x 32 layers x 32 heads = 8,388,608."""
    assert float(_costs("llama-3.1-8b", batch=4, new_tokens=1, context=2047).exponentials) == 8_388_608


def test_a_sliding_window_caps_the_pairs():
    """gpt-oss-20b: 24 layers, 12 of full attention and 12 with a 128-token window, 64 query heads.
    A 1,024-token prompt: a full layer 524,800 pairs; a window layer 1 + ... + 128 = 8,256 for the
    first 128 tokens and 128 for each of the other 896, 8,256 + 114,688 = 122,944. In all
    64 x 12 x (524,800 + 122,944) = 64 x 12 x 647,744 = 497,467,392."""
    assert float(_costs("gpt-oss-20b", batch=1, new_tokens=1024, context=0).exponentials) == 497_467_392


def test_the_exponentials_are_no_flops_and_broadcast():
    """They are counted apart from the FLOPs (a prompt's FLOPs do not change) and broadcast like
    every term: prompts of 1 and 2 tokens, 1 and 1 + 2 = 3 pairs, x 32 x 32 = 1,024 and 3,072."""
    c = _costs("llama-3.1-8b", batch=1, new_tokens=[1, 2], context=0)
    assert list(c.exponentials) == [1024.0, 3072.0]
    flops = c.flops_attn_proj + c.flops_attn_score + c.flops_mlp_dense + c.flops_lm_head
    assert list(c.flops) == pytest.approx(list(flops), rel=1e-15)
