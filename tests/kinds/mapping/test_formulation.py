"""codesign.kinds.mapping.formulation: the mapping MIP, its decoding, the greedy design and the
period cap it starts from."""

from __future__ import annotations

import pytest

from codesign.backends import solve as backend
from codesign.kinds.mapping.brute import brute_force_mapping
from codesign.kinds.mapping.formulation import build_mapping, greedy_design, time_cap_s
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.mapping.spec import mapping_from_data
from codesign.model.mapping import evaluate_mapping
from codesign.model.mapping_build import build_problem
from codesign.proof.tolerances import OBJECTIVE_RTOL


def problem(**kw):
    return build_problem(mapping_from_data(generate_mapping(**kw)))


def test_the_greedy_design_by_hand():
    """5 layers over 2 stages: 3 + 2; each device attaches to its own module (1 port, 2 modules);
    every layer's weights and KV cache fit the H100's local memory, the first allowed tier."""
    p = problem(devices=2, modules=2, layers=5, ports=1, workload="llama-3.1-8b", weights=("local", "pool"),
                kv=("local", "pool"))
    d = greedy_design(p)
    assert d.layers_per_stage == (3, 2)
    assert d.attach == ((0,), (1,))
    assert d.weights == ("local",) * 5 and d.kv == ("local",) * 5
    assert evaluate_mapping(p, d).feasible


def test_the_period_cap_keeps_the_optimum():
    """The MIP's period is capped at the greedy design's (x 1 + 1e-6): the optimum is never
    slower, so brute force's best lies under the cap."""
    p = problem(devices=2, modules=2, layers=3, ports=1, host_GiB=16, batch_per_stage=32,
                weights=("local", "host", "pool"), kv=("local", "host", "pool"))
    bf = brute_force_mapping(p)
    best = evaluate_mapping(p, bf.design)
    assert best.period_s <= time_cap_s(p)
    assert time_cap_s(p) <= evaluate_mapping(p, greedy_design(p)).period_s * (1 + 1e-6)


@pytest.mark.parametrize("objective", ["tokens_per_s", "energy_per_token_J"])
def test_the_mip_objective_of_a_decoded_design_is_the_models(objective):
    p = problem(devices=3, modules=2, layers=4, ports=1, host_GiB=16, objective=objective,
                weights=("local", "host", "pool"), kv=("local", "pool"))
    mm = build_mapping(p)
    res = backend(mm.mip, "highs", mip_rel_gap=0.0, mip_abs_gap=0.0)
    assert res.status == "optimal"
    ev = evaluate_mapping(p, mm.decode(res.x))
    assert ev.feasible
    internal = ev.period_s if objective == "tokens_per_s" else ev.energy_per_token_J
    assert res.objective * mm.objective_unit == pytest.approx(internal, rel=OBJECTIVE_RTOL)


def test_decoding_reads_counts_as_per_layer_tiers():
    """A decoded design has one tier per layer, stages in order, and attachments within the
    devices' ports."""
    p = problem(devices=2, modules=2, layers=4, ports=1, weights=("local", "pool"), kv=("local", "pool"))
    mm = build_mapping(p)
    res = backend(mm.mip, "highs")
    d = mm.decode(res.x)
    assert sum(d.layers_per_stage) == 4 and all(n >= 1 for n in d.layers_per_stage)
    assert len(d.weights) == len(d.kv) == 4
    assert all(len(a) <= 1 for a in d.attach)
