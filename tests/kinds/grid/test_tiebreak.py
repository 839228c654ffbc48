"""codesign.kinds.grid.tiebreak: the least hardware metric over the feasible designs, against every
design of tiny-3d-llama8b (432) evaluated by the model."""

from __future__ import annotations

import itertools

import pytest

from codesign.kinds.grid.tiebreak import NotApplicable, least_hardware_metric

#: throughput budgets: None, a binding one, one no design meets (no design's tokens/s is near either)
BUDGETS = (None, 1200.0, 1e9)
METRICS = ("power_W", "area_mm2", "system_power_W", "dram_layers")


def measured(a, metric):
    return a.design[metric] if metric == "dram_layers" else a.metrics[metric]


@pytest.fixture(scope="module")
def feasible(named):
    """budget -> the model's assessment of every design feasible without it that meets it."""
    p = named("tiny-3d-llama8b")
    decs = p.decisions()
    designs = [p.parse_design(dict(zip([d.name for d in decs], v, strict=True)))
               for v in itertools.product(*(d.domain for d in decs))]
    ok = [a for a in map(p.assess, designs) if a.feasible]
    return {b: [a for a in ok if b is None or a.metrics["tokens_per_s"] >= b] for b in BUDGETS}


@pytest.mark.parametrize("budget", BUDGETS)
def test_the_least_metric_is_the_enumerated_one(budget, named, feasible):
    p = named("tiny-3d-llama8b")
    if budget:
        p = p.with_budgets([f"tokens_per_s >= {budget!r}"])
    for metric in METRICS:
        got = least_hardware_metric(p, metric)
        if not feasible[budget]:
            assert got is None
            continue
        assert got is not None and got.feasible
        assert measured(got, metric) == min(measured(a, metric) for a in feasible[budget])


def test_a_workload_metric_is_not_applicable(named):
    with pytest.raises(NotApplicable):
        least_hardware_metric(named("tiny-3d-llama8b"), "energy_per_token_J")
