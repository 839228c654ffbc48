"""Expert parallelism in the main model (model.md eq. 3.16a, 4.6, 4.6a), derived by hand.

DeepSeek-V3: 61 layers (3 dense, 58 MoE), hidden 7168, 256 routed experts, top-8, one shared
expert; activations cross links in 16 bit (2 B). The stored optimum of deepstack-deepseek-v3-ep
runs TP 16, PP 1, 512 sequences per replica (decode, one new token each) on 64 3D tiles in
scale-up domains of 8 (500 GB/s per direction, 500 ns; scale-out 50 GB/s, 2,000 ns; network
efficiency 0.80), so its TP group spans two domains.

    message of a collective   M = 512 x 7168 x 2 B = 7,340,032 B
    TP 16 all-reduce of M     scale-up 2 x 7/8 x M = 12,845,056 B, 14 ring steps;
                              scale-out 2 x 1/2 x M/8 = 917,504 B, 2 ring steps
    EP 16 (16 > k = 8)        each rank dispatches its 512/16 = 32 tokens to 8 experts:
                              256 selections x 14,336 B = 3,670,016 B; a selection stays on the
                              rank with probability 1/16, goes to the 7 other ranks of its domain
                              with 7/16 (1,605,632 B on scale-up) and to the 8 ranks of the other
                              domain with 8/16 (1,835,008 B on scale-out); one scale-out latency.
                              The combine sends the same back.
    per decode step, EP 16    58 MoE all-reduces fewer: scale-up -58 x 12,845,056 = -745,013,248 B,
    against EP 1              scale-out -58 x 917,504 = -53,215,232 B, -58 x 14 = -812 scale-up and
                              -116 scale-out steps; 116 all-to-alls more: scale-up +186,253,312 B,
                              scale-out +212,860,928 B, +116 scale-out steps. Net: scale-up
                              -558,759,936 B, scale-out +159,645,696 B, -812 scale-up steps.
    time                      -558,759,936 / 400e9 + 159,645,696 / 40e9 - 812 x 500e-9
                              = -1.39689984 + 3.9911424 - 0.406 = +2.18824256 ms per decode step:
                              EP 16 is slower here (it sends whole token vectors over the 10x
                              slower scale-out links where the hierarchical all-reduce sends 1/8
                              shards).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from codesign.kinds.grid.spec import instance_from_data, load_instance
from codesign.model import network
from codesign.model.evaluate import evaluate
from codesign.model.schedule import schedule_table
from codesign.model.workload import expected_experts_touched, layer_weight_params, load_workload

OPTIMUM = {"dram_layers": 14, "tsv_count": 65536, "tsv_pitch_um": 40.0, "compute_area_mm2": 100.0,
           "clock_GHz": 0.8, "sram_MiB": 0.25, "tp": 16, "pp": 1, "ep": 1, "batch": 512,
           "weights_tier": "local", "kv_tier": "local"}


def _features(inst, **s) -> dict[str, float]:
    row = {**{k: OPTIMUM[k] for k in ("tp", "pp", "ep", "batch", "weights_tier", "kv_tier")}, **s}
    designs = {k: np.array([v], dtype=object if isinstance(v, str) else None) for k, v in row.items()}
    t = schedule_table(inst, "main", designs)
    return {k: float(v[0]) for k, v in t.features.items()}


def test_experts_touched_per_step_and_per_ep_rank():
    """E (1 - (1 - k/E)^T): one token touches k = 8 of DeepSeek-V3's 256 experts, a huge step all
    of them; 512 tokens touch 256 (1 - (31/32)^512) = 255.99997 (every expert but a 3e-7 share),
    so an EP 16 rank holding 16 of them reads 15.999998 experts."""
    assert expected_experts_touched(256, 8, 1) == 8
    assert expected_experts_touched(256, 8, 1e6) == pytest.approx(256, rel=1e-15)
    t512 = float(expected_experts_touched(256, 8, 512))
    assert t512 == pytest.approx(256 * (1 - (31 / 32) ** 512), rel=1e-15)
    assert 256 - t512 == pytest.approx(256 * (31 / 32) ** 512, rel=1e-6) and 256 - t512 < 1e-4
    assert t512 / 16 == pytest.approx(15.999998, abs=1e-6)


def test_ep_rank_reads_its_touched_experts_whole_the_same_bytes_as_tp():
    """Eq. 4.6: at TP 16, an EP 16 rank holds 16 experts whole and reads the (16/256) x E-hat(T) of
    them the step touches; at EP 1 it reads 1/16 of every touched expert. The same bytes per device
    (and the same FLOPs), decode, 4 sequences per micro-batch (T = 4): E-hat = 256 (1 - (31/32)^4)
    = 31.1 experts, 58 layers x 31.1 x 44,040,192 params x 1 B (fp8) / 16."""
    inst = load_instance("deepstack-deepseek-v3-ep")
    w = load_workload("deepseek-v3")
    pe = layer_weight_params(w).routed_expert
    assert pe == 3 * 7168 * 2048 == 44_040_192
    one = _features(inst, batch=4)
    sixteen = _features(inst, batch=4, ep=16)
    held = 256 / 16 * (1 - (31 / 32) ** 4)  # experts an EP rank holds that 4 tokens touch
    assert held * 16 == pytest.approx(float(expected_experts_touched(256, 8, 4)), rel=1e-14)
    for f in (one, sixteen):
        # routed bytes are one term of the weights: compare the whole at EP 1 and EP 16
        assert f["decode.bytes_weights_local"] == pytest.approx(one["decode.bytes_weights_local"], rel=1e-14)
        assert f["decode.flops"] == pytest.approx(one["decode.flops"], rel=1e-14)
    routed_dev = 58 * held * pe * 1.0  # EP 16: whole experts, 1 B per param
    assert routed_dev == pytest.approx(58 * float(expected_experts_touched(256, 8, 4)) * pe / 16, rel=1e-14)


def test_all_to_all_bytes_of_deepseek_v3_by_hand():
    a = network.expert_all_to_all(16, 8, 32 * 8, 7168 * 2)
    assert (float(a.scale_up_B), float(a.scale_out_B)) == (1_605_632, 1_835_008)
    assert (float(a.scale_up_steps), float(a.scale_out_steps)) == (0, 1)
    # inside one domain: ep = 8, (8-1)/8 of 256 x 14,336 B on scale-up, one scale-up latency
    b = network.expert_all_to_all(8, 8, 32 * 8, 7168 * 2)
    assert (float(b.scale_up_B), float(b.scale_out_B)) == (3_211_264, 0)
    assert (float(b.scale_up_steps), float(b.scale_out_steps)) == (1, 0)
    # ep = 1: nothing leaves the rank
    c = network.expert_all_to_all(1, 8, 32 * 8, 7168 * 2)
    assert float(c.scale_up_B + c.scale_out_B + c.scale_up_steps + c.scale_out_steps) == 0


def test_ep16_replaces_the_moe_all_reduce_by_dispatch_and_combine_over_scale_out():
    inst = load_instance("deepstack-deepseek-v3-ep")
    f1 = _features(inst)
    f16 = _features(inst, ep=16)
    assert f16["decode.bytes_scale_up"] - f1["decode.bytes_scale_up"] == -558_759_936
    assert f16["decode.bytes_scale_out"] - f1["decode.bytes_scale_out"] == 159_645_696
    assert f16["decode.steps_scale_up"] - f1["decode.steps_scale_up"] == -812
    assert f16["decode.steps_scale_out"] == f1["decode.steps_scale_out"]
    # the all-to-alls have no ring steps: 58 all-reduces x (14 + 2) fewer
    assert f1["decode.collective_steps"] - f16["decode.collective_steps"] == 58 * 16


def test_evaluate_ep1_and_ep16_differ_by_the_hand_derived_time():
    """tokens/s = 512 x DP 4 / TPOT; EP 16 adds 2.18824256 ms to each decode step (module doc)."""
    inst = load_instance("deepstack-deepseek-v3-ep")
    e1 = evaluate(inst, OPTIMUM)
    e16 = evaluate(inst, {**OPTIMUM, "ep": 16})
    dt = -558_759_936 / 400e9 + 159_645_696 / 40e9 - 812 * 500e-9
    assert dt == pytest.approx(2.18824256e-3, rel=1e-12)
    assert e16.metrics["decode_step_s"] - e1.metrics["decode_step_s"] == pytest.approx(dt, rel=1e-9)
    assert e16.metrics["tokens_per_s"] == pytest.approx(2048 / (2048 / e1.metrics["tokens_per_s"] + dt), rel=1e-12)
    assert e16.metrics["tokens_per_s"] < e1.metrics["tokens_per_s"]
    # energy: the scale-out bytes cost 5.5 pJ/bit against 0.3 on scale-up
    assert e16.metrics["energy_per_token_J"] > e1.metrics["energy_per_token_J"]


def test_ep_up_to_top_k_keeps_the_tp_collective():
    """At EP <= k an all-to-all would move k/EP >= 1 times the bytes of gathering every token on
    every rank (TensorRT-LLM enables its all-to-all only for moe_ep_size > experts_per_token), so
    EP 2-8 of a top-8 model keeps the TP all-reduce: the features equal EP 1's."""
    inst = load_instance("deepstack-deepseek-v3-ep")
    f1 = _features(inst)
    for ep in (2, 4, 8):
        fe = _features(inst, ep=ep)
        assert {k: fe[k] for k in f1} == f1


def test_hybrid_ep_keeps_an_all_reduce_over_the_ranks_that_share_an_expert():
    """Llama 4 Scout (48 layers, all MoE, hidden 5120, 16 experts, top-1) at TP 8, EP 2 on one
    domain of 8, 64 sequences, decode: M = 64 x 5120 x 2 = 655,360 B. Per MoE layer: the attention
    all-reduce over 8 (2 x 7/8 M = 1,146,880 B, 14 steps), an all-reduce over the moe_tp = 4 ranks
    of an expert of M/2 (2 x 3/4 x 327,680 = 491,520 B, 6 steps) and a dispatch and a combine over
    2: 32 tokens x 1 selection x 10,240 B x 1/2 = 163,840 B each, one latency. Against EP 1
    (two all-reduces over 8): 48 x (491,520 + 2 x 163,840 - 1,146,880) = -15,728,640 B."""
    from codesign.calibration.engine import row_instance
    from codesign.calibration.rows import Row

    def feats(ep: int, decide: bool | None = None) -> dict[str, float]:
        r = Row("s", "llama-4-scout", "h200-sxm", 8, 8, 1, ep, 1, "fp8", 1000, 1000, 64, "output_tokens_per_s", 1.0)
        raw = copy.deepcopy(row_instance(r, 64).raw)
        raw["workloads"][0]["decisions"].pop("ep_all_to_all", None)  # the measured engine's gather
        if decide is not None:
            raw["workloads"][0]["decisions"]["ep_all_to_all"] = [decide]
        t = schedule_table(instance_from_data(raw), "main")
        return {k: float(v[0]) for k, v in t.features.items()}

    f1, f2 = feats(1), feats(2)
    assert f2["decode.bytes_scale_up"] - f1["decode.bytes_scale_up"] == 48 * (491_520 + 2 * 163_840 - 1_146_880)
    assert f2["decode.bytes_scale_up"] - f1["decode.bytes_scale_up"] == -15_728_640
    assert f2["decode.steps_scale_up"] - f1["decode.steps_scale_up"] == 48 * (6 + 2 - 14)
    assert f2["decode.bytes_scale_out"] == f1["decode.bytes_scale_out"] == 0
    # the decision: true is the rule's choice here (2 > k = 1), false keeps EP 1's gather
    assert feats(2, True) == f2
    assert feats(2, False)["decode.bytes_scale_up"] == f1["decode.bytes_scale_up"]


def test_the_validation_rows_keep_the_engines_gather():
    """The measured engine (TensorRT-LLM 1.0 without multi-node NVLink) gathers the tokens: a row's
    instance fixes ep_all_to_all = false, and its features equal those of the same row at EP 1 but
    for nothing in the collectives."""
    from codesign.calibration.engine import row_instance
    from codesign.calibration.rows import Row

    r = Row("s", "llama-4-scout", "h200-sxm", 8, 8, 1, 2, 1, "fp8", 1000, 1000, 64, "output_tokens_per_s", 1.0)
    inst = row_instance(r, 64)
    assert inst.raw["workloads"][0]["decisions"]["ep_all_to_all"] == [False]
    r1 = Row(**{**r.__dict__, "ep": 1})
    f2 = {k: float(v[0]) for k, v in schedule_table(inst, "main").features.items()}
    f1 = {k: float(v[0]) for k, v in schedule_table(row_instance(r1, 64), "main").features.items()}
    assert f2 == f1


def test_an_all_to_all_needs_ep_above_one():
    from codesign.model.schedule import structural_reason

    w = load_workload("deepseek-v3")
    s = {"tp": 8, "pp": 1, "ep": 1, "batch": 64, "weights_tier": "local", "kv_tier": "local", "ep_all_to_all": True}
    assert "needs ep > 1" in structural_reason(w, None, 8, False, s, 8)
    assert structural_reason(w, None, 8, False, {**s, "ep": 8}, 8) is None


def test_moe_tp_group_strides_over_domains():
    """TP 16 = EP 4 x moe_tp 4 over domains of 8: the EP groups are 4 consecutive ranks, so an
    expert's 4 moe_tp ranks sit at stride 4, 2 in each of 2 domains: an all-reduce of M over them
    is 2 x 1/2 M on scale-up and 2 x 1/2 x M/2 on scale-out (eq. 3.17 with 8/4 members per domain)."""
    t = network.hierarchical_allreduce(4, max(8 / 4, 1.0), 1000.0)
    assert (float(t.scale_up_B), float(t.scale_out_B)) == (1000.0, 500.0)
    assert (float(t.scale_up_steps), float(t.scale_out_steps)) == (2, 2)


def test_balanced_all_to_all_equals_the_placement_models_dispatch():
    """The placement model (placement.md P5) with uniform routing and every device holding E/D
    experts is the balanced case: its dispatch time is that of eq. 3.16a per link class (placement
    takes the slower link class, the main model adds them)."""
    from codesign.kinds.placement.spec import load_placement, placement_from_data
    from codesign.kinds.registry import named_paths
    from codesign.model.placement import assess
    from codesign.model.placement_build import build_problem

    raw = copy.deepcopy(load_placement(str(named_paths()["tiny-placement-mixtral"])).spec.model_dump(
        mode="json", exclude_none=True))
    raw["routing"] = {"profile": "uniform"}
    pb = build_problem(placement_from_data(raw))
    a = assess(pb, np.array([[0, 0, 1, 1, 2, 2, 3, 3]]), 0.0, 0.0)
    # 4 devices in 2 domains of 2, 256 sequences: 64 tokens per device x top-2, 4096 x 2 B
    t = network.expert_all_to_all(4, 2, 64 * 2, 4096 * 2.0)
    assert pb.dispatch_B_per_selection == 64 * 4096 * 2.0
    want = max(float(t.scale_up_B) / pb.up_Bps, float(t.scale_out_B) / pb.out_Bps)
    assert a.dispatch_s[0] == pytest.approx(np.full(4, want), rel=1e-12)
