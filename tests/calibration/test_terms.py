"""codesign.calibration.terms: a row's prediction re-composed from calibration-free terms is the
model's own, and the step form by hand.

    tokens/s from steps       batch 4, dp 2, osl 3, t_prefill 1 s, t_decode 0.5 s:
                              4 x 2 x 3 / (1 + 2 x 0.5) = 12 /s; e2e = 1 + 2 x 0.5 = 2 s
"""

from __future__ import annotations

import numpy as np
import pytest

from codesign.calibration.engine import max_batch
from codesign.calibration.report import predict_row
from codesign.calibration.terms import (
    CAP_FIELD,
    EIGHT_BIT_FIELD,
    metric_from_steps,
    recompose,
    row_terms,
    step_time,
)
from codesign.model.calibration import shipped
from codesign.model.hardware import achieved_memory_Bps

from .helpers import row

#: a step of 1 s of compute and 2 s of local memory at efficiency 1, nothing else
STREAMS = {"compute": 1.0, "memory_local": 2.0, "memory_pool": 0.0, "net_bw": 0.0, "net_latency": 0.0, "layers": 0.0,
           "collective_steps": 0.0}
UNIT = {"compute_efficiency": 1.0, "memory_efficiency": 1.0, "network_efficiency": 1.0, "layer_overhead_us": 0.0,
        "collective_step_latency_us": 0.0, "stream_overlap": 0.0}


def test_recompose_at_the_file_calibration_reproduces_evaluate():
    for r in (row(), row(model="mixtral-8x7b", num_gpus=4, tp=4, isl=2048, osl=128),
              row(model="llama-3.1-70b", gpu="a100-sxm-80gb", precision="fp16", num_gpus=8, tp=8)):
        b = max_batch(r).batch
        terms = row_terms(r, b)
        cal = shipped().for_chip(r.gpu).model_dump()
        assert recompose(terms, cal) == pytest.approx(terms.evaluated["tokens_per_s"], rel=1e-9)
        # and the record's prediction is evaluate's tokens_per_s
        assert predict_row(r)["predicted"] == pytest.approx(terms.evaluated["tokens_per_s"], rel=1e-12)


def test_metric_from_steps_by_hand():
    args = dict(batch=4, dp=2, pp=1, osl=3, devices=8)
    assert metric_from_steps("output_tokens_per_s", 1.0, 0.5, **args) == pytest.approx(12.0)
    assert metric_from_steps("output_tokens_per_s_per_gpu", 1.0, 0.5, **args) == pytest.approx(1.5)
    assert metric_from_steps("ttft_s", 1.0, 0.5, **args) == pytest.approx(1.0)
    assert metric_from_steps("itl_s", 1.0, 0.5, **args) == pytest.approx(0.5)
    assert metric_from_steps("e2e_latency_s", 1.0, 0.5, **args) == pytest.approx(2.0)


def test_stream_overlap_interpolates_between_the_max_and_the_sum():
    cal = UNIT | {"compute_efficiency": 0.5}
    assert step_time(STREAMS, cal | {"stream_overlap": 1.0}) == pytest.approx(2.0)  # max(2, 2)
    assert step_time(STREAMS, cal | {"stream_overlap": 0.0}) == pytest.approx(4.0)  # 2 + 2
    assert step_time(STREAMS, cal | {"stream_overlap": 0.5}) == pytest.approx(3.0)


def test_the_host_time_is_paid_per_sequence_of_a_step():
    """eq. 5.3's host term: 100 sequences x 10 us = 1 ms on top of the rest of the step."""
    t = STREAMS | {"sequences": 100.0}
    cal = UNIT | {"compute_efficiency": 0.5, "stream_overlap": 1.0}
    assert step_time(t, cal | {"host_us_per_sequence": 10.0}) == pytest.approx(2.0 + 100 * 10e-6)
    assert step_time(t, cal) == pytest.approx(2.0)  # absent: 0


def test_every_ring_step_pays_the_collective_step_latency():
    """963 ring steps (Llama 70B at TP 4: 160 all-reduces x 6 + a logits gather's 3) x 5 us = 4.815 ms."""
    assert row_terms(row(model="llama-3.1-70b", num_gpus=4, tp=4), 64).decode["collective_steps"] == 963.0
    t = STREAMS | {"compute": 0.0, "memory_local": 0.0, "collective_steps": 963.0}
    assert step_time(t, UNIT | {"collective_step_latency_us": 5.0}) == pytest.approx(4.815e-3, rel=1e-12)


def test_the_die_caps_the_bandwidth_a_faster_memory_can_deliver():
    """eq. 3.21a in the step form: 1 s of local memory at peak -> 1 / min(0.8, 3000 / peak) s:
    H200 (4,800 GB/s) 1.6 s, H100 (3,350 GB/s) 1.25 s."""
    t = STREAMS | {"compute": 0.0, "memory_local": 1.0}
    cal = UNIT | {"memory_efficiency": 0.8, CAP_FIELD: 3000.0}
    assert step_time(t | {"memory_peak_GBps": 4800.0}, cal) == pytest.approx(1.6)
    assert step_time(t | {"memory_peak_GBps": 3350.0}, cal) == pytest.approx(1.25)


def test_the_fitted_cap_binds_on_the_h200_and_the_model_uses_it():
    """The shipped hopper calibration: one set of values for H100 and H200, whose cap lies between
    e x 3,350 and e x 4,800 GB/s; the hardware table's local-memory time per byte is 1 / cap on the
    H200 and 1 / (e x 3,350 GB/s) on the H100, and row_terms divides exactly that out."""
    h100, h200 = shipped().for_chip("h100-sxm"), shipped().for_chip("h200-sxm")
    assert h100 == h200
    cap = h200.memory_bandwidth_cap_GBps
    assert cap is not None and h200.memory_efficiency * 3350 < cap < h200.memory_efficiency * 4800
    assert achieved_memory_Bps(4800e9, h200) == pytest.approx(cap * 1e9)
    assert achieved_memory_Bps(3350e9, h100) == pytest.approx(h100.memory_efficiency * 3350e9)
    for gpu in ("h100-sxm", "h200-sxm"):
        terms = row_terms(row(gpu=gpu), 100)
        assert terms.decode["memory_peak_GBps"] == {"h100-sxm": 3350, "h200-sxm": 4800}[gpu]
        # re-composed at the file calibration (the cap applied to the H200 only) = evaluate's own
        assert recompose(terms, shipped().for_chip(gpu).model_dump()) == pytest.approx(
            terms.evaluated["tokens_per_s"], rel=1e-9)


def test_row_terms_flag_the_rows_at_the_8_bit_rate():
    """H100 FP8: at the 8-bit rate; H100 FP16 and A100 'FP8' (no FP8 rate, runs at BF16): not."""
    flags = {}
    for rid, gpu, prec in (("a", "h100-sxm", "fp8"), ("b", "h100-sxm", "fp16"), ("c", "a100-sxm-80gb", "fp8")):
        t = row_terms(row(id=rid, gpu=gpu, precision=prec), 8)
        flags[rid] = (t.prefill["eight_bit"], t.decode["eight_bit"])
    assert flags == {"a": (1.0, 1.0), "b": (0.0, 0.0), "c": (0.0, 0.0)}


def test_step_time_divides_the_8_bit_rows_by_their_own_efficiency():
    t = {"compute": np.array([1.0, 1.0]), "memory_local": np.array([0.0, 0.0]), "memory_pool": 0.0, "net_bw": 0.0,
         "net_latency": 0.0, "layers": 0.0, "collective_steps": 0.0, "eight_bit": np.array([1.0, 0.0])}
    cal = UNIT | {"compute_efficiency": 0.8, "memory_efficiency": 0.9, "network_efficiency": 0.5}
    assert step_time(t, cal | {EIGHT_BIT_FIELD: 0.5}) == pytest.approx([2.0, 1.25])
    assert step_time(t, cal | {EIGHT_BIT_FIELD: None}) == pytest.approx([1.25, 1.25])
