"""codesign.model.placement: the expert- and TP-group-placement model's pieces, derived by hand
(routing probabilities, Zipf levels, dispatch and all-reduce times, per-device capacity, expert
activations, the engine's decoding state, the space's size)."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest

from codesign.errors import InputError
from codesign.kinds.placement.spec import load_placement, placement_from_data
from codesign.kinds.registry import named_paths
from codesign.model.calibration import shipped
from codesign.model.placement import assess, pattern_cost, space_size
from codesign.model.placement_build import build_problem
from codesign.model.routing import routing_probabilities, zipf_weights
from codesign.model.workload import expected_experts_touched, load_workload

TINY = str(named_paths()["tiny-placement-mixtral"])


def tiny_raw() -> dict:
    return copy.deepcopy(load_placement(TINY).spec.model_dump(mode="json", exclude_none=True))


def with_engine(engine: str | None) -> dict:
    raw = tiny_raw()
    raw.pop("system", None)
    if engine is not None:
        raw["system"] = {"engine": engine}
    return raw


def test_every_rank_holds_its_groups_decoding_state_only_under_an_engine_that_keeps_one():
    """model.md eq. 4.14b in the placement model: under trtllm-1.x-all-to-all (TensorRT-LLM's
    decoding state, the EP all-to-all) the tiny instance's 256 Mixtral sequences over two TP-2
    groups put 128 slots on each rank, each slot 4 fp32 rows of the 32,000-entry vocabulary (padded
    to a multiple of TP 2: itself), 1 int32 row, 64 KiB of top-K scratch and 10 x 4 B x 2,048
    tokens = 787,456 B. No engine (the physics) keeps none."""
    physics = build_problem(placement_from_data(with_engine(None)))
    trtllm = build_problem(placement_from_data(with_engine("trtllm-1.x-all-to-all")))
    per_slot = 4 * 32_000 * 4 + 32_000 * 4 + 65_536 + 40 * 2048
    assert per_slot == 787_456
    assert trtllm.fixed_store_B - physics.fixed_store_B == 128 * per_slot == 100_794_368
    assert trtllm.fixed_time_s == physics.fixed_time_s  # fp8 weights: an fp8 KV cache under both


def test_an_engine_that_gathers_the_tokens_or_cannot_run_a_groups_batch_is_refused():
    """trtllm-0.14 dispatches MoE tokens by gather (every rank gets every token), which the
    placement model, built on the all-to-all (P5), does not price; vllm runs at most 1,024
    sequences per executor on an H100: a TP group of 2,048 (4,096 over two groups) is refused."""
    with pytest.raises(InputError, match="gathers every token") as e:
        build_problem(placement_from_data(with_engine("trtllm-0.14")))
    assert e.value.key == "system.engine"
    raw = with_engine("vllm")
    raw["workload"]["batch"] = 4096
    with pytest.raises(InputError, match="max_batch_size = 1024 sequences per executor"):
        build_problem(placement_from_data(raw))
    raw["workload"]["batch"] = 2048
    assert build_problem(placement_from_data(raw)).batch == 2048


def test_an_unknown_engine_is_refused_as_the_grid_refuses_it():
    with pytest.raises(InputError, match="unknown engine 'trtllm-9'") as e:
        placement_from_data(with_engine("trtllm-9"), source="x.toml")
    assert (e.value.file, e.value.key) == ("x.toml", "system.engine")


def test_routing_probabilities_cap_and_sum():
    # k = 2 of 4 experts, weights 10:1:1:1: 2·10/13 > 1 -> capped at 1, the other 1 spread evenly
    p = routing_probabilities(np.array([10.0, 1, 1, 1]), 2)
    assert p == pytest.approx([1.0, 1 / 3, 1 / 3, 1 / 3])
    p = routing_probabilities(np.array([2.0, 1, 1]), 2)
    assert p == pytest.approx([1.0, 0.5, 0.5])
    assert routing_probabilities(np.ones(8), 2) == pytest.approx(np.full(8, 0.25))


def test_zipf_levels_are_log_binned_means():
    w = zipf_weights(16, 1.0, levels=2)  # edges 0, round(16^0.5) = 4, 16
    assert w[:4] == pytest.approx(np.full(4, (1 + 1 / 2 + 1 / 3 + 1 / 4) / 4))
    assert w[4:] == pytest.approx(np.full(12, sum(1 / r for r in range(5, 17)) / 12))
    assert len(set(zipf_weights(256, 0.5, levels=4).tolist())) == 4


def test_uniform_touch_probability_matches_workload_model():
    raw = tiny_raw()
    raw["routing"] = {"profile": "uniform"}
    raw["workload"]["batch"] = 4
    pb = build_problem(placement_from_data(raw))
    assert pb.q.sum() == pytest.approx(float(expected_experts_touched(8, 2, 4)), rel=1e-12)
    assert len(pb.classes) == 1


def test_dispatch_and_allreduce_by_hand():
    """Experts 0-3 on device 0, 4-7 on device 1 (domain 0), uniform routing: P = [1, 1, 0, 0]."""
    raw = tiny_raw()
    raw["routing"] = {"profile": "uniform"}
    pb = build_problem(placement_from_data(raw))
    A = np.array([[0, 0, 0, 0, 1, 1, 1, 1]])
    a = assess(pb, A, 0.0, 0.0)
    tau, h = 256 / 4, 4096
    per = tau * h * 2.0  # bytes per unit of load, bf16 dispatch
    up, out = pb.up_Bps, pb.out_Bps
    # device 0: receives (S-1)·per·1 over NVLink and (D-S)·per·1 = 2·per over IB; its domain's
    # load is 2 = k, so it sends nothing out; it sends per·(P_K - P_d) = per to device 1
    assert a.dispatch_s[0, 0] == pytest.approx(max(per / up, 2 * per / out))
    # device 2 (other domain, no experts): sends per·k = 2·per over IB, receives nothing
    assert a.dispatch_s[0, 2] == pytest.approx(2 * per / out)
    # TP communication of a step (eq. P8a): 4 all-reduces (one per attention block; 4 MoE layers,
    # no dense MLP) of M = 128 sequences x 4096 x 2 B = 1,048,576 B and the logits all-gather of
    # M_lg = 128 x 32000 x 2 B = 8,192,000 B, which costs half an all-reduce of M_lg on every
    # pattern: 4.5 all-reduce equivalents of M_eff = (4 M + M_lg / 2) / 4.5 = 1,842,289.78 B
    M = (256 / 2) * h * 2.0
    M_lg = (256 / 2) * 32000 * 2.0
    assert (M, M_lg) == (1_048_576, 8_192_000)
    assert pb.allreduces == 4 and pb.tp_calls == 4.5
    M_eff = (4 * M + 0.5 * M_lg) / 4.5
    assert pb.tp_message_B == pytest.approx(M_eff) and M_eff == pytest.approx(1_842_289.78, abs=0.01)
    # a ring step's latency: NVLink 4's 500 ns plus the H100's software step latency (model.md 3.13d)
    step_us = shipped().for_chip("h100-sxm").collective_step_latency_us
    assert step_us > 0 and pb.up_latency_s == pytest.approx(500e-9 + step_us * 1e-6, rel=1e-12)
    # a TP group of 2 inside a domain: ring all-reduce 2(t-1)/t·M over NVLink + 2(t-1) latencies
    t_in, e_in = pattern_cost(pb, (2, 0))
    assert t_in == pytest.approx(M_eff / up + 2 * pb.up_latency_s)
    assert e_in == pytest.approx(2 * M_eff * pb.J_per_B_up)
    # = 4 all-reduces of M + an all-gather of M_lg ((t-1)/t·M_lg bytes, t-1 latencies)
    assert 4.5 * t_in == pytest.approx(4 * (M / up + 2 * pb.up_latency_s) + (M_lg / 2 / up + pb.up_latency_s))
    # split 1 + 1: no intra phase; all-reduce across 2 parts of the full message over IB
    t_x, e_x = pattern_cost(pb, (1, 1))
    assert t_x == pytest.approx(M_eff / out + 2 * pb.out_latency_s)
    assert e_x == pytest.approx(2 * M_eff * pb.J_per_B_out)
    assert pb.J_per_B_up == pytest.approx(50 * 8e-12) and pb.J_per_B_out == pytest.approx(165 * 8e-12)


def test_a_tp_group_the_switch_would_reduce_is_refused():
    """Placement prices every TP all-reduce as a ring (eq. P8); on H100 (NVSwitch with SHARP) a
    group of 5 or more would be reduced in the switch by the step model (model.md eq. 3.17a), so
    placement refuses it with a clear message instead of pricing it differently."""
    raw = copy.deepcopy(load_placement(TINY).spec.model_dump(mode="json", exclude_none=True))
    raw["devices"].update(count=8, domains=[8], tp=8)
    with pytest.raises(InputError) as exc:
        build_problem(placement_from_data(raw))
    assert exc.value.key == "devices.tp" and "tp <= 4" in exc.value.expected


def test_capacity_per_device_by_hand():
    pb = build_problem(load_placement(TINY))
    w = load_workload("mixtral-8x7b")
    expert = 3 * w.hidden_size * w.moe.expert_ffn_hidden_size  # gated: gate, up, down; fp8 = 1 B
    assert pb.expert_store_B == pytest.approx(4 * expert)  # 4 MoE layers
    assert pb.capacity_B == pytest.approx((80 - shipped().for_chip("h100-sxm").runtime_reserve_GiB) * 2**30)


def test_expert_activations_by_hand():
    """One token through one routed Mixtral expert (gated, width 14336) moves 6 x 14336 activation
    elements at 2 B (model.md eq. 2.15k): 172,032 B; the expert phase's memory stream of a device
    adds that per selection it serves (eq. P4a)."""
    # the streams made to add (sigma = 0), so that the memory stream's share shows whole
    pb = dataclasses.replace(build_problem(load_placement(TINY)), sigma=0.0)
    assert pb.act_per_selection_B == 2 * 6 * 14336 == 172_032
    A = np.array([[0, 0, 0, 0, 1, 1, 1, 1]])
    a = assess(pb, A, 0.0, 0.0)
    load = a.load[0, 0]
    no_act = dataclasses.replace(pb, act_per_selection_B=0.0)
    b = assess(no_act, A, 0.0, 0.0)
    assert a.expert_s[0, 0] - b.expert_s[0, 0] == pytest.approx(pb.s_per_B * 172_032 * pb.batch * load)


def test_space_size_counts_experts_and_groups():
    pb = build_problem(load_placement(TINY))
    assert space_size(pb) == 4**8 * math.factorial(4) // 2**2
