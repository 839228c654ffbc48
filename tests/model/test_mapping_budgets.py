"""codesign.model.mapping_budgets: budgets on a mapping's metrics, as the model judges them.

Expected values by hand from the model's own definitions (tokens/s = m / T, tpot = D·T, energy
per token as evaluate_mapping states it)."""

from __future__ import annotations

import pytest

from codesign.errors import InputError
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.mapping.spec import mapping_from_data
from codesign.model.mapping import MappingDesign, evaluate_mapping
from codesign.model.mapping_budgets import parse_mapping_budget
from codesign.model.mapping_build import build_problem

SMALL = dict(devices=2, modules=0, layers=4, batch_per_stage=32, weights=("local",), kv=("local",))
DESIGN = MappingDesign((3, 1), ("local",) * 4, ("local",) * 4, ((), ()))


def parse(text):
    return parse_mapping_budget(text, name="b", source="test")


def test_the_metrics_and_the_limits_a_mapping_budget_takes():
    assert parse("energy_per_token_J <= 0.5").coefs == (("energy_per_token_J", 1.0),)
    # tokens/s >= 1000 is time per token <= 1/1000
    b = parse("tokens_per_s >= 1000")
    assert b.coefs == (("time_per_token_s", 1.0),) and b.rhs == pytest.approx(1e-3, rel=1e-15)
    b = parse("2*tpot_s + 1000*energy_per_token_J <= 3")
    assert dict(b.coefs) == {"tpot_s": 2.0, "energy_per_token_J": 1000.0} and b.rhs == 3.0


@pytest.mark.parametrize(("text", "why"), [
    ("power_W <= 100", "no metric of a mapping"),
    ("energy_per_token_J >= 0.1", "upper limit"),
    ("tpot_s - energy_per_token_J <= 1", "upper limit"),
    ("tokens_per_s <= 1000", "lower limit on tokens_per_s"),
    ("ttft_s <= 1", "no metric of a mapping"),
])
def test_what_a_mapping_budget_refuses(text, why):
    with pytest.raises(InputError, match=why):
        parse(text)


def test_a_budget_is_judged_on_the_designs_metrics():
    """Just above a design's energy per token and tpot the budgets hold; just below, the design is
    infeasible and the violation names the budget."""
    base = generate_mapping(**SMALL)
    ev = evaluate_mapping(build_problem(mapping_from_data(base)), DESIGN)
    e, tpot, tps = ev.energy_per_token_J, ev.tpot_s, ev.tokens_per_s
    assert tpot == pytest.approx(2 * 32 / tps, rel=1e-12)

    def judged(*exprs):
        raw = {**base, "budgets": {"custom": [{"name": f"b{i}", "expr": x} for i, x in enumerate(exprs)]}}
        return evaluate_mapping(build_problem(mapping_from_data(raw)), DESIGN)

    assert judged(f"energy_per_token_J <= {e * (1 + 1e-6)!r}", f"tokens_per_s >= {tps * (1 - 1e-6)!r}").feasible
    low = judged(f"energy_per_token_J <= {e * (1 - 1e-6)!r}")
    assert not low.feasible and low.violations[0].startswith("budget b0 (energy_per_token_J <=")
    assert not judged(f"tokens_per_s >= {tps * (1 + 1e-6)!r}").feasible
    both = tpot + 10 * e
    assert judged(f"tpot_s + 10*energy_per_token_J <= {both * (1 + 1e-6)!r}").feasible
    assert not judged(f"tpot_s + 10*energy_per_token_J <= {both * (1 - 1e-6)!r}").feasible

def test_a_malformed_budget_in_a_file_is_bad_input():
    raw = {**generate_mapping(**SMALL), "budgets": {"custom": [{"name": "hot", "expr": "power_W <= 700"}]}}
    with pytest.raises(InputError, match="no metric of a mapping"):
        mapping_from_data(raw)
