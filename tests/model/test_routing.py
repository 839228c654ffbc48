"""A grid workload's routing profile (model.md eqs. 2.14b, 4.6b), derived by hand.

Eight experts, top-2, relative weights 3, 3, 1, 1, 1, 1, 1, 1 (two hot experts, six cold):
Σw = 12, so one token holds a hot expert with p = 2 x 3/12 = 1/2 and a cold one with
p = 2 x 1/12 = 1/6 (Σp = 2 = k; no cap binds).

    one token      touches Σp = 2 experts (k, as under uniform routing)
    two tokens     q_hot = 1 - (1/2)^2 = 3/4, q_cold = 1 - (5/6)^2 = 11/36:
                   2 x 3/4 + 6 x 11/36 = 3/2 + 11/6 = 10/3 experts, against uniform
                   8 (1 - (3/4)^2) = 7/2 (a skewed router touches fewer)
    EP 4           round-robin: rank 0 holds experts 0 and 4 (one hot, one cold):
                   lam_tok = 4 (1/2 + 1/6) / 2 = 4/3; at two tokens
                   lam_B = 4 (3/4 + 11/36) / (10/3) = 19/15
                   contiguous: rank 0 holds 0 and 1 (both hot): lam_tok = 4 x 1 / 2 = 2,
                   lam_B = 4 x 3/2 / (10/3) = 9/5
    EP 2           round-robin: rank 0 holds 0, 2, 4, 6: lam_tok = 2 (1/2 + 3/6) / 2 = 1 (balanced)
                   contiguous: rank 0 holds 0-3: lam_tok = 2 (1 + 2/6) / 2 = 4/3

Mixtral 8x7B has exactly this shape (8 experts, top-2, 32 MoE layers, expert
P_e = 3 x 4096 x 14336 = 176,160,768 parameters, 1 B each in fp8).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from codesign.errors import InputError
from codesign.kinds.grid.spec import instance_from_data, load_instance
from codesign.model.routing import (
    RoutingSpec,
    busiest_rank_factors,
    experts_touched,
    token_probabilities,
)
from codesign.model.schedule import schedule_table
from codesign.model.workload import expected_experts_touched

TWO_LEVEL = RoutingSpec(profile="weights", weights=[3, 3, 1, 1, 1, 1, 1, 1])
CONTIGUOUS = RoutingSpec(profile="weights", weights=[3, 3, 1, 1, 1, 1, 1, 1], placement="contiguous")
P_E = 176_160_768  # Mixtral 8x7B: 3 x 4096 x 14336


def test_token_probabilities_of_two_levels():
    p = token_probabilities(TWO_LEVEL, 8, 2)
    assert p == pytest.approx([1 / 2] * 2 + [1 / 6] * 6, rel=1e-15)


def test_experts_touched_under_skew_by_hand():
    assert experts_touched(TWO_LEVEL, 8, 2, 1) == pytest.approx(2.0, rel=1e-15)
    assert experts_touched(TWO_LEVEL, 8, 2, 2) == pytest.approx(10 / 3, rel=1e-15)
    assert expected_experts_touched(8, 2, 2) == pytest.approx(7 / 2, rel=1e-15)
    # arrays broadcast; a device's half token is held to k t = 1
    assert experts_touched(TWO_LEVEL, 8, 2, np.array([1.0, 2.0, 0.5])) == pytest.approx([2, 10 / 3, 1], rel=1e-15)


def test_uniform_profile_is_eq_2_14_bit_for_bit():
    t = np.array([0.25, 1.0, 3.0, 32.0, 512.0])
    for r in (None, RoutingSpec(), RoutingSpec(profile="uniform", placement="contiguous")):
        assert np.array_equal(experts_touched(r, 256, 8, t), expected_experts_touched(256, 8, t))
        lt, lb = busiest_rank_factors(r, 256, 8, t, np.array([1, 2, 4, 8, 16]))
        assert np.array_equal(lt, np.ones(5)) and np.array_equal(lb, np.ones(5))


def test_busiest_rank_by_hand():
    lt, lb = busiest_rank_factors(TWO_LEVEL, 8, 2, np.array([2.0, 2.0, 2.0]), np.array([1, 2, 4]))
    assert lt == pytest.approx([1, 1, 4 / 3], rel=1e-14)
    assert lb == pytest.approx([1, 1, 19 / 15], rel=1e-14)
    lt, lb = busiest_rank_factors(CONTIGUOUS, 8, 2, np.array([2.0, 2.0]), np.array([2, 4]))
    assert lt == pytest.approx([4 / 3, 2], rel=1e-14)
    # EP 2 contiguous: rank 0 holds 0-3, 3/4 + 3/4 + 11/36 + 11/36 = 19/9 of 10/3: lam_B = 2 (19/9)/(10/3) = 19/15
    assert lb == pytest.approx([19 / 15, 9 / 5], rel=1e-14)


def test_weights_must_match_the_experts_and_be_stated_with_their_profile():
    with pytest.raises(InputError, match="one weight per routed expert"):
        token_probabilities(RoutingSpec(profile="weights", weights=[2, 1]), 8, 2)
    with pytest.raises(ValueError, match="exactly when"):
        RoutingSpec(profile="zipf", weights=[1, 1])
    with pytest.raises(ValueError, match="non-increasing"):
        RoutingSpec(profile="weights", weights=[1, 3])


def _mixtral(routing=None, **decisions):
    """Mixtral 8x7B decode on the 64 3D tiles of deepstack-deepseek-v3-ep, one schedule row."""
    raw = copy.deepcopy(load_instance("deepstack-deepseek-v3-ep").raw)
    w = raw["workloads"][0]
    w["workload"] = "mixtral-8x7b"
    w.pop("tpot_slo_ms", None)
    if routing is not None:
        w["routing"] = routing
    row = {"tp": 1, "pp": 1, "ep": 1, "batch": 2, **decisions}
    w["decisions"] = {k: [v] for k, v in row.items()}
    raw["baseline"] = {**raw["baseline"], **row}
    t = schedule_table(instance_from_data(raw), "main")
    return {k: float(v[0]) for k, v in t.features.items()}


def test_skew_moves_the_expert_bytes_by_hand():
    """TP 1, two sequences (T = 2): 32 layers x (10/3 - 7/2) x P_e x 1 B = -939,524,096 B."""
    uniform, skewed = _mixtral(), _mixtral({"profile": "weights", "weights": [3, 3, 1, 1, 1, 1, 1, 1]})
    assert skewed["decode.bytes_local"] - uniform["decode.bytes_local"] == pytest.approx(-939_524_096, rel=1e-9)
    assert skewed["decode.flops"] == uniform["decode.flops"]  # k experts per token either way
    # "uniform" stated equals no routing, every feature bit for bit
    assert _mixtral({"profile": "uniform"}) == uniform


def test_ep_waits_for_the_busiest_rank_by_hand():
    """TP 4 = EP 4 (> k = 2: all-to-all), T = 2, round-robin. FLOPs: uniform 2 x 2 x 32 x 2 x P_e / 4
    = 64 P_e per device, the busiest rank 4/3 of it: +64 P_e / 3. Expert bytes: uniform
    32 x 7/2 x P_e / 4 = 28 P_e; the busiest rank 32 x 10/3 x 19/15 x P_e / 4 = 304/9 P_e:
    +52/9 P_e. Dispatch and combine (2 per layer, 64 per step): a rank's 2/4 x 2 = 1 selection
    of 8,192 B, 3/4 of it to the 3 other ranks of the domain, the busiest receiving 4/3 of that:
    64 x 6,144 x (4/3 - 1) = +131,072 B on scale-up."""
    weights = {"profile": "weights", "weights": [3, 3, 1, 1, 1, 1, 1, 1]}
    uniform, skewed = _mixtral(tp=4, ep=4), _mixtral(weights, tp=4, ep=4)
    assert skewed["decode.flops"] - uniform["decode.flops"] == pytest.approx(64 * P_E / 3, rel=1e-12)
    assert skewed["decode.bytes_local"] - uniform["decode.bytes_local"] == pytest.approx(52 / 9 * P_E, rel=1e-9)
    assert skewed["decode.bytes_scale_up"] - uniform["decode.bytes_scale_up"] == pytest.approx(131_072, rel=1e-12)


def test_routing_on_a_dense_workload_is_refused():
    raw = copy.deepcopy(load_instance("deepstack-deepseek-v3-ep").raw)
    raw["workloads"][0].update(workload="llama-3.1-8b", routing={"profile": "zipf"})
    raw["workloads"][0]["decisions"] = {"tp": [1], "ep": [1], "batch": [16]}
    raw["baseline"] = {**raw["baseline"], "tp": 1, "pp": 1, "ep": 1, "batch": 16}
    with pytest.raises(InputError, match="mixture-of-experts"):
        schedule_table(instance_from_data(raw), "main")
