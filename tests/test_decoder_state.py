"""The serving runtime's decoding state per sequence slot in the optimiser's memory row (model.md
eq. 4.14b): hand-derived columns, the attention-DP share, and brute force = HiGHS = CP-SAT where the
state decides the optimum.

Per slot and TP rank (TensorRT-LLM's runtime, VALIDATION.md): 4 fp32 rows of the vocabulary
padded to a multiple of TP, 1 int32 row of it, 64 KiB of top-K scratch, 10 x 4 B per token of
ISL + OSL. Llama 3.1 (128,256 entries, a multiple of 8) at 1000/1000: 2,052,096 + 513,024 + 65,536
+ 80,000 = 2,710,656 B. Qwen3 (151,936 entries, a multiple of 8) at 1000/1000: 2,430,976 + 607,744
+ 65,536 + 80,000 = 3,184,256 B.
"""

from __future__ import annotations

import math

import pytest

from codesign.kinds.grid.spec import Instance, InstanceFile
from codesign.model import schedule
from codesign.model.calibration import shipped
from codesign.model.hardware import usable_capacity_B
from codesign.model.schedule import schedule_table

LLAMA_SLOT_B = 4 * 128_256 * 4 + 128_256 * 4 + 65_536 + 40 * 2000
QWEN3_SLOT_B = 4 * 151_936 * 4 + 151_936 * 4 + 65_536 + 40 * 2000


def _instance(workload: str, precision: str, decisions: dict, chip: str = "h100-sxm") -> Instance:
    raw = {
        "name": "decoder-state", "description": "t",
        # the decoding state is an engine's rule (TensorRT-LLM's, eq. 4.14b): no engine, no state
        "system": {"devices": 8, "scale_up_domain": 8, "engine": "trtllm-0.14"},
        "hardware": {"family": "catalog", "chip": chip},
        "workloads": [{"name": "main", "workload": workload, "precision": precision, "input_tokens": 1000,
                       "output_tokens": 1000, "decisions": decisions}],
    }
    return Instance(InstanceFile.model_validate(raw), source=None, raw=raw)


def test_the_slot_sizes_by_hand():
    assert LLAMA_SLOT_B == 2_710_656 == schedule.decoder_state_per_slot_B(128_256, 8, 2000)
    assert QWEN3_SLOT_B == 3_184_256 == schedule.decoder_state_per_slot_B(151_936, 8, 2000)
    # a vocabulary that TP does not divide is padded: 32,000 over TP 3 -> 32,001 entries per row
    assert schedule.decoder_state_per_slot_B(32_000, 3, 0) == 4 * 32_001 * 4 + 32_000 * 4 + 65_536


def test_every_tp_rank_holds_the_state_of_every_sequence_before_the_kv_claim():
    """Llama 70B FP16, TP 8, 64 sequences: each rank holds 64 slots, 173,481,984 B, in its own memory
    next to W + KV / f."""
    inst = _instance("llama-3.1-70b", "fp16", {"tp": [8], "pp": [1], "batch": [64]})
    t = schedule_table(inst, "main")
    f = t.features
    assert f["decoder_state_per_device_B"][0] == 64 * LLAMA_SLOT_B == 173_481_984
    expected = f["weights_per_device_B"][0] + 173_481_984 + f["kv_per_device_B"][0] / shipped().kv_cache_free_fraction
    assert f["memory_local_B"][0] == pytest.approx(expected, rel=1e-12)


def test_the_state_is_local_whatever_the_kv_tier_and_split_by_attention_dp():
    """Qwen3-235B FP8 at TP 8, 256 sequences: tensor-parallel attention puts all 256 slots on every
    rank; attention DP gives each rank its own 32."""
    inst = _instance("qwen3-235b-a22b", "fp8", {"tp": [8], "pp": [1], "ep": [8], "batch": [256],
                                                "attention_dp": [False, True]})
    t = schedule_table(inst, "main")
    by_adp = {bool(a): float(s) for a, s in zip(t.decisions["attention_dp"], t.features["decoder_state_per_device_B"],
                                                  strict=True)}
    assert by_adp == {False: 256 * QWEN3_SLOT_B, True: 32 * QWEN3_SLOT_B}


def test_brute_force_equals_both_solvers_where_the_state_decides_the_batch(solvers_match_brute_force):
    """The largest batch whose KV claim fits the H100 at TP 8 without the state does not fit with
    it: the optimum is the smaller batch, and brute force, HiGHS and CP-SAT agree on it (a MIP whose
    memory row dropped the state would pick the larger batch)."""
    probe = schedule_table(_instance("llama-3.1-70b", "fp16", {"tp": [8], "pp": [1], "batch": [1]}), "main").features
    room = float(usable_capacity_B(80 * 2**30, shipped().for_chip("h100-sxm"))) - probe["weights_per_device_B"][0]
    kv_claim = probe["kv_per_device_B"][0] / shipped().kv_cache_free_fraction
    without = math.floor(room / kv_claim)
    with_state = math.floor(room / (kv_claim + LLAMA_SLOT_B))
    assert with_state < without
    inst = _instance("llama-3.1-70b", "fp16", {"tp": [8], "pp": [1], "batch": [with_state, without]})
    assert solvers_match_brute_force(inst).design["batch"] == with_state


def test_the_state_stays_in_local_memory_when_weights_and_kv_are_pooled():
    """Llama 405B FP8 with the Photonic Fabric appliance (pf-llama405b-consistent): whatever tiers
    hold the weights and the KV cache, each device keeps its slots' state in its own memory, b x
    (16 x 128,256 + 4 x 128,256 + 65,536 + 40 x 2,048) B; with both pooled it is all the local
    column holds."""
    from codesign.kinds.grid.spec import load_instance

    t = schedule_table(load_instance("pf-llama405b-consistent"), "main")
    d, f = t.decisions, t.features
    slot = 4 * 128_256 * 4 + 128_256 * 4 + 65_536 + 40 * 2048
    assert f["decoder_state_per_device_B"] == pytest.approx(d["batch"] * slot, rel=1e-12)
    both_pooled = (d["weights_tier"] == "pooled") & (d["kv_tier"] == "pooled")
    assert both_pooled.any()
    assert f["memory_local_B"][both_pooled] == pytest.approx(d["batch"][both_pooled] * slot, rel=1e-12)
    kv_pooled = d["kv_tier"] == "pooled"
    local_w = (d["weights_tier"] == "local") & kv_pooled
    assert f["memory_local_B"][local_w] == pytest.approx(
        f["weights_per_device_B"][local_w] + d["batch"][local_w] * slot, rel=1e-12)
