"""codesign.kinds.mapping.problem: the mapping kind behind the Problem protocol — its question,
baseline, assessment, and the explanation of an infeasible mapping."""

from __future__ import annotations

import pytest

from codesign.errors import InputError
from codesign.kinds.base import HEADLINE_METRICS
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.mapping.problem import Mapping
from codesign.proof.driver import solve

TINY = "tiny-pf-mapping"


@pytest.fixture(scope="module")
def tiny(named):
    return named(TINY)


def test_the_question(tiny):
    assert tiny.kind == "mapping" and tiny.metric == "tokens_per_s" and tiny.sense == "max"
    assert [d.name for d in tiny.decisions()] == ["layers_per_stage", "weights", "kv", "attach"]
    assert "4 layers in 2 contiguous stages" in tiny.decisions()[0].domain


def test_without_a_baseline_in_the_file_the_baseline_is_the_greedy_design(tiny):
    """tiny-pf-mapping gives no [baseline]: 2 + 2 layers, each device on its own module (1 port,
    2 modules), every layer local (405B's 4 layers fit an H100)."""
    assert tiny.baseline_description == Mapping.baseline_rule
    assert tiny.baseline() == {"layers_per_stage": [2, 2], "weights": ["local"] * 4, "kv": ["local"] * 4,
                               "attach": [[0], [1]]}
    assert tiny.assess(tiny.baseline()).feasible


def test_a_baseline_in_the_file_is_kept(named):
    p = named("pf-llama405b-mapping")
    assert p.baseline_description == "the instance's [baseline]"
    assert p.baseline() == p.inst.spec.baseline


def test_assess_states_the_headline_metrics_by_their_definitions(tiny):
    a = tiny.assess(tiny.baseline())
    m = a.metrics
    assert set(HEADLINE_METRICS) - {"ttft_s"} <= set(m)  # a decode-only mapping has no TTFT
    micro_batch, stages = tiny.model.micro_batch, tiny.model.stages
    assert m["tokens_per_s"] == pytest.approx(micro_batch / m["period_s"], rel=1e-12)
    assert m["tpot_s"] == pytest.approx(stages * m["period_s"], rel=1e-12)
    assert m["system_power_W"] == pytest.approx(m["energy_per_token_J"] * m["tokens_per_s"], rel=1e-12)
    assert a.internal == m["period_s"] and a.objective == m["tokens_per_s"]
    assert tiny.to_user(a.internal) == pytest.approx(a.objective, rel=1e-12)
    assert "tokens/s = 32 / it" in tiny.internal_description


def test_a_design_outside_the_space_is_bad_input(tiny):
    bad = {"layers_per_stage": [2, 2], "weights": ["local"] * 4, "kv": ["local", "locale", "local", "local"],
           "attach": [[], []]}
    with pytest.raises(InputError, match="local"):
        tiny.parse_design(bad)
    with pytest.raises(InputError, match="unknown keys"):
        tiny.parse_design({**tiny.baseline(), "stages": [2, 2]})
    with pytest.raises(InputError, match="4 tier names"):
        tiny.parse_design({**tiny.baseline(), "weights": ["local"] * 3})


def test_stages_that_do_not_cover_the_layers_are_infeasible(tiny):
    a = tiny.assess(tiny.parse_design({**tiny.baseline(), "layers_per_stage": [3, 2]}))
    assert not a.feasible and a.violations == ("layers_per_stage sums to 5, the model has 4 layers",)


def test_a_partial_design_keeps_the_baselines_other_decisions(tiny):
    d = tiny.parse_design({"layers_per_stage": [1, 3]})
    assert d == {**tiny.baseline(), "layers_per_stage": [1, 3]}


def test_an_infeasible_tpot_budget_is_explained_with_the_least_tpot():
    """The least tpot any design reaches is D x the least period = D x (m / best tokens/s)."""
    tight = Mapping.from_data(generate_mapping(devices=2, modules=2, layers=3, tpot_s=1e-4, objective="energy_per_token_J"),
                              source="tight")
    loose = Mapping.from_data(generate_mapping(devices=2, modules=2, layers=3), source="loose")
    best = solve(loose)
    assert solve(tight).status == "infeasible"
    e = tight.explain(solver="highs", time_limit=None)
    (c,) = e["conflicts"]
    assert e["feasible"] is False and c["name"] == "budgets.tpot_s"
    assert c["least_feasible_value"] == pytest.approx(2 * 16 / best.objective, rel=1e-9)


def test_memory_that_cannot_hold_the_model_is_explained():
    """2 H100s cannot hold 405B's 126 layers with weights local only."""
    full = Mapping.from_data(generate_mapping(devices=2, modules=0, weights=("local",), kv=("local",)), source="full")
    assert solve(full).status == "infeasible"
    (c,) = full.explain(solver="highs", time_limit=None)["conflicts"]
    assert c["name"] == "memory capacity" and "GiB" in c["message"]


def test_budgets_and_objectives_vary_the_question(tiny):
    assert tiny.with_budgets([]) is tiny and tiny.with_objective(None) is tiny
    energy = tiny.with_objective("energy_per_token_J").with_budgets(["tokens_per_s >= 7000"])
    assert energy.metric == "energy_per_token_J" and energy.sense == "min"
    assert energy.budget_texts() == ["tokens_per_s >= 7000"] and tiny.budget_texts() == []
    assert energy.content_hash != tiny.content_hash
    with pytest.raises(InputError, match="no metric of a mapping"):
        tiny.with_budgets(["power_W <= 1"])
    with pytest.raises(InputError, match="not an objective of mapping instances"):
        tiny.with_objective("tpot_s")


#: 2 devices, 1 module, 4 layers, a host tier: 248,832 designs, brute force in a second
SMALL = dict(devices=2, modules=1, layers=4, ports=1, host_GiB=16, weights=("local", "host", "pool"), kv=("local", "pool"))


@pytest.mark.parametrize("solver", ["highs", "cpsat"])
@pytest.mark.parametrize(("objective", "budget"), [
    ("tokens_per_s", "energy_per_token_J <= 0.105"),
    ("energy_per_token_J", "tokens_per_s >= 3850"),
    ("tokens_per_s", "tpot_s + 10*energy_per_token_J <= 1.1"),
])
def test_a_budgeted_optimum_is_the_brute_force_one(objective, budget, solver, brute):
    """The budget binds (the optimum without it breaks it), and the solve equals the enumeration."""
    free = Mapping.from_data(generate_mapping(**SMALL), source="test").with_objective(objective)
    p = free.with_budgets([budget])
    ref = brute(p).best
    assert ref is not None and ref.feasible
    assert not p.assess(brute(free).best.design).feasible
    sol = solve(p, solver=solver)
    assert sol.status == "optimal"
    assert sol.objective == pytest.approx(ref.objective, rel=1e-9)


def test_the_summary_and_the_lints(named, tiny):
    s = tiny.summary()
    assert s["layers"] == 4 and s["micro_batch"] == 32 and s["modules"] == 2
    codes = {x.code for x in named("pf-llama405b-mapping-paper").lints()}
    assert {"pool-bandwidth-exceeds-ports", "pool-bandwidth-exceeds-switch"} <= codes
