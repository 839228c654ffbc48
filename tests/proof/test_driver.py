"""codesign.proof.driver: the solve loop's own mechanics.

On hand-made formulations whose answers are known by hand and on stubbed backends: a judge that
rejects a design, a solver whose claim the model refutes, a time limit or Ctrl-C that stops the
run, a CP-SAT "infeasible" that HiGHS refutes, a design the solver could not keep, a confirming
round HiGHS's presolve fails, a presolve that leaves nothing. The exactness of the whole pipeline
is tests/proof/test_driver_exact_grid.py and test_driver_exact_assignment.py; cross_check and the
checks of the solver name and limits, test_driver_checks.py.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest

from codesign.errors import ModelError
from codesign.kinds.base import Assessment, Formulation
from codesign.kinds.registry import load as load_instance
from codesign.mip import linearize as lin
from codesign.mip.program import MIP
from codesign.proof import driver
from codesign.proof.driver import judge_problem, run, solve
from codesign.proof.records import user_gap
from codesign.proof.tolerances import CONFIRM_RTOL

from .exactness import RTOL, SOLVERS, better, check_solution_against, fuzz

# --------------------------------------------------------------------------------------------------
# the driver's mechanics, on formulations whose answers are known by hand
# --------------------------------------------------------------------------------------------------

COSTS = [5.0, 3.0, 4.0, 1.0, 2.0]


def choice(costs=COSTS) -> Formulation:
    """Choose one item (one-hot), minimise its cost: the optimum is the cheapest item."""
    mip = MIP("choice")
    z = lin.onehot(mip, "z", [str(i) for i in range(len(costs))])
    mip.set_objective(z, costs)
    return Formulation(mip=mip, objective_unit=1.0, decode=lambda x: {"item": int(np.argmax(x[z]))},
                       design_vars=z, onehot=True)


def counter(top: int = 6) -> Formulation:
    """An integer n in 0..top and a binary b, minimise 2n + 3b (design: (n, b); a no-good over a
    general integer needs its below/above indicators)."""
    mip = MIP("counter")
    n = mip.add_var("n", 0, top, integer=True)
    b = mip.add_binary("b")
    mip.set_objective([n, b], [2.0, 3.0])
    return Formulation(mip=mip, objective_unit=1.0, decode=lambda x: {"n": round(x[n]), "b": round(x[b])},
                       design_vars=np.array([n, b]))


def judge_by(value, reject=lambda d: False):
    """A stub judge: the design's value by hand; ``reject(design)`` makes the model refuse it."""

    def judge(design):
        f = value(design)
        return not reject(design), f, Assessment(dict(design), True, f, f, {})

    return judge


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_rejected_design_is_excluded_and_the_search_goes_on(solver):
    """The judge refuses the two cheapest items (costs 1 and 2): the driver excludes each and
    proves the next, cost 3 (item 1)."""
    form = choice()
    r = run(form, judge_by(lambda d: COSTS[d["item"]], reject=lambda d: d["item"] in (3, 4)), solver)
    assert r.status == "optimal"
    assert r.best.design == {"item": 1} and r.best_internal == 3.0
    assert r.rejected == 2
    assert r.bound == 3.0


@pytest.mark.parametrize("solver", SOLVERS)
def test_general_integer_designs_are_excluded_one_by_one(solver):
    """Rejecting (0, 0), (1, 0) and (0, 1): the best left is n = 2, b = 0 (cost 4) against
    (1, 1) at 5 and (3, 0) at 6."""
    form = counter()
    refused = [{"n": 0, "b": 0}, {"n": 1, "b": 0}, {"n": 0, "b": 1}]
    r = run(form, judge_by(lambda d: 2 * d["n"] + 3 * d["b"], reject=lambda d: d in refused), solver)
    assert r.status == "optimal" and r.best.design == {"n": 2, "b": 0} and r.best_internal == 4.0
    assert r.rejected == 3


@pytest.mark.parametrize("solver", SOLVERS)
def test_when_the_judge_refuses_every_design_there_is_none(solver):
    form = choice([2.0, 1.0])
    r = run(form, judge_by(lambda d: 1.0, reject=lambda d: True), solver)
    assert r.status == "infeasible" and r.best is None and r.rejected == 2


@pytest.mark.parametrize("solver", SOLVERS)
def test_the_rows_a_run_adds_are_removed_after_it(solver):
    form = counter()
    before = (len(form.mip.vars), len(form.mip.rows), len(form.mip.indicators))
    run(form, judge_by(lambda d: 2 * d["n"] + 3 * d["b"], reject=lambda d: d["n"] < 3), solver)
    assert (len(form.mip.vars), len(form.mip.rows), len(form.mip.indicators)) == before


def test_a_solver_claim_the_model_refutes_is_a_model_error(named):
    """The MIP is exact: its objective of a design equals the model's. A formulation whose
    objective is off by 1 % (a wrong unit) is caught on the first design."""
    p = named("tiny-3d-llama8b")
    form = p.formulate("highs")
    form.objective_unit *= 1.01
    with pytest.raises(ModelError, match="differs from the model"):
        run(form, judge_problem(p), "highs")


def test_a_judge_that_disagrees_with_the_mip_objective_is_caught():
    """Hand-made: the judge prices item 3 at 10 while the MIP says 1."""
    with pytest.raises(ModelError):
        run(choice(), judge_by(lambda d: 10.0 if d["item"] == 3 else COSTS[d["item"]]), "highs")


def test_a_feasibility_question_ends_at_the_first_accepted_design():
    form = choice()
    form.mip.set_objective([], [])
    r = run(form, judge_by(lambda d: 0.0, reject=lambda d: d["item"] == 0), "highs")
    assert r.status == "optimal" and r.best.design["item"] != 0
    assert "a design the model accepts" in r.termination


@pytest.mark.parametrize("name", ["tiny-3d-llama8b", "tiny-pf-mapping", "tiny-placement-mixtral", "deepstack-qwen3-235b"])
@pytest.mark.parametrize("solver", SOLVERS)
def test_a_time_limited_solve_keeps_a_verified_incumbent_and_a_valid_bound(name, solver, named, brute):
    """A limit too short for more than its first round (which always runs): whatever design it
    keeps is feasible for the model and no better than the optimum, and its bound holds for the
    optimum (>= it for a maximum, <= for a minimum); the gap is stated between the two."""
    p = named(name)
    best = brute(p).best
    sol = solve(p, solver=solver, time_limit=1e-9)
    assert sol.status in ("optimal", "feasible", "no_solution"), sol.status
    if sol.design is not None:
        a = p.assess(p.parse_design(sol.design))
        assert a.feasible and a.objective == pytest.approx(sol.objective, rel=1e-12)
        assert not better(p.sense, sol.objective, best.objective, CONFIRM_RTOL)
    if sol.bound is not None:
        assert not better(p.sense, best.objective, sol.bound, CONFIRM_RTOL), (sol.bound, best.objective)
        if sol.design is not None:
            assert sol.gap == pytest.approx(user_gap(p.sense, sol.objective, sol.bound), rel=1e-12, abs=1e-15)
    if sol.status != "optimal":
        assert "time limit" in sol.termination.lower() or sol.status == "no_solution", sol.termination


def test_ctrl_c_keeps_the_incumbent_and_its_bound(named, brute, monkeypatch):
    """Ctrl-C during the second round: the first round's verified design and bound are kept and
    the termination says it was interrupted."""
    real, calls = driver.backend_solve, []

    def interrupted_later(mip, solver, **o):
        calls.append(solver)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(mip, solver, **o)

    monkeypatch.setattr(driver, "backend_solve", interrupted_later)
    p = named("tiny-3d-llama8b")
    sol = solve(p, solver="highs")
    assert sol.termination.startswith("interrupted after")
    assert sol.status == "feasible" and sol.design is not None
    assert p.assess(sol.design).feasible
    assert not better(p.sense, brute(p).best.objective, sol.bound, CONFIRM_RTOL)


def test_a_presolve_that_leaves_nothing_is_infeasible_without_a_solve():
    p = fuzz(1)
    sol = solve(p, solver="highs")
    assert sol.status == "infeasible" and sol.termination.startswith("presolve:")
    assert sol.proof["reason"]


# --------------------------------------------------------------------------------------------------
# a solver answer the driver must not take (stubbed backends)
# --------------------------------------------------------------------------------------------------


def test_a_cpsat_infeasible_verdict_that_highs_refutes_raises(named, monkeypatch):
    """Fuzz case 5's check (test_driver_exact_grid.py) made deterministic: CP-SAT (stubbed) says
    infeasible on a feasible instance, and HiGHS's refutation is a ModelError."""
    real = driver.backend_solve

    def cpsat_says_infeasible(mip, solver, **o):
        r = real(mip, solver, **o)
        if solver == "cpsat":
            r = dataclasses.replace(r, status="infeasible", termination="INFEASIBLE", x=None, raw_x=None,
                                    objective=None, bound=None)
        return r

    monkeypatch.setattr(driver, "backend_solve", cpsat_says_infeasible)
    with pytest.raises(ModelError, match="HiGHS finds"):
        solve(named("tiny-3d-llama8b"), solver="cpsat")


def test_a_design_the_solver_could_not_keep_is_still_priced(named, brute, monkeypatch):
    """CP-SAT's re-solve after unrounding may drop a design it found (status no_solution, the
    design only in raw_x). If the model accepts it, it counts: excluding it unpriced let the
    loop call a worse design optimal (22,841 instead of 24,079 tok/s)."""
    real, calls = driver.backend_solve, []

    def first_design_dropped(mip, solver, **o):
        r = real(mip, solver, **o)
        calls.append(solver)
        if len(calls) == 1 and r.x is not None:
            r = dataclasses.replace(r, status="no_solution", termination="OPTIMAL; design infeasible after unrounding",
                                    x=None, objective=None)
        return r

    monkeypatch.setattr(driver, "backend_solve", first_design_dropped)
    p = named("tiny-3d-llama8b")
    check_solution_against(p, solve(p, solver="cpsat"), brute(p).best, RTOL)


def test_a_confirming_round_highs_fails_in_presolve_is_retried_without_it(monkeypatch):
    """HiGHS's presolve once emptied the confirming model of a random tiny mapping
    (benchmarks/stress_exactness.py, mapping draw 85) and reported "Solve error", which left the
    optimum "feasible", gap 0, unproven: the driver solves such a round again without presolve.
    The mapping MIP's valid cuts changed that model, so HiGHS is stubbed here: every round after
    the first answers "error" unless presolve is off."""
    real = driver.backend_solve
    calls = []

    def presolve_fails(mip, solver, **o):
        calls.append(o)
        r = real(mip, solver, **o)
        if len(calls) > 1 and o.get("options", {}).get("presolve") != "off":
            r = dataclasses.replace(r, status="error", termination="Solve error", x=None, raw_x=None,
                                    objective=None, bound=None)
        return r

    monkeypatch.setattr(driver, "backend_solve", presolve_fails)
    p = load_instance(Path(__file__).resolve().parent.parent / "data" / "mapping-highs-confirm-solve-error.toml")
    sol = solve(p, solver="highs")
    assert sol.status == "optimal", sol.termination
    assert "retried without presolve after: Solve error" in sol.termination
    assert calls[-1]["options"]["presolve"] == "off"
    assert sol.objective == pytest.approx(p.brute_force().best.objective, rel=1e-9)


def test_a_round_the_limit_stops_says_so_when_the_solver_does_not(named, monkeypatch):
    """CP-SAT stopped by its time limit answers only FEASIBLE: the termination says the limit ended
    the run (a flaky test under load found the bare word)."""
    real = driver.backend_solve

    def stopped(mip, solver, **o):
        res = real(mip, solver, **o)
        if o.get("time_limit") is not None:
            time.sleep(o["time_limit"])  # as a solver its limit stops: the round takes all of it
        return dataclasses.replace(res, status="feasible", termination="FEASIBLE", bound=None)

    monkeypatch.setattr(driver, "backend_solve", stopped)
    sol = driver.solve(named("tiny-placement-mixtral"), solver="cpsat", time_limit=1e-9)
    assert sol.status == "feasible" and sol.bound is None
    assert sol.termination.startswith("time limit reached in round 1") and "(FEASIBLE)" in sol.termination
    # without a limit the solver's own words stand
    sol = driver.solve(named("tiny-placement-mixtral"), solver="cpsat")
    assert sol.status == "feasible" and sol.termination == "FEASIBLE"


def test_highs_is_handed_each_cutoff_as_its_objective_bound_and_still_proves(monkeypatch):
    """Choice of costs 5, 3, 4, 1, 2: round 1 proves item 3 (cost 1); the confirming round asks
    for a design below 1 - CONFIRM_RTOL both by the row and by HiGHS's objective_bound, finds
    none ("infeasible", in HiGHS's words about the bound), and the run ends optimal at 1."""
    real, calls = driver.backend_solve, []

    def spy(mip, solver, **o):
        calls.append(o.get("objective_bound"))
        return real(mip, solver, **o)

    monkeypatch.setattr(driver, "backend_solve", spy)
    r = run(choice(), judge_by(lambda d: COSTS[d["item"]]), "highs", objective_bound=True)
    assert r.status == "optimal" and r.best.design == {"item": 3} and r.bound == 1.0
    assert calls == [None, 1.0 - CONFIRM_RTOL]
    assert "no solution has objective below the objective bound" in r.termination


@pytest.mark.parametrize(("cutoff", "item"), [(2.5, 3), (1.0, 3), (2.0, 3), (0.5, None)])
def test_a_given_cutoff_as_an_objective_bound_keeps_the_designs_at_most_it(cutoff, item):
    """A given cutoff keeps the designs at most it: 2.5 and 2 leave items 3 and 4 (costs 1, 2),
    1.0 leaves item 3 exactly at it (HiGHS's bound is strict: it is handed the next float up);
    below 1 nothing is left."""
    r = run(choice(), judge_by(lambda d: COSTS[d["item"]]), "highs", cutoff=cutoff, objective_bound=True)
    if item is None:
        assert r.status == "infeasible" and r.best is None
    else:
        assert r.status == "optimal" and r.best.design == {"item": item} and r.best_internal == 1.0


def test_a_design_highs_keeps_at_its_objective_bound_is_still_judged(monkeypatch):
    """HiGHS may keep a design at or above its objective bound and call the round infeasible
    below it. The model decides: here the judge prices item 0 at 0.5 (the MIP says 5), so the
    confirming round's kept item 0 becomes the best and is confirmed by one more round."""
    real, kept = driver.backend_solve, []

    def keeps_item_0(mip, solver, **o):
        res = real(mip, solver, **o)
        if o.get("objective_bound") is not None and not kept:
            kept.append(o["objective_bound"])
            x = np.zeros(len(mip.vars))
            x[0] = 1.0
            res = dataclasses.replace(res, status="infeasible", x=x, raw_x=x, objective=5.0, bound=None)
        return res

    monkeypatch.setattr(driver, "backend_solve", keeps_item_0)
    prices = [0.5, 3.0, 4.0, 1.0, 2.0]
    r = run(choice(), judge_by(lambda d: prices[d["item"]]), "highs", objective_bound=True)
    assert r.status == "optimal" and r.best.design == {"item": 0} and r.best_internal == 0.5
    assert r.rounds == 3 and r.bound == 0.5
    # and a kept design the model does not put below the bound ends the run as before
    kept.clear()
    r = run(choice(), judge_by(lambda d: COSTS[d["item"]]), "highs", objective_bound=True)
    assert r.status == "optimal" and r.best.design == {"item": 3} and r.rounds == 2


def test_by_default_no_backend_is_handed_an_objective_bound(monkeypatch):
    """HiGHS 1.16.0 looped at the root of pf-dense1t-joint's confirming round with the option
    (random_seed 12), deaf to its time limit: the driver hands it no objective bound by default."""
    real, calls = driver.backend_solve, []

    def spy(mip, solver, **o):
        calls.append(o.get("objective_bound"))
        return real(mip, solver, **o)

    monkeypatch.setattr(driver, "backend_solve", spy)
    r = run(choice(), judge_by(lambda d: COSTS[d["item"]]), "highs")
    assert r.status == "optimal" and calls == [None, None]
