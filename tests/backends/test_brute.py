"""codesign.backends.brute (``--solver brute``): the enumeration each kind's exactness tests use,
as a backend of the solve driver. It must agree with HiGHS and CP-SAT (two independent proofs
through the MIP) on tiny instances of every kind, state a finished enumeration as a proof (bound =
objective, gap 0), claim no bound for one a time limit stopped, and refuse large spaces."""

from __future__ import annotations

import pytest

from codesign.backends import brute
from codesign.errors import InputError
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.registry import from_data
from codesign.proof.driver import solve
from codesign.tradeoffs.pareto import frontier
from codesign.tradeoffs.sensitivity import sensitivity

#: the MIPs meet the model to ~1e-9 (grids: the same arithmetic); ties closer than the driver's
#: confirming tolerance (1e-7) may differ
RTOL = 1e-7


def tiny_mapping():
    """2 devices, 2 modules, 3 layers: 2 partitions x (2 tiers)^3 weights x 1 kv x attachments."""
    return from_data(generate_mapping(devices=2, modules=2, layers=3, ports=1, weights=("local", "pool"), kv=("local",)))


@pytest.mark.parametrize("which", ["tiny-3d-llama8b", "tiny-placement-mixtral", "mapping"])
def test_brute_equals_highs_equals_cpsat(which, named):
    p = tiny_mapping() if which == "mapping" else named(which)
    assert p.space_size() <= brute.MAX_POINTS
    b = solve(p, solver="brute")
    assert b.solver == "brute" and b.status == "optimal"
    assert b.bound == b.objective and b.gap == 0.0
    assert b.proof["enumerated"] == "all" and b.proof["points"] == p.space_size()
    a = p.assess(p.parse_design(b.design))  # the record's design, re-evaluated by the model
    assert a.feasible and a.objective == b.objective
    for solver in ("highs", "cpsat"):
        sol = solve(p, solver=solver)
        assert sol.status == "optimal", (solver, sol.termination)
        assert sol.objective == pytest.approx(b.objective, rel=RTOL), solver


def test_an_infeasible_space_is_proved_infeasible(named):
    p = named("tiny-3d-llama8b").with_budgets(["system_power_W <= 1"])
    b = solve(p, solver="brute")
    assert b.status == "infeasible" and b.design is None and b.bound is None
    assert solve(p, solver="highs").status == "infeasible"


def test_a_time_limit_keeps_the_incumbent_without_a_bound(named):
    """tiny-placement-mixtral enumerates 4^8 placements in two chunks for each of 3 TP-group
    partitions; a deadline 1 ns away stops it after the first chunk (the first always runs)."""
    p = named("tiny-placement-mixtral")
    b = solve(p, solver="brute", time_limit=1e-9)
    assert b.status in ("feasible", "no_solution") and b.status != "optimal"
    assert b.bound is None and b.gap is None
    assert b.proof["enumerated"] == "part"
    assert "time limit" in b.termination
    full = solve(p, solver="brute")
    if b.design is not None:
        assert p.assess(p.parse_design(b.design)).feasible
        assert b.objective <= full.objective


def test_a_large_space_is_refused_with_its_size_and_the_limit(named):
    p = named("deepstack-multi-workload")  # 2.08e17 points
    with pytest.raises(InputError) as e:
        solve(p, solver="brute")
    text = str(e.value)
    assert "2.08e+17" in text and "1e+08" in text and "highs" in text and "cpsat" in text


def test_the_command_line_refuses_with_exit_2(cli):
    r = cli("solve", "deepstack-multi-workload", "--solver", "brute")
    assert r.exit_code == 2
    assert "2.08e+17" in r.output and "--solver highs" in r.output


def test_pareto_by_enumeration_equals_the_mip_frontier(named):
    p = named("tiny-3d-llama8b")
    by_brute = frontier(p, "tokens_per_s", "energy_per_token_J", solver="brute")
    by_highs = frontier(p, "tokens_per_s", "energy_per_token_J", solver="highs")
    assert by_brute.complete and by_highs.complete
    assert len(by_brute.points) == len(by_highs.points) >= 2
    for mine, theirs in zip(by_brute.points, by_highs.points, strict=True):
        assert (mine.x, mine.y) == pytest.approx((theirs.x, theirs.y), rel=RTOL)


def test_sensitivity_by_enumeration_equals_the_mip(named):
    p = named("tiny-3d-llama8b")
    vary = "power_W <= 30..80 step 10"
    by_brute, by_highs = sensitivity(p, vary, solver="brute"), sensitivity(p, vary, solver="highs")
    assert [pt.status for pt in by_brute.points] == [pt.status for pt in by_highs.points]
    assert "infeasible" in [pt.status for pt in by_brute.points]  # 30 W: nothing fits
    for mine, theirs in zip(by_brute.points, by_highs.points, strict=True):
        assert (mine.objective is None) == (theirs.objective is None)
        if mine.objective is not None:
            assert mine.objective == pytest.approx(theirs.objective, rel=RTOL)
