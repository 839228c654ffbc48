"""Rows measured at a fixed concurrency: predicted by the steady state of continuous batching with
chunked prefill (:mod:`codesign.model.serving`, model.md §5.11).

A row with a ``concurrency`` runs ``ceil(concurrency / dp)`` requests per model replica. At most
the row's memory-filling batch runs at once (:func:`codesign.calibration.engine.max_batch` of the
row read as offline: the KV cache of ISL + OSL tokens per running request, the engine's maximum
batch); the rest wait. Each step carries at most the engine's ``max_num_tokens`` tokens
(``Row.engine_max_tokens``, an engine-profile figure of ``benchmark_engines.toml``; none: no
budget). ITL, TTFT, end-to-end latency and output tokens per second follow from the steady state.

The benchmark is a closed loop (GenAI-Perf/AIPerf: each of the ``concurrency`` clients sends its
next request when its last one ends), so a request arrives at the end of a step, just after the
engine has scheduled the next one from the requests it already holds: unless it is alone (no other
request running), it first waits out that step, one step period (``itl_s``), and only then starts
its prefill (model.md eq. 5.11d). Requests that wait for a slot (more than the running batch) add
(c - b) / lambda.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from codesign.calibration.engine import ENGINE_MAX_BATCH, BatchChoice, max_batch, row_instance
from codesign.calibration.rows import Row
from codesign.model.calibration import CalibrationSet
from codesign.model.serving import MixedStep, ServingPoint, steady_state


def serving_point(row: Row, running: int, *, calibration: CalibrationSet | None = None) -> ServingPoint:
    """The steady state of one replica of ``row`` with at most ``running`` requests at once."""
    # the instance's own token-budget rule (eq. 4.19) is for a static round: the steady state
    # applies the budget itself
    inst = row_instance(dataclasses.replace(row, engine_max_tokens=None), row.batch_step, calibration=calibration)
    return steady_state(MixedStep(inst, inst.baseline()), concurrency=math.ceil((row.concurrency or 1) / row.dp),
                         input_tokens=row.isl, output_tokens=row.osl, token_budget=row.engine_max_tokens,
                         max_running=running, pipeline_stages=row.pp)


def metric_at_concurrency(metric: str, sp: ServingPoint, row: Row) -> float:
    """A row metric of the steady state: ``ttft_s``, ``itl_s``, ``e2e_latency_s`` of one request,
    ``output_tokens_per_s`` of the whole system (dp replicas), ``..._per_gpu`` per device."""
    if metric == "ttft_s":
        return sp.ttft_s
    if metric == "itl_s":
        return sp.itl_s
    if metric == "e2e_latency_s":
        return sp.e2e_latency_s
    if metric == "output_tokens_per_s":
        return sp.output_tokens_per_s * row.dp
    if metric == "output_tokens_per_s_per_gpu":
        return sp.output_tokens_per_s * row.dp / row.num_gpus
    raise KeyError(metric)


def at_concurrency(row: Row, cap: int | None = ENGINE_MAX_BATCH, *,
                   calibration: CalibrationSet | None = None) -> tuple[BatchChoice, dict[str, Any]]:
    """The running batch of a row at a fixed concurrency and the result fields of its prediction
    (``predicted`` and the steady state's parts); no fields if not even one request fits."""
    offline = max_batch(dataclasses.replace(row, concurrency=None, num_requests=None), cap, calibration=calibration)
    per_replica = math.ceil(row.concurrency / row.dp) if row.concurrency else 0
    if offline.batch < 1:
        return offline, {}
    running = min(per_replica, offline.batch)
    choice = BatchChoice(running, offline.footprint, "concurrency" if running == per_replica else offline.bound)
    sp = serving_point(row, running, calibration=calibration)
    return choice, {
        "predicted": metric_at_concurrency(row.metric, sp, row),
        "itl_s_model": sp.itl_s, "ttft_s_model": sp.ttft_s, "queue_s": sp.queue_s,
        "step_in_flight_s": sp.itl_s if sp.running > 1 else 0.0,
        "prefill_steps": sp.prefill_steps, "itl_step_tokens": list(sp.itl_step_tokens),
        "prefill_step_tokens": list(sp.prefill_step_tokens),
    }
