"""codesign.kinds.grid.formulation: the exact MIP of a hardware/schedule instance.

The presolve (dominated and provably worse hardware designs get no binary) keeps the optimum;
export and explain build without the bound presolve; the skyline is the plain one; the MIP's
objective of a decoded design is the model's; the integer grid CP-SAT solves under-estimates
each product by less than its step; each column of the one-hots selects the decisions the legend
says.
"""

from __future__ import annotations

import numpy as np
import pytest

from codesign.backends import solve as backend
from codesign.kinds.grid.formulation import build, formulation_of, nondominated
from codesign.kinds.grid.problem import Grid
from codesign.model.evaluate import evaluate
from codesign.proof.driver import judge_problem, run, solve
from codesign.proof.tolerances import OBJECTIVE_RTOL


def test_the_bound_presolve_runs_only_when_asked(named):
    """export and explain call build() without the bound presolve: the MIP keeps every design
    that is not dominated."""
    inst = named("small-3d-llama8b").inst
    assert "hardware-bound" not in build(inst).pruned
    assert "hardware-bound" in build(inst, decompose=True).pruned


@pytest.mark.parametrize("solver", ["highs", "cpsat"])
@pytest.mark.parametrize("name", ["tiny-3d-llama8b", "dgx-llama70b-chip-choice"])
def test_the_presolve_keeps_the_optimum(name, solver, named):
    p = named(name)
    off = formulation_of(build(p.inst, integer_grid=solver == "cpsat", decompose=False))
    r = run(off, judge_problem(p), solver)
    on = solve(p, solver=solver)
    assert r.status == on.status == "optimal"
    assert r.best.objective == pytest.approx(on.objective, rel=1e-9)


@pytest.mark.parametrize("name", ["tiny-3d-llama8b", "small-3d-llama8b", "deepstack-multi-workload"])
def test_the_mip_objective_of_a_decoded_design_is_the_models(name, named):
    """HiGHS on the MIP as built: the design it returns, evaluated by the model, has the MIP's
    objective x its unit (the internal objective)."""
    p = named(name)
    form = p.formulate("highs")
    res = backend(form.mip, "highs", mip_rel_gap=0.0, mip_abs_gap=0.0)
    assert res.status == "optimal"
    a = p.assess(form.decode(res.x))
    assert a.feasible
    assert res.objective * form.objective_unit == pytest.approx(a.internal, rel=OBJECTIVE_RTOL)


def test_the_internal_objective_of_throughput_is_the_weighted_time_per_token(named):
    """tokens/s = Σ weight / internal (one workload of weight 1: 1 / s per token)."""
    p = named("tiny-3d-llama8b")
    a = p.assess(p.baseline())
    assert a.internal == pytest.approx(1.0 / a.objective, rel=1e-12)
    assert p.to_user(a.internal) == pytest.approx(a.objective, rel=1e-12)


def test_each_column_describes_the_decisions_it_selects(named):
    """The legend of an export: a hardware column names the hardware decisions, a schedule
    column the workload's; decoding a vector with one of each chosen gives their union."""
    p = named("tiny-3d-llama8b")
    comp = build(p.inst)
    form = formulation_of(comp)
    assert form.onehot and set(form.design_vars) == {*comp.x, *comp.y["main"]}
    hw_names = {d.name for d in p.inst.hardware_decisions}
    for xi in comp.x[:5]:
        for yi in comp.y["main"][:5]:
            x = np.zeros(len(comp.mip.vars))
            x[[xi, yi]] = 1.0
            design = form.decode(x)
            hw, sched = form.describe(int(xi)), form.describe(int(yi))
            assert set(hw) == hw_names and set(sched) == set(design) - hw_names
            assert design == {**hw, **sched}


def test_blocked_skyline_equals_plain():
    def plain(f):
        keep = np.zeros(len(f), dtype=bool)
        sky = []
        for i in np.lexsort(f.T[::-1]):
            if any(np.all(s <= f[i]) for s in sky):
                continue
            sky.append(f[i])
            keep[i] = True
        return keep

    rng = np.random.default_rng(0)
    costs = rng.integers(0, 6, size=(700, 3)).astype(float)
    gains = rng.integers(0, 4, size=(700, 1)).astype(float)
    assert np.array_equal(nondominated(costs, gains, block=64), plain(np.column_stack([costs, -gains])))
    c2, g2 = rng.random((500, 3)), rng.random((500, 1))
    expected = plain(np.column_stack([c2, -g2]))
    assert expected.sum() > 5
    assert np.array_equal(nondominated(c2, g2, block=32), expected)
    assert nondominated(c2, g2, max_keep=5) is None


def test_the_skyline_by_hand():
    """Rows (cost, gain): (1, 5) dominates (2, 5) and (1, 4); (3, 9) is the only one with gain 9;
    an identical row keeps only the first."""
    costs = np.array([[1.0], [2.0], [1.0], [3.0], [1.0]])
    gains = np.array([[5.0], [5.0], [4.0], [9.0], [5.0]])
    assert nondominated(costs, gains).tolist() == [True, False, False, True, False]


def test_cpsats_integer_grid_enforces_a_lower_tpot_budget(named):
    """The grid under-estimates each product by < 1e-6 of its unit: the budget holds to that
    accuracy in the design CP-SAT returns."""
    p = named("tiny-3d-llama8b").with_budgets(["tpot_s >= 0.012"])
    comp = build(p.inst, integer_grid=True)
    res = backend(comp.mip, "cpsat")
    assert res.status in ("optimal", "feasible")
    design = comp.decode(res.x if res.x is not None else res.raw_x)
    (a,) = [a for a in evaluate(p.inst, design).audit if a.name == "budget[cli-1]"]
    assert a.value <= a.limit + 1e-5 * abs(a.limit), (a.value, a.limit)


def test_no_hardware_design_meeting_the_hardware_limits_is_an_empty_formulation(named):
    import copy

    raw = copy.deepcopy(named("tiny-3d-llama8b").data)
    raw["budgets"]["area_mm2"] = 10.0
    form = Grid.from_data(raw, source="test").formulate("highs")
    assert form.empty_reason == "no hardware design meets the hardware-only constraints"


def test_a_budget_no_design_meets_is_proven_by_the_bound_presolve(named, brute):
    """An energy budget just below the least energy per token (brute force) leaves no feasible
    design: the bound presolve's enumeration says so and the MIP is not solved (HiGHS took 110 s
    to prove the same on deepstack-qwen3-235b); without the presolve the MIP is built and proves
    it; just above the least energy the solve finds that design."""
    least = brute(named("tiny-3d-llama8b").with_objective("energy_per_token_J")).best.objective
    below = named("tiny-3d-llama8b").with_budgets([f"energy_per_token_J <= {least * (1 - 1e-6)!r}"])
    assert brute(below).best is None
    form = below.formulate("highs")
    assert form.empty_reason is not None and "bound presolve" in form.empty_reason
    assert solve(below).status == "infeasible"
    whole = formulation_of(build(below.inst, decompose=False))
    assert whole.empty_reason is None
    assert run(whole, judge_problem(below), "highs").status == "infeasible"
    above = named("tiny-3d-llama8b").with_budgets([f"energy_per_token_J <= {least * (1 + 1e-6)!r}"])
    sol = solve(above.with_objective("energy_per_token_J"))
    assert sol.status == "optimal" and sol.objective == pytest.approx(least, rel=1e-9)
