"""Rows at a fixed concurrency: predicted by the steady state of continuous batching
(codesign.calibration.concurrency, model.md §5.11)."""

from __future__ import annotations

import dataclasses

import pytest

from codesign.calibration.concurrency import at_concurrency
from codesign.calibration.engine import evaluate_row, max_batch
from codesign.calibration.report import predict_row
from codesign.calibration.rows import engine_of, read_benchmark_engines

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
