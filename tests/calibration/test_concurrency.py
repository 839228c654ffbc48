"""Rows at a fixed concurrency: predicted by the steady state of continuous batching
(codesign.calibration.concurrency, model.md §5.11)."""

from __future__ import annotations

import dataclasses

import pytest

from codesign.calibration.concurrency import at_concurrency, closed_loop
from codesign.calibration.engine import evaluate_row, max_batch
from codesign.calibration.report import predict_row
from codesign.calibration.rows import engine_of, read_benchmark_engines
from codesign.model.serving import steady_state

from .helpers import row


def test_one_request_is_the_model_s_decode_step_and_prefill():
    """At concurrency 1 without a token budget the ITL is the decode step at batch 1 and the TTFT
    the prefill step of the whole prompt: what ``evaluate`` gives (PP 1)."""
    m = evaluate_row(row(), 1).workload_metrics["main"]
    itl = predict_row(row(concurrency=1, metric="itl_s", value=0.005))
    ttft = predict_row(row(concurrency=1, metric="ttft_s", value=0.02))
    assert itl["batch"] == 1 and itl["batch_bound"] == "concurrency"
    assert itl["predicted"] == pytest.approx(m["tpot_s"], rel=1e-9)
    assert ttft["predicted"] == pytest.approx(m["ttft_s"], rel=1e-6)


def test_throughput_is_littles_law_over_the_replicas():
    r = row(num_gpus=2, concurrency=16, metric="output_tokens_per_s", value=1000.0)
    _, f = at_concurrency(r)
    ttft, itl = f["ttft_s_model"], f["itl_s_model"]
    # 8 requests per replica, each in the system ttft + 999 itl for 1000 output tokens; 2 replicas
    assert f["predicted"] == pytest.approx(2 * 8 / (ttft + 999 * itl) * 1000)


def test_more_requests_than_the_memory_holds_wait():
    """Past the memory-filling batch the requests queue: the running batch is that batch (bound
    'memory'), the waiting ones add (c - b) / lambda to the TTFT."""
    offline = max_batch(row()).batch
    c = offline + 50
    choice, f = at_concurrency(row(concurrency=c, metric="ttft_s", value=1.0))
    assert choice.batch == offline and choice.bound == "memory"
    assert f["queue_s"] > 0
    choice_in, f_in = at_concurrency(row(concurrency=offline, metric="ttft_s", value=1.0))
    assert choice_in.bound == "concurrency" and f_in["queue_s"] == 0.0
    assert f["ttft_s_model"] > f_in["ttft_s_model"]


def test_the_nim_rows_take_the_engine_profile_s_token_budget():
    engines = read_benchmark_engines()
    src = "NVIDIA NIM LLM benchmarking 1.0.0, Performance: Llama-3.1-8b-instruct, NIM 1.8.0, ..."
    # (max batch unknown, 8,192 tokens, and the source's engine profile)
    assert engine_of(src, "llama-3.1-8b", 1, 1, 200, 200, engines) == (None, 8192, "trtllm-0.14")
    # a budget smaller than the prompt chunks it: more prefill steps, a longer TTFT
    base = row(concurrency=1, metric="ttft_s", value=0.02)
    _, whole = at_concurrency(base)
    _, chunked = at_concurrency(dataclasses.replace(base, engine_max_tokens=256))
    assert chunked["prefill_steps"] == 4 and whole["prefill_steps"] == 1
    assert chunked["predicted"] > whole["predicted"]


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
    fluid = steady_state(_linear_step, concurrency=2, input_tokens=100, output_tokens=11)
    sp = closed_loop(fluid, 11)
    assert sp.itl_s == pytest.approx(0.21 / 11)
    assert fluid.ttft_s == pytest.approx(1.31 / 11)
    assert sp.ttft_s == pytest.approx(1.52 / 11)
    assert sp.requests_per_s == pytest.approx(22 / 3.62)
    assert sp.output_tokens_per_s == pytest.approx(242 / 3.62)
    assert sp.queue_s == 0.0


def test_a_lone_client_finds_the_engine_idle():
    """One client: nothing else runs, no step is in flight: TTFT = the prefill step, 0.01 + 0.1 s."""
    sp = closed_loop(steady_state(_linear_step, concurrency=1, input_tokens=100, output_tokens=11), 11)
    assert sp.ttft_s == pytest.approx(0.11)
    assert sp.requests_per_s == pytest.approx(1 / (0.11 + 10 * 0.01))


def test_a_third_client_waits_for_a_slot():
    """Three clients, two slots: the two running are the two-client loop above (lambda = 22/3.62
    per s); the third waits (3 - 2) / lambda = 3.62/22 s for a slot, then 1.52/11 s as they do."""
    fluid = steady_state(_linear_step, concurrency=3, input_tokens=100, output_tokens=11, max_running=2)
    sp = closed_loop(fluid, 11)
    assert sp.queue_s == pytest.approx(3.62 / 22)
    assert sp.ttft_s == pytest.approx(3.62 / 22 + 1.52 / 11)
