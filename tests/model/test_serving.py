"""The steady state of continuous batching with chunked prefill (codesign.model.serving,
model.md §5.11), on hand-derived numbers."""

from __future__ import annotations

import itertools
import math

import pytest

from codesign.calibration.engine import evaluate_row, row_instance
from codesign.calibration.rows import Row
from codesign.model.serving import MixedStep, prefill_steps, steady_state


def affine_step(decode_tokens: float, prefill_tokens: float) -> float:
    """A step of 10 ms fixed cost, 1 ms per decode token and 0.1 ms per prefill token."""
    return 0.010 + 0.001 * decode_tokens + 0.0001 * prefill_tokens


def test_one_request_decodes_at_batch_one_and_prefills_the_whole_prompt():
    sp = steady_state(affine_step, concurrency=1, input_tokens=1000, output_tokens=100)
    assert sp.itl_s == pytest.approx(0.011)  # 10 ms + 1 decode token
    assert sp.ttft_s == pytest.approx(0.110)  # 10 ms + 1000 prefill tokens x 0.1 ms, one step
    assert sp.queue_s == 0.0
    assert sp.itl_step_tokens == (1.0, 0.0)


def test_one_request_chunks_its_prompt_by_the_budget():
    # 1000 tokens at 256 per step: ceil(1000/256) = 4 steps of 250 tokens, 4 x (10 ms + 25 ms)
    sp = steady_state(affine_step, concurrency=1, input_tokens=1000, output_tokens=100, token_budget=256)
    assert sp.prefill_steps == 4
    assert sp.ttft_s == pytest.approx(0.140)
    # = the unchunked prefill plus three more steps' fixed cost
    assert sp.ttft_s == pytest.approx(0.110 + 3 * 0.010)
    assert sp.itl_s == pytest.approx(0.011)


def test_two_requests_see_each_other_in_proportion_to_their_phases():
    # n_p = 1 (no budget), n_d = 100: the other request decodes 100 of every 101 steps, and
    # puts 1000 prompt tokens in every 101 steps
    sp = steady_state(affine_step, concurrency=2, input_tokens=1000, output_tokens=101)
    assert sp.prefill_steps == 1
    d_d, p_d = 1 + 100 / 101, 1000 / 101  # 1.990099, 9.90099
    assert sp.itl_step_tokens == pytest.approx((d_d, p_d))
    assert sp.itl_s == pytest.approx(0.010 + 0.001990099 + 0.000990099, rel=1e-6)
    # the prefilling request's step: the other's 100/101 decode token, its own 1000 and the
    # other's 9.90 prompt tokens, after the step in flight when it arrived (one ITL)
    itl = 0.010 + 0.001990099 + 0.000990099
    assert sp.ttft_s == pytest.approx(itl + 0.010 + 0.001 * 100 / 101 + 0.0001 * (1000 + 1000 / 101), rel=1e-6)


@pytest.mark.parametrize(("concurrency", "max_running"), [(1, None), (8, None), (8, 4), (40, 16)])
def test_littles_law(concurrency, max_running):
    sp = steady_state(affine_step, concurrency=concurrency, input_tokens=700, output_tokens=64,
                      token_budget=512, max_running=max_running)
    in_system_s = sp.ttft_s + sp.decode_steps * sp.itl_s
    assert sp.requests_per_s * in_system_s == pytest.approx(concurrency)
    assert sp.output_tokens_per_s == pytest.approx(64 * sp.requests_per_s)
    if max_running is not None:
        assert sp.running == max_running
        # the waiting requests: (c - b) / lambda
        assert sp.queue_s == pytest.approx((concurrency - max_running) / sp.requests_per_s)


def test_monotonic_in_concurrency():
    points = [steady_state(affine_step, concurrency=c, input_tokens=2000, output_tokens=200, token_budget=1024,
                           max_running=48) for c in (1, 2, 4, 8, 16, 32, 48, 64, 128)]
    for a, b in itertools.pairwise(points):
        assert b.itl_s >= a.itl_s
        assert b.ttft_s >= a.ttft_s
        assert b.output_tokens_per_s >= a.output_tokens_per_s


def test_prefill_steps_when_the_budget_saturates():
    # b (I + n_d) / T - n_d = 100 x 1099 / 512 - 99 = 115.648...; the others' decode tokens
    # leave 512 - 99 x 99 / 214.648 = 466.3 per step: ceil(1000 / 466.3) = 3 < 115.65
    assert prefill_steps(100, 1000, 99, 512) == pytest.approx(100 * 1099 / 512 - 99)
    # unsaturated (10 x 1099 / 512 - 99 < 0): the others' decode tokens, 9 x 99 / (2 + 99) = 8.8,
    # leave 503.2 per step: ceil(1000 / 503.2) = 2; 1000 tokens of a 400-token budget: 3 steps
    assert prefill_steps(10, 1000, 99, 512) == 2
    assert prefill_steps(1, 1000, 99, 400) == 3
    assert prefill_steps(50, 1000, 99, None) == 1


def test_bad_arguments():
    with pytest.raises(ValueError):
        steady_state(affine_step, concurrency=0, input_tokens=10, output_tokens=10)
    with pytest.raises(ValueError):
        steady_state(affine_step, concurrency=1, input_tokens=10, output_tokens=10, token_budget=0)


def _row() -> Row:
    return Row(id="r", model="llama-3.1-70b", gpu="h100-sxm", num_gpus=2, tp=2, pp=1, ep=1, attention_dp=1,
               precision="fp8", isl=5000, osl=500, concurrency=1, metric="itl_s", value=0.02)


def test_mixed_step_reduces_to_the_model_s_decode_and_prefill_steps():
    row = _row()
    inst = row_instance(row, 1)
    step = MixedStep(inst, inst.baseline())
    m = evaluate_row(row, 1).workload_metrics["main"]
    assert step(1, 0) == pytest.approx(m["decode_step_s"], rel=1e-9)
    assert step(0, 5000) == pytest.approx(m["prefill_step_s"], rel=1e-6)
    m8 = evaluate_row(row, 8).workload_metrics["main"]
    assert step(8, 0) == pytest.approx(m8["decode_step_s"], rel=1e-9)
    # a step with both costs more than either alone and less than the two apart (one weight read)
    both = step(8, 1000)
    assert step(8, 0) < both < step(8, 0) + step(0, 1000)
    assert math.isfinite(both)


def test_one_request_on_the_model_is_a_decode_step_and_chunked_prefill():
    row = _row()
    inst = row_instance(row, 1)
    step = MixedStep(inst, inst.baseline())
    sp = steady_state(step, concurrency=1, input_tokens=5000, output_tokens=500, token_budget=2048)
    assert sp.itl_s == pytest.approx(step(1, 0))
    # ceil(5000 / 2048) = 3 chunks of 5000/3 tokens each
    assert sp.prefill_steps == 3
    assert sp.ttft_s == pytest.approx(3 * step(0, 5000 / 3))


def _linear_step(decode_tokens, prefill_tokens):
    """10 ms per step plus 1 ms per prompt token; decode tokens cost nothing extra."""
    return 0.01 + 0.001 * prefill_tokens


def test_two_clients_wait_for_the_step_in_flight():
    """Two clients, 100-token prompts, 11 output tokens (n_d = 10), no budget, step = 10 ms + 1 ms
    per prompt token. By hand (model.md eq. 5.11d): n_p = 1, q = 10/11; a decoding request sees the
    other's prompt spread over 11 steps, 100/11 tokens: ITL = 0.01 + 0.1/11 = 0.21/11 s; a prefilling
    request's step carries its 100 tokens and the same 100/11: 1.31/11 s. The closed loop adds the
    step the engine scheduled just before the request arrived, one ITL: TTFT = 1.52/11 s; a request
    holds its slot 1.52/11 + 10 x 0.21/11 = 3.62/11 s, so lambda = 2 / (3.62/11) = 22/3.62 per s and
    11 x 22/3.62 = 242/3.62 output tokens per s."""
    sp = steady_state(_linear_step, concurrency=2, input_tokens=100, output_tokens=11)
    assert sp.itl_s == pytest.approx(0.21 / 11)
    assert sp.step_wait_s == pytest.approx(0.21 / 11)
    assert sp.ttft_s == pytest.approx(1.52 / 11)
    assert sp.requests_per_s == pytest.approx(22 / 3.62)
    assert sp.output_tokens_per_s == pytest.approx(242 / 3.62)
    assert sp.queue_s == 0.0


def test_a_lone_client_finds_the_engine_idle():
    """One client: nothing else runs, no step is in flight: TTFT = the prefill step, 0.01 + 0.1 s."""
    sp = steady_state(_linear_step, concurrency=1, input_tokens=100, output_tokens=11)
    assert sp.step_wait_s == 0.0
    assert sp.ttft_s == pytest.approx(0.11)
    assert sp.requests_per_s == pytest.approx(1 / (0.11 + 10 * 0.01))


def test_a_third_client_waits_for_a_slot():
    """Three clients, two slots: the two running are the two-client loop above (lambda = 22/3.62
    per s); the third waits (3 - 2) / lambda = 3.62/22 s for a slot, then 1.52/11 s as they do."""
    sp = steady_state(_linear_step, concurrency=3, input_tokens=100, output_tokens=11, max_running=2)
    assert sp.queue_s == pytest.approx(3.62 / 22)
    assert sp.ttft_s == pytest.approx(3.62 / 22 + 1.52 / 11)
