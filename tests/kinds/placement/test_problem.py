"""codesign.kinds.placement.problem: the placement kind behind the Problem protocol."""

from __future__ import annotations

import math

import pytest

from codesign.errors import InputError
from codesign.kinds.placement.problem import Placement

TINY = "tiny-placement-mixtral"


@pytest.fixture(scope="module")
def tiny(named):
    return named(TINY)


def test_the_question(tiny):
    assert tiny.kind == "placement" and tiny.metric == "tokens_per_s" and tiny.sense == "max"
    assert [d.name for d in tiny.decisions()] == ["experts", "groups"]
    assert tiny.space_size() == 4**8 * math.factorial(4) // 2**2  # ordered groups of 2


def test_without_a_baseline_in_the_file_experts_go_round_robin(tiny):
    """Expert e on device e mod 4; TP groups of consecutive devices."""
    assert tiny.baseline_description == Placement.baseline_rule
    assert tiny.baseline() == {"experts": [0, 1, 2, 3, 0, 1, 2, 3], "groups": [[0, 1], [2, 3]]}
    assert tiny.assess(tiny.baseline()).feasible


def test_assess_states_the_headline_metrics_by_their_definitions(tiny):
    a = tiny.assess(tiny.baseline())
    m = a.metrics
    batch = tiny.model.batch
    assert m["tokens_per_s"] == pytest.approx(batch / m["step_s"], rel=1e-12)
    assert m["system_power_W"] == pytest.approx(m["energy_per_token_J"] * m["tokens_per_s"], rel=1e-12)
    assert a.internal == m["step_s"] and tiny.to_user(a.internal) == pytest.approx(a.objective, rel=1e-12)
    assert f"tokens/s = {batch} / it" in tiny.internal_description


OUTSIDE = [
    {"experts": [0, 1, 2, 3, 0, 1, 2, 9], "groups": [[0, 1], [2, 3]]},  # no device 9
    {"experts": [0, 1, 2, 3, 0, 1, 2, 3], "groups": [[0, 1], [1, 3]]},  # device 1 twice, 2 never
    {"experts": [0, 1, 2, 3, 0, 1, 2], "groups": [[0, 1], [2, 3]]},  # 7 of 8 experts
]


@pytest.mark.parametrize("design", OUTSIDE)
def test_a_design_outside_the_space_is_bad_input(design, tiny):
    with pytest.raises(InputError):
        tiny.assess(tiny.parse_design(design))


@pytest.mark.parametrize("design", OUTSIDE[:2])
def test_parse_design_refuses_a_design_outside_the_space(design, tiny):
    with pytest.raises(InputError):
        tiny.parse_design(design)


def test_a_partial_design_keeps_the_baselines_other_decisions(tiny):
    assert tiny.parse_design({"experts": [0, 0, 1, 1, 2, 2, 3, 3]}) == {
        "experts": [0, 0, 1, 1, 2, 2, 3, 3], "groups": [[0, 1], [2, 3]]}


def test_budgets_and_objectives_are_the_files(tiny):
    with pytest.raises(InputError, match="--budget does not apply"):
        tiny.with_budgets(["power_W <= 1"])
    with pytest.raises(InputError, match="--objective does not apply"):
        tiny.with_objective("energy_per_token_J")


def test_the_summary(tiny):
    s = tiny.summary()
    assert isinstance(s, dict) and s
