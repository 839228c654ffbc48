"""codesign.kinds.grid.problem: the hardware/schedule kind behind the Problem protocol."""

from __future__ import annotations

import copy

import pytest

from codesign.errors import InputError
from codesign.kinds.base import HEADLINE_METRICS
from codesign.kinds.grid.problem import Grid
from codesign.model.evaluate import evaluate

TINY = "tiny-3d-llama8b"


@pytest.fixture(scope="module")
def tiny(named):
    return named(TINY)


def test_the_question(tiny):
    assert tiny.kind == "grid" and tiny.metric == "tokens_per_s" and tiny.sense == "max"
    decisions = {d.name: d.domain for d in tiny.decisions()}
    assert decisions["dram_layers"] == (2, 4, 8) and decisions["tp"] == (1, 2, 4)
    assert tiny.space_size() == 432
    base = tiny.baseline()
    assert set(base) == set(decisions) and all(base[k] in decisions[k] for k in base)


def test_assess_is_the_models_evaluation(tiny):
    design = {**tiny.baseline(), "tp": 2, "batch": 128}
    a = tiny.assess(tiny.parse_design(design))
    ev = evaluate(tiny.inst, design)
    assert a.feasible == ev.feasible and a.objective == ev.objective and a.internal == ev.internal_objective
    assert set(HEADLINE_METRICS) <= set(a.metrics)
    assert a.metrics["tokens_per_s"] == a.objective
    assert [r.name for r in a.audit] == [r.name for r in ev.audit]
    assert a.headline()["tokens_per_s"] == a.objective


def test_a_violation_names_the_constraint_and_its_numbers(tiny):
    a = tiny.assess(tiny.parse_design({"dram_layers": 2, "tp": 1, "batch": 128}))
    assert not a.feasible
    (v,) = a.violations
    assert v.startswith("memory-capacity-local[main]: ") and " > " in v and v.endswith(" B")


def test_a_multi_workload_record_lists_each_workloads_headline(named):
    p = named("deepstack-multi-workload")
    a = p.assess(p.baseline())
    names = [w["name"] for w in p.data["workloads"]]
    for w in names:
        for k in ("tokens_per_s", "tpot_s", "energy_per_token_J"):
            assert f"{w}.{k}" in a.metrics


def test_data_loads_back_as_the_same_problem(tiny):
    again = Grid.from_data(tiny.data, source="copy")
    assert again.content_hash == tiny.content_hash
    assert again.baseline() == tiny.baseline()


def test_the_content_hash_ignores_what_is_for_people(tiny):
    raw = copy.deepcopy(tiny.data)
    raw["description"] = "another description"
    raw["baseline"] = {"tp": 1}
    assert Grid.from_data(raw, source="x").content_hash == tiny.content_hash
    raw["budgets"]["area_mm2"] = 199.0
    assert Grid.from_data(raw, source="x").content_hash != tiny.content_hash


def test_budgets_and_objective_variants(tiny):
    assert tiny.with_budgets([]) is tiny and tiny.with_objective(None) is tiny
    capped = tiny.with_budgets(["power_W <= 60"])
    assert capped.budget_texts() == ["power_W <= 60"] and tiny.budget_texts() == []
    assert capped.content_hash != tiny.content_hash
    assert capped.calibration is tiny.calibration
    energy = tiny.with_objective("energy_per_token_J")
    assert energy.metric == "energy_per_token_J" and energy.sense == "min"
    with pytest.raises(InputError):
        tiny.with_objective("joules")
    with pytest.raises(InputError):
        tiny.with_budgets(["powr_W <= 60"])


def test_the_internal_objective_is_described(named):
    assert "tokens/s = 1 / it" in named(TINY).internal_description
    energy = named(TINY).with_objective("energy_per_token_J")
    assert "energy_per_token_J = it / 1" in energy.internal_description


def test_the_lints_and_the_summary(named):
    p = named("pf-llama405b-paper")
    assert {x.code for x in p.lints()} >= {"pooled-bandwidth-exceeds-ports", "pooled-bandwidth-exceeds-switch"}
    assert all(x.severity in ("error", "warning") for x in p.lints())
    s = named(TINY).summary()
    assert set(s) == {"workloads", "system", "hardware", "budgets"}
    assert s["budgets"]["area_mm2"] == 200.0
